package xds

import (
	"fmt"
	"testing"
	"unsafe"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/xdsbridge/xdsbridge/xds/store"
	"google.golang.org/genproto/googleapis/rpc/status"
)

// TestSplitResponseKeepsOnlyItsNames: what a stream keeps of a response
// split in parts until the client answers (the record of the part, the
// rest) holds those names only, not the larger slices they were cut from:
// a fleet of Envoys syncing at once keeps one per stream and type.
func TestSplitResponseKeepsOnlyItsNames(t *testing.T) {
	c, d, _, r := splitClusters(t)
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

// TestSplitResponseAfterARejectionSharesItsRest: a rejected part's names
// join the rest in a copy of the stream's own; the response that sends
// the first half of them, cut by the halving, leaves a rest that is a run
// of the type's names, shared with them, not the tail of that copy (which
// would hold every name of the rest and of the rejected part, those sent
// since among them, for as long as the client's sync goes on).
func TestSplitResponseAfterARejectionSharesItsRest(t *testing.T) {
	c, d, cancel, r := splitClusters(t)
	if len(r.Resources) < 4 {
		t.Fatalf("want a first part of at least 4 clusters, got %d", len(r.Resources))
	}
	first := len(r.Resources)
	cancel()
	if _, err := d.Watch(&discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType, ResponseNonce: r.Nonce, ErrorDetail: &status.Status{Message: "bad"}}); err != nil {
		t.Fatal(err)
	}
	r = d.Take()
	if r == nil || len(r.Resources) != (first+1)/2 {
		t.Fatalf("want the first half of the %d names rejected, got %v", first, r)
	}
	h := d.sub.held
	all := c.types[ClusterType].AllNames().All()
	if len(h.rest)+len(r.Resources) != 300 {
		t.Fatalf("rest of %d names after %d sent, want %d", len(h.rest), len(r.Resources), 300-len(r.Resources))
	}
	if unsafe.SliceData(h.rest) != &all[len(all)-len(h.rest)] {
		t.Errorf("the rest (%d names, room for %d) is not the end of the type's names", len(h.rest), cap(h.rest))
	}
}

// TestSplitResponseAfterANameCameSharesItsRest: a client's rest is a run
// of the type's names as they were; once a name comes, they are new, and
// the next part leaves a rest that is a run of the new ones, not a copy
// of the client's own (which a fleet of Envoys syncing while names come
// and go would hold one of each, of up to every name of the type).
func TestSplitResponseAfterANameCameSharesItsRest(t *testing.T) {
	c, d, cancel, r := splitClusters(t)
	sent := len(r.Resources)
	cancel()
	if err := c.Apply(store.Change{TypeURL: ClusterType, Upserts: []store.Resource{{Name: "c999", Msg: &cluster.Cluster{Name: "c999"}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Watch(&discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType, ResponseNonce: r.Nonce}); err != nil {
		t.Fatal(err)
	}
	if r = d.Take(); r == nil || len(r.Resources) == 0 {
		t.Fatalf("want the second part, got %v", r)
	}
	sent += len(r.Resources)
	h := d.sub.held
	all := c.types[ClusterType].AllNames().All()
	if len(h.rest) == 0 || len(h.rest)+sent != 301 {
		t.Fatalf("rest of %d names after %d sent, want %d", len(h.rest), sent, 301-sent)
	}
	if unsafe.SliceData(h.rest) != &all[len(all)-len(h.rest)] {
		t.Errorf("the rest (%d names, room for %d) is not the end of the type's names", len(h.rest), cap(h.rest))
	}
}

// splitClusters is a cache of 300 clusters, sent in parts of 4 KiB, and a
// delta client's wildcard watch of them answered with the first part
// (cancel ends the watch).
func splitClusters(t *testing.T) (*Cache, *DeltaDriver, func(), *discovery.DeltaDiscoveryResponse) {
	t.Helper()
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
	cancel, err := d.Watch(&discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType})
	if err != nil {
		t.Fatal(err)
	}
	r := d.Take()
	if r == nil || len(r.Resources) == 0 || len(r.Resources) == 300 {
		t.Fatalf("want a first part of the 300 clusters, got %v", r)
	}
	return c, d, cancel, r
}
