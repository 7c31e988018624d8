package xds

import (
	"fmt"
	"slices"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/xdsbridge/xdsbridge/xds/store"
)

// TestSotwSkippedUnlistThenRelistedClusterDeletedIsRemoved: a sotw CDS
// client (grpc-go) of clusters A and B gets r1 (A and B, B changed). Before
// r1 arrives it stops watching A (its request without A, with r0's nonce,
// is skipped) and watches A again (skipped too); r1 then arrives and the
// client, watching A, takes A from it. A is deleted; the client's answer
// to r1 lists A and B. The client holds A: the full-state type must send
// a response without A, or the client keeps the deleted cluster.
func TestSotwSkippedUnlistThenRelistedClusterDeletedIsRemoved(t *testing.T) {
	c := NewCache(WithTypes(ClusterType))
	cl := func(n, v string) store.Resource {
		return store.Resource{Name: n, Msg: &cluster.Cluster{Name: n, AltStatName: v}}
	}
	if err := c.Apply(store.Change{TypeURL: ClusterType, Upserts: []store.Resource{cl("A", "0"), cl("B", "0")}}); err != nil {
		t.Fatal(err)
	}
	c.MarkReady()
	s := newDiffSotwStream(c, 1)
	both := []string{"A", "B"}
	s.request(t, &discovery.DiscoveryRequest{TypeUrl: ClusterType, ResourceNames: both})
	r0 := s.takeAll()[0]
	s.request(t, &discovery.DiscoveryRequest{TypeUrl: ClusterType, ResourceNames: both, ResponseNonce: r0.Nonce, VersionInfo: r0.VersionInfo})
	if err := c.Apply(store.Change{TypeURL: ClusterType, Upserts: []store.Resource{cl("B", "1")}}); err != nil {
		t.Fatal(err)
	}
	got := s.takeAll()
	if len(got) != 1 || len(got[0].GetResources()) != 2 {
		t.Fatalf("r1: %v, want one response of A and B", got)
	}
	r1 := got[0]
	s.request(t, &discovery.DiscoveryRequest{TypeUrl: ClusterType, ResourceNames: []string{"B"}, ResponseNonce: r0.Nonce, VersionInfo: r0.VersionInfo})
	s.request(t, &discovery.DiscoveryRequest{TypeUrl: ClusterType, ResourceNames: both, ResponseNonce: r0.Nonce, VersionInfo: r0.VersionInfo})
	if err := c.Apply(store.Change{TypeURL: ClusterType, Deletes: []string{"A"}}); err != nil {
		t.Fatal(err)
	}
	s.request(t, &discovery.DiscoveryRequest{TypeUrl: ClusterType, ResourceNames: both, ResponseNonce: r1.Nonce, VersionInfo: r1.VersionInfo})
	got = s.takeAll()
	if len(got) != 1 || len(got[0].GetResources()) != 1 {
		t.Fatalf("after A's deletion, the client holding A from r1 got %v, want one response of B alone", got)
	}
}

// TestSotwSkippedKeepsWhatItLists: a request skipped for its stale nonce
// costs what it lists, not the subscription's size: a client subscribed
// to 50,000 names (max_names_per_stream) that never answers its response
// and sends requests with another nonce leaves the subscription's names
// each of them listed, at most as many as it lists, not those it did not
// list (a pass over the 50,000 names per request).
func TestSotwSkippedKeepsWhatItLists(t *testing.T) {
	names := make([]string, 50000)
	for i := range names {
		names[i] = fmt.Sprintf("cluster-%05d", i)
	}
	s := newSotwSub(slices.Clone(names))
	s.skipped([]string{names[7], names[9], "x"})
	if !s.skipping || len(s.kept) != 2 {
		t.Fatalf("after a skipped request of 3 names (2 subscribed): skipping %v, %d names kept", s.skipping, len(s.kept))
	}
	s.skipped(nil)
	if !s.skipping || len(s.kept) != 0 {
		t.Fatalf("after a skipped empty request: skipping %v, %d names kept", s.skipping, len(s.kept))
	}
	// The next request taken holds the others at no version.
	s.held.versions.put(names[7], "v7")
	s.held.versions.put(names[8], "v8")
	s.set(names)
	if s.skipping || s.held.versions.at(names[7]) != "" || s.held.versions.at(names[8]) != "" || s.held.complete {
		t.Fatalf("the request taken after: %+v", s.held)
	}
}
