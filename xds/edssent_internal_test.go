package xds

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestSentAssignmentsModel checks a delta stream's record of the
// assignments sent against a plain map, over random histories of sends,
// removals and subscription changes (each send within the subscription,
// as respondDelta sends only names of interest; a wildcard lets anything
// be sent).
func TestSentAssignmentsModel(t *testing.T) {
	for seed := range uint64(300) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 7))
			universe := make([]string, 40+r.IntN(200))
			for i := range universe {
				universe[i] = fmt.Sprintf("c%03d", i)
			}
			var s sentAssignments
			model := map[string]bool{}
			ds := deltaSub{names: emptyNames, held: &deltaHeld{versions: map[string]string{}}} // the server's subscription
			sub := ds.names
			wild := false
			for step := range 200 {
				switch op := r.IntN(10); {
				case op < 5: // a response sends some names of interest
					var names []string
					for range 1 + r.IntN(80) {
						n := universe[r.IntN(len(universe))]
						if wild || sub.has(n) {
							names = append(names, n)
						}
					}
					s.add(true, names, time.Time{}, 0)
					for _, n := range names {
						model[n] = true
					}
				case op < 6: // a response reports names removed
					var names []string
					for range 1 + r.IntN(10) {
						names = append(names, universe[r.IntN(len(universe))])
					}
					s.remove(names)
					for _, n := range names {
						delete(model, n)
					}
				default: // a new request: the subscription changes, or not
					var add, rem []string
					for range r.IntN(60) {
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
					sub = ds.names
					wild = r.IntN(8) == 0
					if wild {
						s.unbounded()
					} else {
						s.keep(sub.m, sub, ds.grewFrom)
						for n := range model {
							if !sub.has(n) {
								delete(model, n)
							}
						}
					}
				}
				for _, n := range universe {
					if s.has(n) != model[n] {
						t.Fatalf("step %d: has(%s) = %v, the model says %v", step, n, s.has(n), model[n])
					}
				}
				if s.len() != len(model) {
					t.Fatalf("step %d: %d names sent, the model says %d", step, s.len(), len(model))
				}
				for n := range s.extra.all() {
					if s.set.has(n) {
						t.Fatalf("step %d: %s both in the set and the overlay", step, n)
					}
				}
			}
		})
	}
}

// TestSentAssignmentsSyncLinear: an Envoy's first sync of n assignments in
// parts copies O(n) names into shared sets, not O(n²), and ends holding
// its subscription's set; a second Envoy on the same path builds nothing.
func TestSentAssignmentsSyncLinear(t *testing.T) {
	const n, part = 20000, 65
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("service-%05d", i)
	}
	sub := emptyNames.derive(names, nil)
	// Envoys in step (a fleet syncing at once): each part to each.
	sync := func(envoys int) []*sentAssignments {
		ss := make([]*sentAssignments, envoys)
		for i := range ss {
			ss[i] = &sentAssignments{}
			ss[i].keep(sub.m, sub, nil)
		}
		for p := range slices.Chunk(names, part) {
			for _, s := range ss {
				s.add(true, p, time.Time{}, 0)
				s.keep(sub.m, sub, sub) // the part's ACK, a new watch
			}
		}
		return ss
	}
	before := nameSets.built.Load()
	a := sync(1)[0]
	built := nameSets.built.Load() - before
	if a.set != sub || a.extra.len() != 0 {
		t.Fatalf("after the sync: set %p (%d names) + %d in the overlay, want the subscription's set %p", a.set, a.set.len(), a.extra.len(), sub)
	}
	if built > 2*n {
		t.Fatalf("the sync built sets of %d names in all for %d names: want at most %d", built, n, 2*n)
	}
	t.Logf("%d names in %d parts: sets of %d names built (%.2f per name)", n, (n+part-1)/part, built, float64(built)/n)

	before = nameSets.built.Load()
	for i, s := range sync(8) {
		if s.set != sub {
			t.Errorf("Envoy %d does not hold the subscription's set", i)
		}
	}
	if again := nameSets.built.Load() - before; again > 2*n {
		t.Errorf("8 Envoys in step built sets of %d names, want at most %d (shared)", again, 2*n)
	}
}

// TestSentAssignmentsAddSortedNames: names sent in responses (sorted,
// and some not) that the record already holds are not counted twice,
// whether they are in its shared set or its overlay.
func TestSentAssignmentsAddSortedNames(t *testing.T) {
	names := func(from, to int) []string {
		var out []string
		for i := from; i < to; i++ {
			out = append(out, fmt.Sprintf("c%04d", i))
		}
		return out
	}
	var s sentAssignments
	want := map[string]bool{}
	rev := names(90, 200)
	slices.Reverse(rev)
	for _, part := range [][]string{
		names(0, 100),   // folded into the shared set
		names(50, 140),  // half of it held
		names(130, 135), // a few, all held
		rev,             // not sorted
	} {
		s.add(true, part, time.Time{}, 0)
		for _, n := range part {
			want[n] = true
		}
		if s.len() != len(want) {
			t.Errorf("after %d names from %s: %d names recorded, want %d", len(part), part[0], s.len(), len(want))
		}
		for _, n := range names(0, 210) {
			if s.has(n) != want[n] {
				t.Errorf("has(%s) = %v, want %v", n, s.has(n), want[n])
			}
		}
	}
}

// TestSentAssignmentsSotwModel checks a sotw stream's record of the
// assignments sent against a plain map of when each was last sent, over
// random histories of sends, removals and requests (sotwSub.set: the
// names listed again, as an ACK does, or changed; a wildcard lets
// anything be sent), on a clock that moves by up to 60 ms a step against
// a settle window of 100 ms: the record says a name was sent as the map
// does, and the time it gives holds a route back (mbb.go) exactly when
// the time of the map does; a send past the window is dropped by the
// next.
func TestSentAssignmentsSotwModel(t *testing.T) {
	const window = 100 * time.Millisecond
	for seed := range uint64(300) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 13))
			universe := make([]string, 10+r.IntN(60))
			for i := range universe {
				universe[i] = fmt.Sprintf("c%03d", i)
			}
			var s sentAssignments
			model := map[string]time.Time{}
			listed := []string{universe[0]}
			sub := newSotwSub(listed)
			s.keep(sub.SubscribedResources(), sub.names, nil)
			now := time.Unix(1000, 0)
			for step := range 200 {
				now = now.Add(time.Duration(r.IntN(60)) * time.Millisecond)
				switch op := r.IntN(10); {
				case op < 5: // a response sends some names of interest
					var names []string
					for range 1 + r.IntN(10) {
						n := universe[r.IntN(len(universe))]
						if _, ok := sub.SubscribedResources()[n]; ok || sub.IsWildcard() {
							names = append(names, n)
						}
					}
					slices.Sort(names)
					names = slices.Compact(names)
					s.add(false, names, now, window)
					for _, n := range names {
						model[n] = now
					}
					if n := len(s.recent); n > 0 && !now.Before(s.recent[0].at.Add(window)) {
						t.Fatalf("step %d: a send of %v kept at %v, past the settle window", step, s.recent[0].at, now)
					}
				case op < 6: // a response reports names removed
					n := universe[r.IntN(len(universe))]
					s.remove([]string{n})
					delete(model, n)
				default: // a request: the same names (an ACK), or others
					if r.IntN(2) == 0 {
						listed = nil
						for range 1 + r.IntN(len(universe)) {
							listed = append(listed, universe[r.IntN(len(universe))])
						}
						if r.IntN(8) == 0 {
							listed = append(listed, explicitWildcard)
						}
					}
					sub.set(slices.Clone(listed))
					if sub.IsWildcard() {
						s.unbounded()
						continue
					}
					s.keep(sub.SubscribedResources(), sub.names, nil)
					for n := range model {
						if _, ok := sub.SubscribedResources()[n]; !ok {
							delete(model, n)
						}
					}
				}
				check := now.Add(time.Duration(r.IntN(120)) * time.Millisecond)
				for _, n := range universe {
					at, sent := s.sentAt(n)
					want, wantSent := model[n]
					if s.has(n) != wantSent || sent != wantSent {
						t.Fatalf("step %d: has(%s) = %v, sentAt says %v, the model says %v", step, n, s.has(n), sent, wantSent)
					}
					if sent && check.Before(at.Add(window)) != check.Before(want.Add(window)) {
						t.Fatalf("step %d: %s sent at %v by the record, %v by the model: at %v the settle window differs", step, n, at, want, check)
					}
				}
			}
		})
	}
}
