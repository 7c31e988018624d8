package xds

import (
	"fmt"
	"testing"
	"unsafe"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/xdsbridge/xdsbridge/xds/store"
)

// TestSplitResponseKeepsOnlyItsNames: what a stream keeps of a response
// split in parts until the client answers (the record of the part, the
// rest) holds those names only, not the larger slices they were cut from:
// a fleet of Envoys syncing at once keeps one per stream and type.
func TestSplitResponseKeepsOnlyItsNames(t *testing.T) {
	c := NewCache(WithTypes(ClusterType), WithMaxResponseBytes(4<<10))
	var rs []store.Resource
	for i := range 300 {
		n := fmt.Sprintf("c%03d", i)
		rs = append(rs, store.Resource{Name: n, Msg: &cluster.Cluster{Name: n}})
	}
	if err := c.Apply(store.Change{TypeURL: ClusterType, Upserts: rs}); err != nil {
		t.Fatal(err)
	}
	c.MarkReady()
	d := NewDeltaDriver(c, 1)
	if _, err := d.Watch(&discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType}); err != nil {
		t.Fatal(err)
	}
	r := d.Take()
	if r == nil || len(r.Resources) == 0 || len(r.Resources) == 300 {
		t.Fatalf("want a first part of the 300 clusters, got %v", r)
	}
	h := d.sub.held
	if len(h.inflight) != 1 {
		t.Fatalf("%d responses in flight, want 1", len(h.inflight))
	}
	if s := h.inflight[0]; cap(s.changed) > 2*len(s.changed) {
		t.Errorf("the record of %d names holds room for %d", len(s.changed), cap(s.changed))
	}
	all := c.types[ClusterType].AllNames().All()
	if len(h.rest)+len(r.Resources) != 300 || unsafe.SliceData(h.rest) != &all[len(all)-len(h.rest)] {
		t.Errorf("the rest (%d names) is not the end of the type's names", len(h.rest))
	}
}
