package xds

import (
	"fmt"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/xdsbridge/xdsbridge/xds/store"
)

// TestSotwRequestLooksAtNoMoreThanItsInterest: a sotw client of a few
// assignments by name (grpc-go) whose last response is old, while the
// fleet's other assignments churned, sends a request that asks for
// nothing new (its names in another order, as grpc-go lists them from a
// map, or one name fewer, as when a route stops naming a cluster). The
// state stays complete (sotwSub.set), but the watch must not walk the
// change log since the state's generation (up to 262,144 names, under
// the cache's lock) when a full check looks at three names: the
// request would cost what changed in the whole fleet, not what it lists.
func TestSotwRequestLooksAtNoMoreThanItsInterest(t *testing.T) {
	c := NewCache(WithTypes(EndpointType))
	load := testAssignment
	var res []store.Resource
	for i := range 2000 {
		res = append(res, load(fmt.Sprintf("c%05d", i), 0))
	}
	if err := c.Apply(store.Change{TypeURL: EndpointType, Upserts: res}); err != nil {
		t.Fatal(err)
	}
	c.MarkReady()
	s := newDiffSotwStream(c, 1)
	names := []string{"c00001", "c00002", "c00003"}
	s.request(t, &discovery.DiscoveryRequest{TypeUrl: EndpointType, ResourceNames: names})
	r := s.takeAll()[0]
	s.request(t, &discovery.DiscoveryRequest{TypeUrl: EndpointType, ResourceNames: names, ResponseNonce: r.Nonce, VersionInfo: r.VersionInfo})
	// The rest of the fleet's assignments change, not the client's.
	for k := range 20 {
		var ups []store.Resource
		for i := 100; i < 2000; i++ {
			ups = append(ups, load(fmt.Sprintf("c%05d", i), uint32(k+1)))
		}
		if err := c.Apply(store.Change{TypeURL: EndpointType, Upserts: ups}); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.takeAll(); len(got) != 0 {
		t.Fatalf("%d responses to a client none of whose names changed", len(got))
	}
	for _, nm := range [][]string{{"c00003", "c00002", "c00001"}, {"c00003", "c00001"}} {
		s.request(t, &discovery.DiscoveryRequest{TypeUrl: EndpointType, ResourceNames: nm, ResponseNonce: r.Nonce, VersionInfo: r.VersionInfo})
		c.lock()
		w := c.streams[s.key].types.at(EndpointType).last
		looked := len(w.ss.names)
		full := w.ss.full
		c.unlock()
		if !full && looked > len(names) {
			t.Errorf("request %v: the watch looks at %d names changed since the state, a full check at %d", nm, looked, len(nm))
		}
		if got := s.takeAll(); len(got) != 0 {
			t.Fatalf("request %v: %d responses, want none", nm, len(got))
		}
	}
}
