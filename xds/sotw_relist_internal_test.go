package xds

import (
	"testing"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/xdsbridge/xdsbridge/xds/store"
)

// testAssignment is the assignment of cluster name, of one locality at
// priority prio.
func testAssignment(name string, prio uint32) store.Resource {
	return store.Resource{Name: name, Msg: &endpoint.ClusterLoadAssignment{ClusterName: name,
		Endpoints: []*endpoint.LocalityLbEndpoints{{Priority: prio}}}}
}

// TestSotwRelistedAfterSkippedUnlistIsSent: an EDS stream of its own (an
// Envoy whose CDS comes on another stream) holds A and B. A's assignment
// is deleted while B's changes (one commit), and the response carrying B
// leaves. The client meanwhile dropped cluster A (its CDS stream is
// faster): its request without A carries the older nonce and is skipped;
// then it re-adds cluster A, and its answer to the response lists A
// again. A's assignment is re-created as it was. The client unsubscribed
// A (Envoy forgets the assignment with the cluster; the re-created
// cluster warms until it gets it): A must be sent, though the state keeps
// a deleted name the client lists at its old version (sotwPass.consider).
func TestSotwRelistedAfterSkippedUnlistIsSent(t *testing.T) {
	c := NewCache(WithTypes(EndpointType))
	load := testAssignment
	if err := c.Apply(store.Change{TypeURL: EndpointType, Upserts: []store.Resource{load("A", 0), load("B", 0)}}); err != nil {
		t.Fatal(err)
	}
	c.MarkReady()
	s := newDiffSotwStream(c, 1)
	both := []string{"A", "B"}
	s.request(t, &discovery.DiscoveryRequest{TypeUrl: EndpointType, ResourceNames: both})
	r0 := s.takeAll()[0]
	s.request(t, &discovery.DiscoveryRequest{TypeUrl: EndpointType, ResourceNames: both, ResponseNonce: r0.Nonce, VersionInfo: r0.VersionInfo})
	// A deleted, B changed: the response carries B.
	if err := c.Apply(store.Change{TypeURL: EndpointType, Upserts: []store.Resource{load("B", 1)}, Deletes: []string{"A"}}); err != nil {
		t.Fatal(err)
	}
	got := s.takeAll()
	if len(got) != 1 {
		t.Fatalf("%d responses, want 1", len(got))
	}
	r1 := got[0]
	// The client's request without A crossed r1: skipped.
	s.request(t, &discovery.DiscoveryRequest{TypeUrl: EndpointType, ResourceNames: []string{"B"}, ResponseNonce: r0.Nonce, VersionInfo: r0.VersionInfo})
	// A re-created as it was; the client's answer to r1 lists A again.
	if err := c.Apply(store.Change{TypeURL: EndpointType, Upserts: []store.Resource{load("A", 0)}}); err != nil {
		t.Fatal(err)
	}
	s.request(t, &discovery.DiscoveryRequest{TypeUrl: EndpointType, ResourceNames: both, ResponseNonce: r1.Nonce, VersionInfo: r1.VersionInfo})
	for _, r := range s.takeAll() {
		for _, a := range r.GetResources() {
			var la endpoint.ClusterLoadAssignment
			if err := a.UnmarshalTo(&la); err != nil {
				t.Fatal(err)
			}
			if la.GetClusterName() == "A" {
				return
			}
		}
	}
	t.Fatal("A, re-created after the client dropped and re-listed it, was never sent")
}
