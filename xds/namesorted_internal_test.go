package xds

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestNameSetSortedNames: every set of names keeps its names sorted,
// however it was reached: names added, removed, removed and added again,
// names removed that it does not hold, and a set found equal by another
// path.
func TestNameSetSortedNames(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	names := func(k int) []string {
		out := make([]string, rng.IntN(k+1))
		for i := range out {
			out[i] = fmt.Sprintf("n%02d", rng.IntN(40))
		}
		return out
	}
	for run := range 300 {
		s := emptyNames
		var held []*nameSet // kept alive, so that later paths find them
		for step := range 12 {
			s = s.derive(names(8), names(4))
			held = append(held, s)
			if want := slices.Sorted(maps.Keys(s.m)); !slices.Equal(s.sorted, want) {
				t.Fatalf("run %d step %d: sorted %v, want %v", run, step, s.sorted, want)
			}
		}
		_ = held
	}
}

// TestNameCursorAnswersAsTheSet: a cursor answers as the set's map for
// names asked in order, out of order, absent, repeated, and before and
// after every name of the set.
func TestNameCursorAnswersAsTheSet(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for run := range 200 {
		var add []string
		for range rng.IntN(60) {
			add = append(add, fmt.Sprintf("c%03d", 1+rng.IntN(200)))
		}
		s := emptyNames.derive(add, nil)
		var asked []string
		for range 80 {
			asked = append(asked, fmt.Sprintf("c%03d", rng.IntN(202)))
		}
		if run%2 == 0 {
			slices.Sort(asked) // a pass's names: in order, some repeated
		}
		cur := newNameCursor(s)
		for i, n := range asked {
			if got, want := cur.has(n), s.has(n); got != want {
				t.Fatalf("run %d: name %d (%s) of %v: has %v, want %v (set %v)", run, i, n, asked, got, want, s.sorted)
			}
		}
	}
}
