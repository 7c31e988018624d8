package xds

import (
	"fmt"
	"slices"
	"testing"
	"time"

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

// TestSotwSkippedCostsItsRequest: a request skipped for its stale nonce
// costs what it lists, not the subscription's size: a client subscribed
// to 50,000 names (max_names_per_stream) that never answers its response
// and sends empty requests with another nonce must not make each cost a
// pass over the 50,000 names.
func TestSotwSkippedCostsItsRequest(t *testing.T) {
	if testing.Short() {
		t.Skip("timing")
	}
	perCall := func(n int) time.Duration {
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("cluster-%05d", i)
		}
		s := newSotwSub(slices.Clone(names))
		const calls = 200
		best := time.Duration(1 << 62)
		for range 3 {
			start := time.Now()
			for range calls {
				s.skipped(nil)
				s.skipped([]string{"x"})
			}
			best = min(best, time.Since(start)/calls)
		}
		return best
	}
	small, large := perCall(50), perCall(50000)
	if large > 50*small+20*time.Microsecond {
		t.Fatalf("a skipped empty request costs %v at 50,000 names, %v at 50: it scales with the subscription", large, small)
	}
}
