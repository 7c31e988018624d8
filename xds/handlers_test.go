package xds

import (
	"context"
	"maps"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/xdsbridge/xdsbridge/xds/store"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// These tests pin what the cache relies on in our stream handlers
// (sotwserver.go, deltaserver.go), run as served (newXDSServer).

// spy records the state each watch of the real handlers is created with.
type spy struct {
	*Cache
	mu     sync.Mutex
	states []snapshot
}

// snapshot is a copy of the state a watch was created with.
type snapshot struct {
	sotw  sotwHeld
	delta deltaHeld
}

func (s *spy) record(st snapshot) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.states = append(s.states, st)
}

func (s *spy) watchSotw(req *discovery.DiscoveryRequest, sub sotwSub, q sotwQueue) (func(), error) {
	h := *sub.held
	h.versions, h.marks = h.versions.clone(nil), maps.Clone(h.marks)
	s.record(snapshot{sotw: h})
	return s.Cache.watchSotw(req, sub, q)
}

func (s *spy) watchDelta(req *discovery.DeltaDiscoveryRequest, sub deltaSub, q deltaQueue) (func(), error) {
	h := *sub.held
	h.versions, h.inflight = maps.Clone(h.versions), slices.Clone(h.inflight)
	s.record(snapshot{delta: h})
	return s.Cache.watchDelta(req, sub, q)
}

func (s *spy) last(t *testing.T, n int) snapshot {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s.mu.Lock()
		if len(s.states) >= n {
			m := s.states[n-1]
			s.mu.Unlock()
			return m
		}
		s.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("no watch %d created", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (s *spy) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.states)
}

func startContract(t *testing.T) (*spy, discovery.AggregatedDiscoveryServiceClient) {
	t.Helper()
	c := NewCache()
	err := c.Apply(
		store.Change{TypeURL: ClusterType, Upserts: []store.Resource{{Name: "a", Msg: &cluster.Cluster{Name: "a"}}, {Name: "b", Msg: &cluster.Cluster{Name: "b"}}}},
		store.Change{TypeURL: EndpointType, Upserts: []store.Resource{{Name: "a", Msg: &endpoint.ClusterLoadAssignment{ClusterName: "a"}}, {Name: "b", Msg: &endpoint.ClusterLoadAssignment{ClusterName: "b"}}}},
	)
	if err != nil {
		t.Fatal(err)
	}
	c.MarkReady()
	sp := &spy{Cache: c}
	ctx, cancel := context.WithCancel(context.Background())
	gs := grpc.NewServer()
	discovery.RegisterAggregatedDiscoveryServiceServer(gs, newXDSServer(ctx, sp, nil))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(lis)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); cancel(); gs.Stop() })
	return sp, discovery.NewAggregatedDiscoveryServiceClient(conn)
}

// TestDeltaHandlerInstallsSentState: the delta handler installs the state
// of a response it sent, recording its nonce, and hands it back with the
// next request; a NACK names that nonce. Unsubscribing a name of a
// wildcard subscription marks it "" and keeps the state.
func TestDeltaHandlerInstallsSentState(t *testing.T) {
	sp, client := startContract(t)
	st, err := client.DeltaAggregatedResources(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer st.CloseSend()
	if err := st.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResourceNamesSubscribe: []string{"a", "b"}}); err != nil {
		t.Fatal(err)
	}
	r, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResponseNonce: r.Nonce, ErrorDetail: &status.Status{Message: "no"}}); err != nil {
		t.Fatal(err)
	}
	got := sp.last(t, 2).delta
	if !got.compact {
		t.Fatalf("state not handed back: %+v", got)
	}
	i := slices.IndexFunc(got.inflight, func(s *deltaSent) bool { return s.nonce == r.Nonce })
	if i < 0 || !slices.Equal(got.inflight[i].changed, []string{"a", "b"}) {
		t.Fatalf("the state does not record the response of nonce %s: %+v", r.Nonce, got)
	}

	if r, err = st.Recv(); err != nil || r.TypeUrl != EndpointType { // the first half, again
		t.Fatal(r, err)
	}

	// Unsubscribing a name of a wildcard subscription sets it to "" and
	// keeps the state.
	if err := st.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType}); err != nil {
		t.Fatal(err)
	}
	r, err = st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	n := sp.count()
	if err := st.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType, ResponseNonce: r.Nonce, ResourceNamesSubscribe: []string{"a"}}); err != nil {
		t.Fatal(err)
	}
	sp.last(t, n+1)
	if err := st.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType, ResourceNamesUnsubscribe: []string{"a"}}); err != nil {
		t.Fatal(err)
	}
	got = sp.last(t, n+2).delta
	if v, ok := got.versions["a"]; !ok || v != "" {
		t.Fatalf(`unsubscribing a from a wildcard: versions[a] = %q, %v; want "" (%+v)`, v, ok, got)
	}
	if !got.compact {
		t.Fatalf("state dropped on unsubscription: %+v", got)
	}
}

// TestSotwHandlerStateAndStaleNonce: on a request that names resources the
// sotw handler keeps the names' entries as the cache wrote them, and the
// state complete unless the request asks for a name it did not; it ignores
// a request with a stale nonce.
func TestSotwHandlerStateAndStaleNonce(t *testing.T) {
	sp, client := startContract(t)
	st, err := client.StreamAggregatedResources(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer st.CloseSend()
	if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: EndpointType, ResourceNames: []string{"a", "b"}}); err != nil {
		t.Fatal(err)
	}
	r, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	// While the response is unanswered, a request with another nonce is
	// ignored.
	if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: EndpointType, ResourceNames: []string{"a", "b"}, ResponseNonce: "stale"}); err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: EndpointType, ResourceNames: []string{"a", "b"}, ResponseNonce: r.Nonce, VersionInfo: r.VersionInfo}); err != nil {
		t.Fatal(err)
	}
	got := sp.last(t, 2).sotw
	if !got.complete {
		t.Fatalf("an ACK listing the same names made the state incomplete: %+v", got)
	}
	if m, ok := got.marks["a"]; !ok || !m.sent {
		t.Fatalf("the mark the cache wrote for a was not kept: %+v", got)
	}
	if _, ok := got.versions.get("b"); !ok {
		t.Fatalf("the request with a stale nonce was taken: %+v", got)
	}
	time.Sleep(100 * time.Millisecond)
	if n := sp.count(); n != 2 {
		t.Fatalf("%d watches: the request with a stale nonce was not ignored", n)
	}
	// Fewer names keep it complete; a name added does not.
	if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: EndpointType, ResourceNames: []string{"a"}, ResponseNonce: r.Nonce, VersionInfo: r.VersionInfo}); err != nil {
		t.Fatal(err)
	}
	if got := sp.last(t, 3).sotw; !got.complete || got.versions.len() != 1 {
		t.Fatalf("a request listing fewer names: %+v, want complete with a only", got)
	}
	if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: EndpointType, ResourceNames: []string{"a", "c"}, ResponseNonce: r.Nonce, VersionInfo: r.VersionInfo}); err != nil {
		t.Fatal(err)
	}
	if got := sp.last(t, 4).sotw; got.complete {
		t.Fatalf("a request adding a name kept the state complete: %+v", got)
	}
	// A name a skipped request no longer lists, the client may have
	// dropped: the next request taken holds it at no version,
	// and sends it again when listed again.
	if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: EndpointType, ResourceNames: []string{"a", "b"}, ResponseNonce: r.Nonce, VersionInfo: r.VersionInfo}); err != nil {
		t.Fatal(err)
	}
	r2, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: EndpointType, ResourceNames: []string{"b"}, ResponseNonce: r.Nonce, VersionInfo: r.VersionInfo}); err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: EndpointType, ResourceNames: []string{"a", "b"}, ResponseNonce: r2.Nonce, VersionInfo: r2.VersionInfo}); err != nil {
		t.Fatal(err)
	}
	if got := sp.last(t, 6).sotw; got.complete || got.versions.at("a") != "" {
		t.Fatalf("a name a skipped request did not list is still held at its version: %+v", got)
	}
	r3, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var la endpoint.ClusterLoadAssignment
	if len(r3.GetResources()) != 1 || r3.GetResources()[0].UnmarshalTo(&la) != nil || la.GetClusterName() != "a" {
		t.Fatalf("the response to a name listed again after a skipped request: %v, want a", r3.GetResources())
	}
}

// TestStreamStateGoesWithTheStream: what the cache follows per stream
// (noted requests, in-flight states, clusters sent) is dropped when the
// stream ends, including requests the sotw server ignored.
func TestStreamStateGoesWithTheStream(t *testing.T) {
	c := NewCache()
	c.MarkReady()
	s := NewServer(c, Options{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, lis) }()
	defer func() { cancel(); <-done }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := discovery.NewAggregatedDiscoveryServiceClient(conn)
	for range 20 {
		sctx, scancel := context.WithCancel(context.Background())
		st, err := client.StreamAggregatedResources(sctx)
		if err != nil {
			t.Fatal(err)
		}
		st.Send(&discovery.DiscoveryRequest{TypeUrl: ClusterType})
		st.Recv()
		st.Send(&discovery.DiscoveryRequest{TypeUrl: ClusterType, ResponseNonce: "stale"}) // ignored by the server
		dst, err := client.DeltaAggregatedResources(sctx)
		if err != nil {
			t.Fatal(err)
		}
		dst.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType})
		dst.Recv()
		scancel()
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		c.mu.Lock()
		streams, requests := len(c.streams), len(c.requests)
		c.mu.Unlock()
		if streams == 0 && requests == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after every stream ended: %d streams, %d noted requests kept", streams, requests)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
