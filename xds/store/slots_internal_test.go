package store

import (
	"fmt"
	"math/rand/v2"
	"testing"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
)

// TestSlotsDenseAndKept: through random upserts and deletions, every
// served resource has a slot of its own, below the wire index's bound and
// below the most resources served at once (bounded); a new version keeps its
// resource's slot (a cluster's change re-versions its assignment too);
// and the wire index is at the type's generation.
func TestSlotsDenseAndKept(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	s := New(typeRank, resource.ClusterType, resource.EndpointType)
	ts := s.Type(resource.EndpointType)
	most := 0
	for step := range 300 {
		ch := Change{TypeURL: resource.EndpointType}
		for range 1 + r.IntN(8) {
			n := fmt.Sprintf("s%02d", r.IntN(40))
			if r.IntN(3) == 0 {
				ch.Deletes = append(ch.Deletes, n)
			} else {
				ch.Upserts = append(ch.Upserts, Resource{Name: n, Msg: &endpoint.ClusterLoadAssignment{ClusterName: fmt.Sprint(n, step)}})
			}
		}
		before := map[string]int32{}
		for n, e := range ts.Resources {
			before[n] = e.Slot
		}
		if err := s.Apply(ch); err != nil {
			t.Fatal(err)
		}
		// (Within a step, the upserts are served before the deletions.)
		most = max(most, len(before)+len(ch.Upserts))
		var wt *WireType
		s.Wire().Read([]byte(resource.EndpointType), func(w *WireType) { wt = w })
		if wt.Gen != ts.Gen {
			t.Fatalf("step %d: wire index at generation %d, type at %d", step, wt.Gen, ts.Gen)
		}
		seen := map[int32]string{}
		for n, e := range ts.Resources {
			if o, dup := seen[e.Slot]; dup {
				t.Fatalf("step %d: %s and %s share slot %d", step, n, o, e.Slot)
			}
			seen[e.Slot] = n
			if e.Slot < 0 || int(e.Slot) >= most || e.Slot >= wt.SlotBound {
				t.Fatalf("step %d: %s has slot %d (most served %d, bound %d)", step, n, e.Slot, most, wt.SlotBound)
			}
			if old, ok := before[n]; ok && old != e.Slot {
				t.Fatalf("step %d: %s moved from slot %d to %d", step, n, old, e.Slot)
			}
		}
	}
}
