package xds

import (
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/xdsbridge/xdsbridge/xds/store"
)

// TestSotwSkippedRequestDroppingTheWildcard: a sotw client subscribed to
// "*" and b drops the wildcard (and with it a) in a request skipped for
// its stale nonce, then lists a again: a is sent again.
func TestSotwSkippedRequestDroppingTheWildcard(t *testing.T) {
	c := NewCache(WithTypes(EndpointType))
	if err := c.Apply(store.Change{TypeURL: EndpointType, Upserts: []store.Resource{testAssignment("a", 0), testAssignment("b", 0)}}); err != nil {
		t.Fatal(err)
	}
	c.MarkReady()
	s := newDiffSotwStream(c, 1)
	s.request(t, &discovery.DiscoveryRequest{TypeUrl: EndpointType, ResourceNames: []string{"*", "b"}})
	r1 := s.takeAll()
	if len(r1) != 1 || len(r1[0].Resources) != 2 {
		t.Fatalf("first response: %v", r1)
	}
	s.request(t, &discovery.DiscoveryRequest{TypeUrl: EndpointType, ResourceNames: []string{"*", "b"}, ResponseNonce: r1[0].Nonce})
	if err := c.Apply(store.Change{TypeURL: EndpointType, Upserts: []store.Resource{testAssignment("b", 1)}}); err != nil {
		t.Fatal(err)
	}
	r2 := s.takeAll()
	if len(r2) != 1 {
		t.Fatalf("second response: %v", r2)
	}
	// The client drops the wildcard and a, answering r1 (stale: skipped).
	s.request(t, &discovery.DiscoveryRequest{TypeUrl: EndpointType, ResourceNames: []string{"b"}, ResponseNonce: r1[0].Nonce})
	// Then lists a again, answering r2.
	s.request(t, &discovery.DiscoveryRequest{TypeUrl: EndpointType, ResourceNames: []string{"a", "b"}, ResponseNonce: r2[0].Nonce})
	got := s.takeAll()
	sent := false
	for _, r := range got {
		if len(r.Resources) > 0 {
			sent = true
		}
	}
	if !sent {
		t.Fatal("a, dropped with the wildcard in a skipped request and listed again, is not sent")
	}
}
