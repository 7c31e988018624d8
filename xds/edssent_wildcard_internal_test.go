package xds

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// TestSentAssignmentsWildcardModel: as TestSentAssignmentsModel, but
// the subscription is the server's own (newDeltaSub from a legacy
// wildcard request, then updates that subscribe and unsubscribe "*"), and
// the record is kept as edsInterest keeps it (a wildcard: unbounded).
func TestSentAssignmentsWildcardModel(t *testing.T) {
	for seed := range uint64(300) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 11))
			universe := make([]string, 40+r.IntN(100))
			for i := range universe {
				universe[i] = fmt.Sprintf("c%03d", i)
			}
			var s sentAssignments
			model := map[string]bool{}
			ds := newDeltaSub(nil, nil, nil, nil)
			interest := func() {
				if ds.IsWildcard() {
					s.unbounded()
					return
				}
				s.keep(ds.SubscribedResources(), ds.names, ds.grewFrom)
				for n := range model {
					if !ds.names.has(n) {
						delete(model, n)
					}
				}
			}
			interest()
			for step := range 200 {
				switch op := r.IntN(10); {
				case op < 5:
					var names []string
					for range 1 + r.IntN(40) {
						n := universe[r.IntN(len(universe))]
						if ds.IsWildcard() || ds.names.has(n) {
							names = append(names, n)
						}
					}
					s.add(true, names, time.Time{}, 0)
					for _, n := range names {
						model[n] = true
					}
				case op < 6:
					var names []string
					for range 1 + r.IntN(10) {
						names = append(names, universe[r.IntN(len(universe))])
					}
					s.remove(names)
					for _, n := range names {
						delete(model, n)
					}
				default:
					var add, rem []string
					for range r.IntN(30) {
						add = append(add, universe[r.IntN(len(universe))])
					}
					for range r.IntN(10) {
						rem = append(rem, universe[r.IntN(len(universe))])
					}
					if r.IntN(4) == 0 {
						add = append(add, explicitWildcard)
					}
					if r.IntN(4) == 0 {
						rem = append(rem, explicitWildcard)
					}
					switch r.IntN(3) {
					case 0:
						add, rem = nil, nil
					case 1:
						rem = nil
					}
					ds.update(add, rem)
					interest()
				}
				for _, n := range universe {
					if s.has(n) != model[n] {
						t.Fatalf("step %d: has(%s) = %v, the model says %v", step, n, s.has(n), model[n])
					}
				}
			}
		})
	}
}
