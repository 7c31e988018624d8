package store

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
)

// TestWireIndexFollowsThroughKeyCopies: through upserts and deletions of
// long names, enough for the index to copy its keys again several times,
// the index holds exactly the entries the type serves, each under its
// name with its version and slot, and its copies' bytes stay within a
// bound of the names and versions served.
func TestWireIndexFollowsThroughKeyCopies(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	s := New(typeRank, resource.ClusterType, resource.EndpointType)
	ts := s.Type(resource.EndpointType)
	pad := strings.Repeat("x", 200)
	rebuilt := 0
	for step := range 400 {
		ch := Change{TypeURL: resource.EndpointType}
		for range 1 + r.IntN(20) {
			n := fmt.Sprintf("%s-%03d", pad, r.IntN(300))
			if r.IntN(2) == 0 {
				ch.Deletes = append(ch.Deletes, n)
			} else {
				ch.Upserts = append(ch.Upserts, Resource{Name: n, Msg: &endpoint.ClusterLoadAssignment{ClusterName: fmt.Sprint(n, step)}})
			}
		}
		garbage := 0
		s.Wire().Read([]byte(resource.EndpointType), func(w *WireType) {
			if w != nil {
				garbage = w.garbage
			}
		})
		if err := s.Apply(ch); err != nil {
			t.Fatal(err)
		}
		s.Wire().Read([]byte(resource.EndpointType), func(w *WireType) {
			if w.garbage < garbage {
				rebuilt++
			}
			if len(w.entries) != len(ts.Resources) {
				t.Fatalf("step %d: the index holds %d entries, the type serves %d", step, len(w.entries), len(ts.Resources))
			}
			live := 0
			for n, e := range ts.Resources {
				if got := w.Entry(n); got != e {
					t.Fatalf("step %d: the index holds %v for %s, the type serves %v", step, got, n, e)
				}
				if name, got := w.WireName([]byte(n)); got.Entry != e || got.Version != e.Version || got.Slot != e.Slot || name != e.Name {
					t.Fatalf("step %d: WireName(%s) = %q, %+v", step, n, name, got)
				}
				if f, ok := w.Find([]byte(n)); !ok || f.Entry != e || f.Version != e.Version || f.Slot != e.Slot {
					t.Fatalf("step %d: Find(%s) = %+v, %v; want %+v", step, n, f, ok, e)
				}
				live += len(n) + len(e.Version)
			}
			if w.live != live || w.garbage > live+keyChunk {
				t.Fatalf("step %d: copies of %d bytes and %d of garbage; the names and versions served have %d", step, w.live, w.garbage, live)
			}
		})
	}
	if rebuilt == 0 {
		t.Fatal("the keys were never copied again: the case is not made")
	}
}
