package xds

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"
)

// TestSetTableUnderCollisionsAndGC: with a hash that collides on purpose
// (identity over small keys: {1,4} and {2,3} have one sum and size), random
// derivations from shared sets, in goroutines at once while the collector
// runs, always give the set asked for, and never change a set handed out.
func TestSetTableUnderCollisionsAndGC(t *testing.T) {
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

// TestSetTableCollectsSetsWithTheirEntries: on a table of its own (the
// process-wide one also holds other tests' sets, whose collection would
// pass for these), every set nothing holds is collected, and the table
// keeps no entry of it.
func TestSetTableCollectsSetsWithTheirEntries(t *testing.T) {
	tab := newSetTable(func(n string) uint64 { return uint64(len(n)) * 0x9e3779b97f4a7c15 })
	s := tab.empty
	for i := range 50 {
		s = s.derive([]string{fmt.Sprint("rv3-", i)}, nil)
		_ = tab.empty.derive([]string{fmt.Sprint("rv3-other-", i)}, []string{"x"})
	}
	if tab.live() == 0 || tab.entries() == 0 {
		t.Fatal("no set in the table")
	}
	s = nil
	deadline := time.Now().Add(10 * time.Second)
	for tab.live()+tab.entries() > 0 && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if l, e := tab.live(), tab.entries(); l+e > 0 {
		t.Fatalf("%d sets alive, %d entries kept after nothing holds them", l, e)
	}
}
