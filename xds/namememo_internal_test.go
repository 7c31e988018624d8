package xds

import (
	"fmt"
	"hash/maphash"
	"maps"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestDeriveMatchesMapModel: streams deriving their subscriptions at once
// from shared sets, with the same arguments taken from a small pool (so
// that derivations are found by their arguments) and arguments reused and
// overwritten by the caller after each call, always hold the set a plain
// map gives, and its names in order; a name cursor over it answers as the
// map. Also with a table whose hash tells few names apart, where
// derivations of other arguments share keys and only the comparison of
// the names tells them apart.
func TestDeriveMatchesMapModel(t *testing.T) {
	for _, tc := range []struct {
		name string
		tab  *setTable[string]
	}{
		{"names", nameSets},
		{"colliding", ordered(newSetTable(func(n string) uint64 { return uint64(len(n) % 2) }), strings.Compare)},
	} {
		t.Run(tc.name, func(t *testing.T) { deriveMatchesMapModel(t, tc.tab) })
	}
}

func deriveMatchesMapModel(t *testing.T, tab *setTable[string]) {
	const streams, steps = 4, 60
	pool := make([][]string, 24)
	rng := rand.New(rand.NewPCG(11, 12))
	for i := range pool {
		for range rng.IntN(6) {
			pool[i] = append(pool[i], fmt.Sprintf("m%02d", rng.IntN(30)))
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, streams)
	for g := range streams {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 13))
			s, model := tab.empty, map[string]struct{}{}
			var held []*nameSet
			add, remove := make([]string, 0, 8), make([]string, 0, 8)
			for step := range steps {
				add = append(add[:0], pool[rng.IntN(len(pool))]...)
				remove = append(remove[:0], pool[rng.IntN(len(pool))]...)
				if rng.IntN(3) == 0 {
					remove = remove[:0]
				}
				s = s.derive(add, remove)
				for _, n := range add {
					model[n] = struct{}{}
				}
				for _, n := range remove {
					delete(model, n)
				}
				// The caller's slices are its own: overwritten, with the
				// names of other arguments of as many names.
				for _, args := range [][]string{add, remove} {
					if other := pool[rng.IntN(len(pool))]; len(other) == len(args) {
						copy(args, other)
					}
				}
				want := slices.Sorted(maps.Keys(model))
				if got := slices.Sorted(maps.Keys(s.m)); !slices.Equal(got, want) {
					errs <- fmt.Errorf("stream %d step %d: set %v, want %v", g, step, got, want)
					return
				}
				if !slices.Equal(s.sorted, want) {
					errs <- fmt.Errorf("stream %d step %d: sorted %v, want %v", g, step, s.sorted, want)
					return
				}
				// Names asked in order, then again out of order.
				asked := make([]int, 0, 64)
				for i := range 32 {
					asked = append(asked, i)
				}
				asked = append(asked, rng.Perm(32)...)
				cur := newNameCursor(s)
				for _, i := range asked {
					n := fmt.Sprintf("m%02d", i)
					if _, ok := model[n]; cur.has(n) != ok {
						errs <- fmt.Errorf("stream %d step %d: cursor on %s says %v", g, step, n, !ok)
						return
					}
				}
				if step%7 == 0 {
					held = append(held, s)
				}
			}
			_ = held
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestDeriveCallsForgottenWithTheirSets: the arguments a set remembers of a
// derivation from it (sharedSet.calls) go when the set derived is
// collected: a set that lives on (the empty set, every stream's root) does
// not keep a departed fleet's subscriptions.
func TestDeriveCallsForgottenWithTheirSets(t *testing.T) {
	tab := ordered(newSetTable(func(n string) uint64 { return maphash.String(nameSeed, n) }), strings.Compare)
	root := tab.empty
	for i := range 4 {
		add := make([]string, 500)
		for j := range add {
			add[j] = fmt.Sprintf("set%d-name%04d", i, j)
		}
		if s := root.derive(add, nil); s.len() != len(add) {
			t.Fatalf("derive of %d names gave %d", len(add), s.len())
		}
	}
	kept := func() int {
		root.mu.Lock()
		defer root.mu.Unlock()
		return len(root.calls)
	}
	deadline := time.Now().Add(5 * time.Second)
	for kept() > 0 && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	if n := kept(); n > 0 {
		t.Fatalf("the root still remembers %d derivations whose sets were collected", n)
	}
}

// TestDeriveParentsOfALiveSetBounded: a set that lives on, reached again
// and again from new sets that are then collected (a fleet reconnecting
// wave after wave), keeps no record of each parent it ever had.
func TestDeriveParentsOfALiveSetBounded(t *testing.T) {
	tab := ordered(newSetTable(func(n string) uint64 { return maphash.String(nameSeed, n) }), strings.Compare)
	base := []string{"a", "b", "c"}
	child := tab.empty.derive(base, nil)
	parents := func() int {
		child.parents.mu.Lock()
		defer child.parents.mu.Unlock()
		return len(child.parents.m)
	}
	for i := range 40 {
		extra := fmt.Sprintf("x%d", i)
		p := tab.empty.derive(append(slices.Clone(base), extra), nil)
		if p.derive(nil, []string{extra}) != child {
			t.Fatalf("wave %d: the set reached again is another", i)
		}
		runtime.GC()
	}
	if n := parents(); n > 4 {
		t.Errorf("the set records %d parents, most of them collected", n)
	}
}
