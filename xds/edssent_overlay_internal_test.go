package xds

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestSentAssignmentsOverlayModel checks a delta stream's record of the
// assignments sent against a plain map over random histories shaped like
// a first sync and what follows it: ascending runs of names (each run
// continuing where the last stopped, as an Envoy's parts do, with names
// repeated inside a run and names sent before), runs out of order,
// removals, subscription changes kept to (with and without a subscription
// known to hold every name sent) and wildcards. After every step it checks
// has and len against the model, that the overlay holds no name of the
// shared set and keeps its names sorted and unrepeated while it is a
// slice, and that a record as large as the subscription it is known to be
// within has no overlay left (it is that subscription's set).
func TestSentAssignmentsOverlayModel(t *testing.T) {
	for seed := range uint64(300) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 13))
			universe := make([]string, 100+r.IntN(500))
			for i := range universe {
				universe[i] = fmt.Sprintf("c%04d", i)
			}
			var s sentAssignments
			model := map[string]bool{}
			ds := deltaSub{names: emptyNames, held: &deltaHeld{versions: map[string]string{}}}
			wild := false
			sendable := func(n string) bool { return wild || ds.names.has(n) }
			send := func(names []string) {
				s.add(true, names, time.Time{}, 0)
				for _, n := range names {
					model[n] = true
				}
			}
			next := 0 // where the next ascending run starts
			for step := range 300 {
				switch op := r.IntN(20); {
				case op < 9: // an ascending run, from where the last stopped
					if next >= len(universe) || r.IntN(8) == 0 {
						next = r.IntN(len(universe))
					}
					var names []string
					for ; next < len(universe) && len(names) < 1+r.IntN(150); next++ {
						n := universe[next]
						if !sendable(n) {
							continue
						}
						names = append(names, n)
						if r.IntN(20) == 0 { // repeated in the response
							names = append(names, n)
						}
					}
					if r.IntN(4) == 0 && len(model) > 0 { // names sent before, in order
						for n := range model {
							names = append(names, n)
							if r.IntN(3) == 0 {
								break
							}
						}
						slices.Sort(names)
					}
					send(names)
				case op < 11: // names in no order, some repeated
					var names []string
					for range 1 + r.IntN(40) {
						if n := universe[r.IntN(len(universe))]; sendable(n) {
							names = append(names, n)
							if r.IntN(4) == 0 {
								names = append(names, n)
							}
						}
					}
					send(names)
				case op < 13: // a response reports names removed
					var names []string
					for range 1 + r.IntN(10) {
						names = append(names, universe[r.IntN(len(universe))])
					}
					if r.IntN(2) == 0 && len(names) > 1 {
						names = append(names, names[0])
					}
					s.remove(names)
					for _, n := range names {
						delete(model, n)
					}
				default: // a new request: the subscription changes, or not
					var add, rem []string
					if r.IntN(2) == 0 { // a range, as CDS parts subscribe
						from := r.IntN(len(universe))
						add = slices.Clone(universe[from:min(len(universe), from+r.IntN(300))])
					}
					for range r.IntN(30) {
						add = append(add, universe[r.IntN(len(universe))])
					}
					for range r.IntN(20) {
						rem = append(rem, universe[r.IntN(len(universe))])
					}
					switch r.IntN(3) {
					case 0:
						add, rem = nil, nil
					case 1:
						rem = nil // the subscription grows (grewFrom)
					}
					ds.update(add, rem)
					wild = r.IntN(10) == 0
					if wild {
						s.unbounded()
						break
					}
					s.keep(ds.names.m, ds.names, ds.grewFrom)
					for n := range model {
						if !ds.names.has(n) {
							delete(model, n)
						}
					}
				}
				checkSentAssignments(t, step, &s, universe, model)
			}
		})
	}
}

func checkSentAssignments(t *testing.T, step int, s *sentAssignments, universe []string, model map[string]bool) {
	t.Helper()
	for _, n := range universe {
		if s.has(n) != model[n] {
			t.Fatalf("step %d: has(%s) = %v, the model says %v", step, n, s.has(n), model[n])
		}
	}
	if s.len() != len(model) {
		t.Fatalf("step %d: %d names sent, the model says %d", step, s.len(), len(model))
	}
	if s.set == nil {
		return
	}
	for n := range s.extra.all() {
		if s.set.has(n) {
			t.Fatalf("step %d: %s both in the set and the overlay", step, n)
		}
	}
	if s.extra.m == nil {
		for i := 1; i < len(s.extra.asc); i++ {
			if s.extra.asc[i-1] >= s.extra.asc[i] {
				t.Fatalf("step %d: the overlay's slice has %s before %s", step, s.extra.asc[i-1], s.extra.asc[i])
			}
		}
	}
	if s.within != nil && s.len() == s.within.len() && s.extra.len() != 0 {
		t.Fatalf("step %d: %d names sent, as many as the subscription they are within, but %d of them in the overlay", step, s.len(), s.extra.len())
	}
}
