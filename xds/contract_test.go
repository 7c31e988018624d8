package xds

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// These tests pin what contract.go says the cache relies on in the
// servers, as served (newXDSServer: go-control-plane's sotw server, our
// delta server). If one fails after an upgrade, the cache's
// state handling must change with it.

// spy records the state each watch of the real server is created with.
type spy struct {
	*Cache
	mu     sync.Mutex
	states []map[string]string // a copy of ReturnedResources, per watch
	// foreignDelta: a delta watch came from a server other than the one
	// served (deltaserver.go), whose subscriptions are deltaSubs.
	foreignDelta bool
}

func (s *spy) record(sub cache.Subscription) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := map[string]string{}
	for k, v := range sub.ReturnedResources() {
		m[k] = v
	}
	s.states = append(s.states, m)
}

func (s *spy) CreateWatch(req *cache.Request, sub cache.Subscription, ch chan cache.Response) (func(), error) {
	s.record(sub)
	return s.Cache.CreateWatch(req, sub, ch)
}

func (s *spy) CreateDeltaWatch(req *cache.DeltaRequest, sub cache.Subscription, ch chan cache.DeltaResponse) (func(), error) {
	s.record(sub)
	s.mu.Lock()
	_, own := sub.(deltaSub)
	s.foreignDelta = s.foreignDelta || !own
	s.mu.Unlock()
	return s.Cache.CreateDeltaWatch(req, sub, ch)
}

func (s *spy) last(t *testing.T, n int) map[string]string {
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
		Change{TypeURL: ClusterType, Upserts: []Resource{{Name: "a", Msg: &cluster.Cluster{Name: "a"}}, {Name: "b", Msg: &cluster.Cluster{Name: "b"}}}},
		Change{TypeURL: EndpointType, Upserts: []Resource{{Name: "a", Msg: &endpoint.ClusterLoadAssignment{ClusterName: "a"}}, {Name: "b", Msg: &endpoint.ClusterLoadAssignment{ClusterName: "b"}}}},
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

// Contracts 1 and 2: the delta server installs the map of a response it
// sent, after giving it its nonce, and hands it back unchanged with the
// next request; a NACK names that nonce.
func TestContractDeltaStateRoundTrip(t *testing.T) {
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
	got := sp.last(t, 2)
	if _, ok := got[genKey]; !ok {
		t.Fatalf("state not handed back: %q", got)
	}
	sent, ok := got[sentPrefix+r.Nonce]
	if !ok || !strings.HasSuffix(sent, "a"+sep+"b") {
		t.Fatalf("the state does not record the response of nonce %s: %q", r.Nonce, got)
	}

	if r, err = st.Recv(); err != nil || r.TypeUrl != EndpointType { // the first half, again
		t.Fatal(r, err)
	}

	// Contract 3: unsubscribing a name of a wildcard subscription sets it to
	// "" and keeps the state's keys.
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
	got = sp.last(t, n+2)
	if v, ok := got["a"]; !ok || v != "" {
		t.Fatalf(`unsubscribing a from a wildcard: state[a] = %q, %v; want "" (%q)`, v, ok, got)
	}
	if _, ok := got[genKey]; !ok {
		t.Fatalf("state keys dropped on unsubscription: %q", got)
	}
}

// Contracts 3 and 4: the sotw server drops state keys on a request that
// names resources but keeps the names' values as the cache wrote them, and
// ignores a request with a stale nonce.
func TestContractSotwStateRoundTrip(t *testing.T) {
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
	if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: EndpointType, ResourceNames: []string{"a"}, ResponseNonce: "stale"}); err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: EndpointType, ResourceNames: []string{"a", "b"}, ResponseNonce: r.Nonce, VersionInfo: r.VersionInfo}); err != nil {
		t.Fatal(err)
	}
	got := sp.last(t, 2)
	if _, ok := got[genKey]; ok {
		t.Fatalf("a named sotw request kept the state key: %q", got)
	}
	if v := got["a"]; !strings.Contains(v, sep) {
		t.Fatalf("the value the cache wrote for a was not kept: %q", v)
	}
	if _, ok := got["b"]; !ok {
		t.Fatalf("the request with a stale nonce was taken: %q", got)
	}
	time.Sleep(100 * time.Millisecond)
	if n := sp.count(); n != 2 {
		t.Fatalf("%d watches: the request with a stale nonce was not ignored", n)
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

// TestContractRunsTheServedDeltaServer: the contract tests run the
// delta server the Server serves (deltaserver.go), not go-control-plane's
// it replaced, so a change to it that breaks a contract fails them.
func TestContractRunsTheServedDeltaServer(t *testing.T) {
	sp, client := startContract(t)
	st, err := client.DeltaAggregatedResources(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer st.CloseSend()
	if err := st.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResourceNamesSubscribe: []string{"a"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	sp.last(t, 1)
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if sp.foreignDelta {
		t.Fatal("the contract tests' delta watches come from another delta server than the one served")
	}
}
