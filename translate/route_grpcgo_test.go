package translate

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpcmd "google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	xdsgrpc "google.golang.org/grpc/xds"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/xdsbridge/xdsbridge/sources"
)

// grpc-go's RDS validation cannot be imported (it is internal), so real
// grpc-go clients take the routes: an xDS server (go-control-plane's
// snapshot cache) serves each route configuration with the Listener gRPC
// clients start from and a cluster per destination, each cluster one gRPC
// server of its own; a grpc-go client of xds:///<service> resolves them
// (LDS → RDS → CDS → EDS) and its calls show which cluster a route chose
// (the backends implement nothing: the Unimplemented answer comes from the
// backend the route led to). A NACK fails the test with grpc-go's reason.

type grpcRig struct {
	t     *testing.T // the test the rig, and its backends, live as long as
	cache cache.SnapshotCache
	addr  string

	mu       sync.Mutex
	nodes    map[int64]string    // stream → node
	nacks    map[string][]string // node → grpc-go's error details
	backends map[string]string   // cluster → backend address
	clusters map[string]string   // backend address → cluster
	attempts map[string]int      // method → calls the backends received
	// ringHash are clusters served with ring_hash and this many hosts,
	// named <cluster>#<i> (set before serve).
	ringHash map[string]int
	// policyClusters are clusters served as given instead of Cluster's
	// (set before serve).
	policyClusters map[string]*clusterv3.Cluster
}

func startGRPCRig(t *testing.T) *grpcRig {
	t.Helper()
	rig := &grpcRig{
		t:        t,
		cache:    cache.NewSnapshotCache(false, cache.IDHash{}, nil),
		nodes:    map[int64]string{},
		nacks:    map[string][]string{},
		backends: map[string]string{},
		clusters: map[string]string{},
		attempts: map[string]int{},
		ringHash: map[string]int{},
	}
	cb := serverv3.CallbackFuncs{StreamRequestFunc: func(id int64, req *discovery.DiscoveryRequest) error {
		rig.mu.Lock()
		defer rig.mu.Unlock()
		if n := req.GetNode().GetId(); n != "" {
			rig.nodes[id] = n
		}
		if e := req.GetErrorDetail(); e != nil {
			node := rig.nodes[id]
			rig.nacks[node] = append(rig.nacks[node], req.GetTypeUrl()+": "+e.GetMessage())
		}
		return nil
	}}
	ctx, cancel := context.WithCancel(context.Background())
	xs := serverv3.NewServer(ctx, rig.cache, cb)
	gs := grpc.NewServer()
	discovery.RegisterAggregatedDiscoveryServiceServer(gs, xs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(lis)
	t.Cleanup(func() { cancel(); gs.Stop() })
	rig.addr = lis.Addr().String()
	return rig
}

// backend is the address of the cluster's gRPC server, started on first
// use; it lives as long as the rig.
func (rig *grpcRig) backend(t *testing.T, cluster string) string {
	t.Helper()
	rig.mu.Lock()
	defer rig.mu.Unlock()
	if a, ok := rig.backends[cluster]; ok {
		return a
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// The backend names its cluster in a trailer, for calls through a
	// proxy (the peer is then the proxy).
	s := grpc.NewServer(grpc.UnknownServiceHandler(func(srv any, stream grpc.ServerStream) error {
		stream.SetTrailer(grpcmd.Pairs("x-cluster", cluster))
		return rig.handle(srv, stream)
	}))
	go s.Serve(lis)
	rig.t.Cleanup(s.Stop) // subtests share backends
	a := lis.Addr().String()
	rig.backends[cluster], rig.clusters[a] = a, cluster
	return a
}

// handle answers every call a backend receives, counting them: methods
// named .../Unavailable fail with UNAVAILABLE, .../Sleep wait for their
// deadline (at most 5s), the others are UNIMPLEMENTED.
func (rig *grpcRig) handle(_ any, stream grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(stream)
	// Read the request first: a unary call answered before its request
	// is read may fail with a transport error (EOF) instead of the status.
	if err := stream.RecvMsg(&emptypb.Empty{}); err != nil {
		return err
	}
	rig.mu.Lock()
	rig.attempts[method]++
	rig.mu.Unlock()
	switch {
	case strings.HasSuffix(method, "/Unavailable"):
		return status.Error(codes.Unavailable, "try again")
	case strings.HasSuffix(method, "/Sleep"):
		select {
		case <-stream.Context().Done():
			return status.FromContextError(stream.Context().Err()).Err()
		case <-time.After(5 * time.Second):
			return status.Error(codes.Internal, "slept 5s")
		}
	}
	return status.Error(codes.Unimplemented, method)
}

func (rig *grpcRig) attemptsOf(method string) int {
	rig.mu.Lock()
	defer rig.mu.Unlock()
	return rig.attempts[method]
}

func (rig *grpcRig) nacksOf(node string) []string {
	rig.mu.Lock()
	defer rig.mu.Unlock()
	return append([]string(nil), rig.nacks[node]...)
}

// serve publishes, for node, the service's Listener, the route
// configuration, and an EDS cluster with one backend for every cluster
// the routes name.
func (rig *grpcRig) serve(t *testing.T, node, service string, rc *route.RouteConfiguration) {
	t.Helper()
	res := map[resource.Type][]types.Resource{
		resource.ListenerType: {APIListener(service)},
		resource.RouteType:    {rc},
	}
	for _, c := range RouteClusters(rc) {
		hosts, ring := rig.ringHash[c]
		names := []string{c}
		if ring {
			names = nil
			for i := 0; i < hosts; i++ {
				names = append(names, fmt.Sprintf("%s#%d", c, i))
			}
		}
		var eps []sources.Endpoint
		for _, n := range names {
			host, port, err := net.SplitHostPort(rig.backend(t, n))
			if err != nil {
				t.Fatal(err)
			}
			var p uint32
			if _, err := fmt.Sscan(port, &p); err != nil {
				t.Fatal(err)
			}
			eps = append(eps, sources.Endpoint{Address: host, Port: p})
		}
		cla, _ := LoadAssignment(sources.Service{Name: c, Endpoints: eps})
		cl := Cluster(c)
		if ring {
			cl.LbPolicy = clusterv3.Cluster_RING_HASH
		}
		if pc, ok := rig.policyClusters[c]; ok {
			cl = pc
		}
		res[resource.ClusterType] = append(res[resource.ClusterType], cl)
		res[resource.EndpointType] = append(res[resource.EndpointType], cla)
	}
	snap, err := cache.NewSnapshot("v1", res)
	if err != nil {
		t.Fatal(err)
	}
	if err := rig.cache.SetSnapshot(context.Background(), node, snap); err != nil {
		t.Fatal(err)
	}
}

// dial is a grpc-go client of xds:///service, identified as node.
func (rig *grpcRig) dial(t *testing.T, node, service string) *grpc.ClientConn {
	t.Helper()
	bootstrap := fmt.Sprintf(`{
  "xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
  "node": {"id": %q}
}`, rig.addr, node)
	builder, err := xdsgrpc.NewXDSResolverWithConfigForTesting([]byte(bootstrap))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("xds:///"+service, grpc.WithResolvers(builder), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// call makes one call of method with metadata md (name, value pairs) and
// returns the cluster whose backend answered; the backends' own errors
// (UNIMPLEMENTED, ...) are not errors of the call.
func (rig *grpcRig) call(conn *grpc.ClientConn, method string, md ...string) (string, error) {
	c, err := rig.invoke(conn, method, md...)
	if c != "" {
		return c, nil
	}
	return c, err
}

// invoke makes one call and returns the cluster whose backend answered
// last (none if no backend did) and the call's error.
func (rig *grpcRig) invoke(conn *grpc.ClientConn, method string, md ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if len(md) > 0 {
		ctx = grpcmd.NewOutgoingContext(ctx, grpcmd.Pairs(md...))
	}
	var p peer.Peer
	err := conn.Invoke(ctx, method, &emptypb.Empty{}, &emptypb.Empty{}, grpc.Peer(&p), grpc.WaitForReady(true))
	if p.Addr == nil {
		if err == nil {
			err = errors.New("no peer")
		}
		return "", err
	}
	rig.mu.Lock()
	defer rig.mu.Unlock()
	return rig.clusters[p.Addr.String()], err
}

// grpcRoutes serves the route configuration of a golden case to a new
// grpc-go client, waits until a call goes through (every resource
// accepted), and returns the client.
func (rig *grpcRig) grpcRoutes(t *testing.T, node, service string, rc *route.RouteConfiguration) *grpc.ClientConn {
	t.Helper()
	rig.serve(t, node, service, rc)
	conn := rig.dial(t, node, service)
	// A method no route but the default takes in any golden case.
	_, err := rig.call(conn, "/zz.Unrouted/Call")
	if n := rig.nacksOf(node); len(n) > 0 {
		t.Fatalf("grpc-go NACKed: %s", strings.Join(n, "; "))
	}
	if err != nil {
		t.Fatalf("no call went through: %v", err)
	}
	return conn
}

// Every golden policy route is accepted by grpc-go v1.85.
func TestPolicyRoutesGRPCGoAccepts(t *testing.T) {
	rig := startGRPCRig(t)
	rcs := map[string]struct {
		service string
		rc      *route.RouteConfiguration
	}{}
	for _, tc := range routeCases() {
		rc, _ := RouteConfigFor(tc.service, parseServicePolicy(t, tc.service, tc.yaml))
		rcs[tc.name] = struct {
			service string
			rc      *route.RouteConfiguration
		}{tc.service, rc}
	}
	for name, p := range fullPolicies(t) {
		rc, _ := RouteConfigFor(name, p)
		rcs["full-"+name] = struct {
			service string
			rc      *route.RouteConfiguration
		}{name, rc}
	}
	names := make([]string, 0, len(rcs))
	for n := range rcs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		t.Run(n, func(t *testing.T) {
			rig.grpcRoutes(t, "accepts-"+n, rcs[n].service, rcs[n].rc)
		})
	}
}

// grpc-go routes calls as the diagnostics and the comments say.
func TestPolicyRoutesGRPCGoRouting(t *testing.T) {
	rig := startGRPCRig(t)
	cases := map[string]routeCase{}
	for _, tc := range routeCases() {
		cases[tc.name] = tc
	}
	type call struct {
		method string
		md     []string
		want   string
	}
	for _, tc := range []struct {
		name  string
		calls []call
	}{
		{"paths", []call{
			{"/a.A/Get", nil, "a"},
			{"/b.B/Get", nil, "b"},
			{"/c.C/List", nil, "c"},
			{"/d.D/Get", nil, "d"},  // case-insensitive prefix /D.d/
			{"/E.E/GET", nil, "e"},  // case-insensitive path /E.e/Get
			{"/b.B/GetX", nil, "f"}, // a path is exact
		}},
		{"headers", []call{
			{"/x.X/Get", []string{"x-tenant", "test", "x-region", "eu-west", "x-host", "a.internal", "x-trace", "zzz", "x-id", "123", "x-debug", "1", "x-shard", "-5"}, "matched"},
			// The inverted contains fails, and so does the route; no
			// other but the default takes it: the transport has added
			// neither content-type nor user-agent yet.
			{"/x.X/Get", []string{"x-tenant", "test", "x-region", "eu-west", "x-host", "a.internal", "x-trace", "xabcx", "x-id", "123", "x-debug", "1", "x-shard", "-5"}, "greeter"},
			// A range is half-open.
			{"/x.X/Get", []string{"x-tenant", "test", "x-region", "eu-west", "x-host", "a.internal", "x-trace", "zzz", "x-id", "123", "x-debug", "1", "x-shard", "10"}, "greeter"},
			// grpc-go takes an empty value for an absent header.
			{"/x.X/Get", []string{"x-tenant", "test", "x-region", "eu-west", "x-host", "a.internal", "x-trace", "zzz", "x-id", "123", "x-debug", "", "x-shard", "-5"}, "greeter"},
			{"/x.X/Get", []string{"x-token-bin", "\x00\x01"}, "with-token"},
			// Raw bytes, not base64 ("YWJj") as Envoy would see them.
			{"/x.X/Get", []string{"x-key-bin", "abc"}, "by-key"},
		}},
		{"methods", []call{{"/static/x", nil, "web"}}},
		{"query-parameters", []call{{"/search", nil, "web"}}},
		{"fractions", []call{{"/c/x", nil, "all"}, {"/d/x", nil, "greeter"}}},
		{"redirect", []call{
			{"/self/x", nil, "greeter/v2"},
			{"/named-self/x", nil, "greeter/v2"},
			{"/legacy/x", nil, "old-api/legacy"},
			{"/other/x", nil, "other"},
			{"/x", nil, "greeter/v2"},
		}},
		{"default-subset", []call{
			{"/self/x", nil, "web/v1"},
			{"/v2/x", nil, "web/v2"},
			{"/x", nil, "web/v1"},
		}},
		{"datacenters", []call{{"/dc3/x", nil, "billing/v1"}, {"/x", nil, "api"}}},
		{"domains", []call{{"/x", nil, "greeter"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cases[tc.name]
			rc, _ := RouteConfigFor(c.service, parseServicePolicy(t, c.service, c.yaml))
			conn := rig.grpcRoutes(t, "routing-"+tc.name, c.service, rc)
			for _, cl := range tc.calls {
				got, err := rig.call(conn, cl.method, cl.md...)
				if err != nil || got != cl.want {
					t.Errorf("%s %v: reached %q (%v), want %q", cl.method, cl.md, got, err, cl.want)
				}
			}
		})
	}

	// A split: every share with a weight is reached, no other cluster.
	t.Run("splits", func(t *testing.T) {
		c := cases["splits"]
		rc, _ := RouteConfigFor(c.service, parseServicePolicy(t, c.service, c.yaml))
		conn := rig.grpcRoutes(t, "routing-splits", c.service, rc)
		seen := map[string]int{}
		for i := 0; i < 60; i++ {
			got, err := rig.call(conn, "/canary/x")
			if err != nil {
				t.Fatal(err)
			}
			seen[got]++
		}
		for cl := range seen {
			if cl != "other" && cl != "other/blue" && cl != "greeter" {
				t.Errorf("the split reached %q", cl)
			}
		}
		// 50%, 25%, 25%: each missed 60 times in a row with a chance
		// below 1e-7.
		if seen["other"] == 0 || seen["other/blue"] == 0 || seen["greeter"] == 0 {
			t.Errorf("the split reached %v", seen)
		}
	})
}

// grpc-go retries and times out as the route says (gRFC A44, A31): it
// retries on the gRPC conditions only, num_retries times (uncapped), and
// bounds a call by max_stream_duration.
func TestPolicyRoutesGRPCGoRetriesAndTimeouts(t *testing.T) {
	rig := startGRPCRig(t)
	p := parseServicePolicy(t, "svc", `
timeout: 30s
routes:
  - match: {prefix: /grpc.G/}
    retry: {retry_on: [unavailable], num_retries: 3, base_interval: 1ms, max_interval: 2ms}
  - match: {prefix: /envoy.E/}
    retry: {retry_on: [5xx, reset], num_retries: 3, base_interval: 1ms}
  - match: {prefix: /many.M/}
    retry: {retry_on: [cancelled, unavailable], num_retries: 10, base_interval: 1ms, max_interval: 1ms, per_try_timeout: 1ms}
  - match: {prefix: /slow.S/}
    timeout: 300ms
`)
	rc, _ := RouteConfigFor("svc", p)
	conn := rig.grpcRoutes(t, "retries", "svc", rc)
	for _, tc := range []struct {
		method   string
		attempts int
	}{
		{"/grpc.G/Unavailable", 4},
		{"/envoy.E/Unavailable", 1}, // no gRPC condition: no retry
		// gRFC A44 caps attempts at 5; grpc-go v1.85 does not
		// (retryConfigToPolicy in internal/xds/resolver/serviceconfig.go
		// sets MaxAttempts to num_retries + 1).
		{"/many.M/Unavailable", 11},
		{"/other.O/Unavailable", 1}, // no retry policy
	} {
		_, err := rig.invoke(conn, tc.method)
		if status.Code(err) != codes.Unavailable {
			t.Errorf("%s: %v, want UNAVAILABLE", tc.method, err)
		}
		if got := rig.attemptsOf(tc.method); got != tc.attempts {
			t.Errorf("%s: %d attempts, want %d", tc.method, got, tc.attempts)
		}
	}
	start := time.Now()
	_, err := rig.invoke(conn, "/slow.S/Sleep")
	if took := time.Since(start); status.Code(err) != codes.DeadlineExceeded || took > 3*time.Second {
		t.Errorf("/slow.S/Sleep: %v after %v, want DEADLINE_EXCEEDED after 300ms", err, took)
	}
}

// grpc-go hashes the header hash policies name, and nothing else: with a
// header, calls of one user stick to one host; with only a cookie (which
// it ignores), calls spread.
func TestPolicyRoutesGRPCGoHashPolicies(t *testing.T) {
	rig := startGRPCRig(t)
	rig.ringHash["hashed"] = 4
	rig.ringHash["cookied"] = 4
	for _, tc := range []struct{ service, yaml string }{
		{"hashed", "load_balancer: {policy: ring_hash, hash_policies: [{header: X-User}]}\n"},
		{"cookied", "load_balancer: {policy: ring_hash, hash_policies: [{cookie: {name: session}}]}\n"},
	} {
		rc, _ := RouteConfigFor(tc.service, parseServicePolicy(t, tc.service, tc.yaml))
		conn := rig.grpcRoutes(t, "hash-"+tc.service, tc.service, rc)
		hosts := map[string]bool{}
		for u := 0; u < 12; u++ {
			user := map[string]bool{}
			for i := 0; i < 5; i++ {
				got, err := rig.call(conn, "/h.H/Get", "x-user", fmt.Sprint("user-", u), "cookie", fmt.Sprint("session=", u))
				if err != nil {
					t.Fatal(err)
				}
				user[got], hosts[got] = true, true
			}
			if tc.service == "hashed" && len(user) != 1 {
				t.Errorf("%s: the calls of user-%d went to %v", tc.service, u, user)
			}
		}
		// 12 users (60 calls) all on one of 4 hosts: a chance below 1e-6
		// if they are spread.
		if len(hosts) < 2 {
			t.Errorf("%s: every call went to %v", tc.service, hosts)
		}
	}
}
