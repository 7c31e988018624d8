package xds

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// TestSotwVersionsModel checks versions against plain maps over random
// histories of puts, deletions and copies, each copy changed on its own:
// no state sees another's changes, whether it shares the base or not,
// and whether the copies of even seeds take the bases other states made
// (sharedBases) or not. Some copies must take one.
func TestSotwVersionsModel(t *testing.T) {
	taken := 0
	for seed := range uint64(200) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 17))
			var bases *sharedBases
			if seed%2 == 0 {
				bases = &sharedBases{}
			}
			universe := 5 + r.IntN(300)
			name := func() string { return fmt.Sprintf("n%03d", r.IntN(universe)) }
			type state struct {
				v     versions
				model map[string]string
			}
			states := []*state{{model: map[string]string{}}}
			check := func(step int) {
				for i, s := range states {
					if s.v.len() != len(s.model) {
						t.Fatalf("step %d state %d: len %d, the model %d", step, i, s.v.len(), len(s.model))
					}
					got := maps.Collect(s.v.all())
					if !maps.Equal(got, s.model) {
						t.Fatalf("step %d state %d: %v, the model %v", step, i, got, s.model)
					}
					for range 5 {
						n := name()
						v, ok := s.v.get(n)
						mv, mok := s.model[n]
						if v != mv || ok != mok || s.v.at(n) != mv {
							t.Fatalf("step %d state %d: get(%s) = %q, %v; the model %q, %v", step, i, n, v, ok, mv, mok)
						}
					}
				}
			}
			for step := range 400 {
				s := states[r.IntN(len(states))]
				switch op := r.IntN(10); {
				case op < 5:
					n, v := name(), fmt.Sprint(r.IntN(3))
					if r.IntN(6) == 0 {
						v = "" // a name of marks the client holds nothing of
					}
					s.v.put(n, v)
					s.model[n] = v
				case op < 8:
					n := name()
					s.v.del(n)
					delete(s.model, n)
				default:
					var before []map[string]string
					if bases != nil {
						before = slices.Clone(bases.recent)
					}
					c := &state{v: s.v.clone(bases), model: maps.Clone(s.model)}
					same := func(a, b map[string]string) bool {
						return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
					}
					if c.v.base != nil && !same(c.v.base, s.v.base) && slices.ContainsFunc(before, func(b map[string]string) bool { return same(b, c.v.base) }) {
						taken++
					}
					states = append(states, c)
					if len(states) > 6 {
						states = states[1:]
					}
				}
				check(step)
			}
		})
	}
	if taken == 0 {
		t.Error("no copy took a base another state made")
	}
	t.Logf("%d copies took a base another state made", taken)
}
