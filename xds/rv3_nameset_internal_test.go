package xds

import (
	"maps"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
)

// TestRV3SetsUnderCollisionsAndGC: with a hash that collides on purpose
// (identity over small keys: {1,4} and {2,3} have one sum and size), random
// derivations from shared sets, in goroutines at once while the collector
// runs, always give the set asked for, and never change a set handed out.
func TestRV3SetsUnderCollisionsAndGC(t *testing.T) {
	tab := newSetTable(func(k uint64) uint64 { return k })
	type held struct {
		s    *hashSet
		want map[uint64]struct{}
	}
	keys := func(rng *rand.Rand) []uint64 {
		out := make([]uint64, rng.IntN(4))
		for i := range out {
			out[i] = uint64(rng.IntN(8))
		}
		return out
	}
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			hs := []held{{tab.empty, map[uint64]struct{}{}}}
			for i := range 4000 {
				if i%500 == 0 {
					runtime.GC()
				}
				from := hs[rng.IntN(len(hs))]
				add, rem := keys(rng), keys(rng)
				want := maps.Clone(from.want)
				for _, k := range add {
					want[k] = struct{}{}
				}
				for _, k := range rem {
					delete(want, k)
				}
				got := from.s.derive(add, rem)
				if !maps.Equal(got.m, want) {
					errs <- "derive gave another set"
					return
				}
				hs = append(hs, held{got, want})
				if len(hs) > 16 {
					hs = hs[len(hs)-16:] // the others may be collected
				}
				for _, h := range hs {
					if !maps.Equal(h.s.m, h.want) {
						errs <- "a set handed out changed"
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
}
