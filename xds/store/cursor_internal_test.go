package store

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
)

// TestCursorFindsWhatResourcesHold: through random upserts and deletions
// (slots freed and taken by other names, names deleted and added again),
// a cursor answers every sequence of names as Resources does: names in
// order, in runs of neighbours, far apart, out of order, repeated, absent,
// and names that are copies of the store's strings.
func TestCursorFindsWhatResourcesHold(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	s := New(typeRank, resource.ClusterType, resource.EndpointType)
	ts := s.Type(resource.EndpointType)
	const space = 300
	name := func(i int) string { return fmt.Sprintf("s%03d", i) }
	for step := range 200 {
		ch := Change{TypeURL: resource.EndpointType}
		for range 1 + r.IntN(40) {
			n := name(r.IntN(space))
			if r.IntN(3) == 0 {
				ch.Deletes = append(ch.Deletes, n)
			} else {
				ch.Upserts = append(ch.Upserts, Resource{Name: n, Msg: &endpoint.ClusterLoadAssignment{ClusterName: fmt.Sprint(n, step)}})
			}
		}
		if err := s.Apply(ch); err != nil {
			t.Fatal(err)
		}
		for q := range 8 {
			var seq []string
			switch q % 4 {
			case 0: // a sorted sample of the name space, absent names among them
				for i := range space {
					if r.IntN(3) == 0 {
						seq = append(seq, name(i))
					}
				}
			case 1: // a run of neighbours among the served names, the store's strings
				all := ts.AllNames().All()
				if len(all) > 0 {
					i := r.IntN(len(all))
					seq = slices.Clone(all[i:min(len(all), i+1+r.IntN(60))])
				}
			case 2: // any order, repeats
				for range 50 {
					seq = append(seq, name(r.IntN(space)))
				}
			case 3: // few, far apart, with a name before every served one and one after
				seq = []string{"a", name(r.IntN(10)), name(100 + r.IntN(10)), name(290 + r.IntN(10)), "t"}
			}
			cur := ts.Cursor()
			for _, n := range seq {
				n = strings.Clone(n)
				e, ok := cur.Find(n)
				want, wantOK := ts.Resources[n]
				if ok != wantOK || e != want {
					t.Fatalf("step %d, sequence %d: Find(%s) = %v, %v; Resources hold %v, %v (sequence %v)", step, q, n, e, ok, want, wantOK, seq)
				}
			}
		}
	}
}
