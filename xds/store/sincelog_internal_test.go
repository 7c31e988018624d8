package store

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestSinceLogOneAllocation: the names changed after a generation are
// gathered into one slice of their number, however many commits they
// came in, and none when nothing changed.
func TestSinceLogOneAllocation(t *testing.T) {
	s := New(func(string) int { return 0 }, resource.ClusterType)
	ts := s.types[resource.ClusterType]
	for i := range 20 {
		n := fmt.Sprintf("c%02d", i%5)
		c := clusterVariant(n, i)
		if err := s.Apply(Change{TypeURL: resource.ClusterType, Upserts: []Resource{{Name: n, Msg: c}}}); err != nil {
			t.Fatal(err)
		}
	}
	gen := ts.Log[len(ts.Log)-12].Gen
	if got := ts.SinceLog(gen); len(got) != 11 {
		t.Fatalf("%d names changed after the 12th commit from the end, want 11", len(got))
	}
	if a := testing.AllocsPerRun(100, func() { ts.SinceLog(gen) }); a != 1 {
		t.Fatalf("%v allocations, want 1", a)
	}
	if a := testing.AllocsPerRun(100, func() { ts.SinceLog(ts.Gen) }); a != 0 {
		t.Fatalf("%v allocations with nothing changed, want 0", a)
	}
}

// TestSinceLogMatchesModel: through a history long enough for the change
// log to forget its oldest generations, the names SinceLog returns for
// every generation the log still covers (its floor, the first it holds,
// the newest, between) are those a plain record of every commit says
// changed after it (upserts that changed, deletions of names that
// existed), and none for the newest.
func TestSinceLogMatchesModel(t *testing.T) {
	s := New(func(string) int { return 0 }, resource.ClusterType)
	ts := s.types[resource.ClusterType]
	r := rand.New(rand.NewPCG(7, 11))
	served := map[string]int{}         // name → variant
	changedAt := map[uint64][]string{} // generation → names changed
	check := func() {
		t.Helper()
		gens := []uint64{ts.Floor, ts.Gen}
		if len(ts.Log) > 0 {
			gens = append(gens, ts.Log[0].Gen, ts.Log[0].Gen-1, ts.Log[len(ts.Log)-1].Gen-1)
		}
		for range 5 {
			gens = append(gens, ts.Floor+uint64(r.IntN(int(ts.Gen-ts.Floor)+1)))
		}
		for _, g := range gens {
			if g < ts.Floor {
				continue
			}
			want := map[string]bool{}
			for h := g + 1; h <= ts.Gen; h++ {
				for _, n := range changedAt[h] {
					want[n] = true
				}
			}
			got := ts.SinceLog(g)
			gotSet := map[string]bool{}
			for _, n := range got {
				gotSet[n] = true
			}
			if !maps.Equal(gotSet, want) {
				t.Fatalf("generation %d (floor %d, newest %d, log from %d): SinceLog %q, want %q", g, ts.Floor, ts.Gen, ts.Log[0].Gen, got, slices.Sorted(maps.Keys(want)))
			}
			if len(want) == 0 && got != nil {
				t.Fatalf("generation %d: SinceLog %q, want nil", g, got)
			}
			// Twice: the second from what the first built, until a commit.
			for range 2 {
				if sorted := ts.SortedSince(g); !slices.Equal(sorted, slices.Sorted(maps.Keys(want))) {
					t.Fatalf("generation %d: SortedSince %q, want %q", g, sorted, slices.Sorted(maps.Keys(want)))
				}
			}
		}
	}
	variant := 0
	forgot := 0 // steps since the log first forgot a generation
	for step := 0; forgot < 100; step++ {
		var ch Change
		ch.TypeURL = resource.ClusterType
		var changed []string
		for range 1 + r.IntN(3) {
			n := fmt.Sprintf("c%03d", r.IntN(60))
			if slices.Contains(changed, n) || slices.ContainsFunc(ch.Upserts, func(u Resource) bool { return u.Name == n }) {
				continue
			}
			switch {
			case r.IntN(4) == 0:
				ch.Deletes = append(ch.Deletes, n)
				if _, ok := served[n]; ok {
					changed = append(changed, n)
					delete(served, n)
				}
			default:
				v := variant
				if old, ok := served[n]; ok && r.IntN(5) == 0 {
					v = old // the same: no change
				} else {
					variant++
					v = variant
				}
				ch.Upserts = append(ch.Upserts, Resource{Name: n, Msg: clusterVariant(n, v)})
				if old, ok := served[n]; !ok || old != v {
					changed = append(changed, n)
				}
				served[n] = v
			}
		}
		before := ts.Gen
		if err := s.Apply(ch); err != nil {
			t.Fatal(err)
		}
		switch {
		case len(changed) == 0 && ts.Gen != before:
			t.Fatalf("step %d: a commit of nothing changed", step)
		case len(changed) > 0 && ts.Gen != before+1:
			t.Fatalf("step %d: %q changed in generations %d to %d", step, changed, before, ts.Gen)
		case len(changed) > 0:
			changedAt[ts.Gen] = changed
		}
		if ts.Floor > 0 {
			forgot++
		}
		// Some checks in a row: what SortedSince built before a commit
		// must not be given after it.
		if step%100 < 3 || len(ts.Log) >= maxLogGens-2 {
			check()
		}
	}
}

// clusterVariant is cluster n in variant v (its connect timeout): a
// different variant is a different version.
func clusterVariant(n string, v int) *cluster.Cluster {
	return &cluster.Cluster{Name: n, ConnectTimeout: durationpb.New(time.Duration(v+1) * time.Millisecond)}
}

// TestSortedSinceShared: between two commits, the callers asking for the
// names changed after one generation share one slice, built once; a commit
// makes it stale, and the next caller gets the names of the new commit too.
func TestSortedSinceShared(t *testing.T) {
	s := New(func(string) int { return 0 }, resource.ClusterType)
	ts := s.types[resource.ClusterType]
	apply := func(i int) {
		n := fmt.Sprintf("c%02d", i)
		if err := s.Apply(Change{TypeURL: resource.ClusterType, Upserts: []Resource{{Name: n, Msg: clusterVariant(n, i)}}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 6 {
		apply(5 - i)
	}
	gens := []uint64{ts.Log[0].Gen, ts.Log[1].Gen, ts.Log[2].Gen, ts.Log[3].Gen}
	first := ts.SortedSince(gens[0])
	if want := []string{"c00", "c01", "c02", "c03", "c04"}; !slices.Equal(first, want) {
		t.Fatalf("SortedSince %q, want %q", first, want)
	}
	for _, g := range gens {
		ts.SortedSince(g)
	}
	if a := testing.AllocsPerRun(50, func() {
		for _, g := range gens {
			ts.SortedSince(g)
		}
	}); a != 0 {
		t.Errorf("%v allocations for slices built before, want 0", a)
	}
	if again := ts.SortedSince(gens[0]); &again[0] != &first[0] {
		t.Error("a second caller at the same generation got a slice of its own")
	}
	apply(9)
	if got, want := ts.SortedSince(gens[0]), []string{"c00", "c01", "c02", "c03", "c04", "c09"}; !slices.Equal(got, want) {
		t.Fatalf("after a commit, SortedSince %q, want %q", got, want)
	}
	if len(first) != 5 || first[4] != "c04" {
		t.Fatalf("a slice given out was written: %q", first)
	}
}
