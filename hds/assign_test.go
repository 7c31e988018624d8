package hds

import (
	"fmt"
	"slices"
	"testing"
)

func checkers(n int, localities ...string) []candidate {
	out := make([]candidate, n)
	for i := range out {
		loc := ""
		if len(localities) > 0 {
			loc = localities[i%len(localities)]
		}
		out[i] = newCandidate(fmt.Sprintf("envoy-%d", i), loc)
	}
	return out
}

func TestAssignSpreadsOverLocalities(t *testing.T) {
	cs := checkers(6, "zone-a", "zone-a", "zone-b") // a a b a a b
	loc := map[string]string{}
	for _, c := range cs {
		loc[c.id] = c.locality
	}
	for i := range 1000 {
		got := assign(hashString(fmt.Sprintf("10.0.%d.%d:80", i/256, i%256)), cs, 2)
		if len(got) != 2 || got[0] == got[1] {
			t.Fatalf("endpoint %d: %v", i, got)
		}
		if loc[got[0]] == loc[got[1]] {
			t.Fatalf("endpoint %d: both checkers in %s: %v", i, loc[got[0]], got)
		}
	}
}

func TestAssignBalancesLoad(t *testing.T) {
	cs := checkers(10)
	load := map[string]int{}
	const n, k = 20000, 2
	for i := range n {
		for _, id := range assign(hashString(fmt.Sprintf("10.1.%d.%d:80", i/256, i%256)), cs, k) {
			load[id]++
		}
	}
	want := n * k / len(cs)
	for id, l := range load {
		if l < want*9/10 || l > want*11/10 {
			t.Errorf("%s has %d endpoints, want %d ± 10%%", id, l, want)
		}
	}
}

// A checker leaving moves only the endpoints it held; one joining takes
// endpoints only for itself.
func TestAssignMovesLittle(t *testing.T) {
	cs := checkers(8, "zone-a", "zone-b")
	const n, k = 5000, 2
	before := make([][]string, n)
	for i := range n {
		before[i] = assign(hashString(fmt.Sprintf("ep-%d", i)), cs, k)
	}
	gone := cs[3].id
	less := slices.Delete(slices.Clone(cs), 3, 4)
	moved := 0
	for i := range n {
		after := assign(hashString(fmt.Sprintf("ep-%d", i)), less, k)
		for _, id := range before[i] {
			if id != gone && !slices.Contains(after, id) {
				t.Fatalf("endpoint %d lost %s, which did not leave: %v → %v", i, id, before[i], after)
			}
		}
		if !slices.Equal(before[i], after) {
			moved++
			if !slices.Contains(before[i], gone) {
				t.Fatalf("endpoint %d moved without losing %s: %v → %v", i, gone, before[i], after)
			}
		}
	}
	// Roughly k/len(cs) of the endpoints held the leaver.
	if moved == 0 || moved > n*k/len(cs)*12/10 {
		t.Errorf("%d of %d endpoints moved", moved, n)
	}
	joined := append(slices.Clone(cs), newCandidate("envoy-new", "zone-a"))
	for i := range n {
		after := assign(hashString(fmt.Sprintf("ep-%d", i)), joined, k)
		if !slices.Equal(before[i], after) && !slices.Contains(after, "envoy-new") {
			t.Fatalf("endpoint %d moved between old checkers: %v → %v", i, before[i], after)
		}
	}
}

func TestAssignFewerCheckersThanK(t *testing.T) {
	if got := assign(hashString("ep"), checkers(1, "z"), 3); len(got) != 1 {
		t.Errorf("got %v", got)
	}
	if got := assign(hashString("ep"), nil, 2); got != nil {
		t.Errorf("got %v", got)
	}
}
