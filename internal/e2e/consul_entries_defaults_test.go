package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/xdsbridge/xdsbridge/sources/consul/consultest"
)

// namedBackend is a real gRPC server (the health service, also under the
// service name cr.Alt so routes can match another method prefix) that
// names itself in the response header x-backend, so a call through Envoy
// says which host answered.
type namedBackend struct {
	name string
	port int
}

func startNamedBackend(t *testing.T, name string) namedBackend {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if err := grpc.SetHeader(ctx, metadata.Pairs("x-backend", name)); err != nil {
			return nil, err
		}
		return h(ctx, req)
	}))
	hs := health.NewServer()
	healthpb.RegisterHealthServer(s, hs)
	alt := healthpb.Health_ServiceDesc
	alt.ServiceName = "cr.Alt"
	s.RegisterService(&alt, hs)
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return namedBackend{name: name, port: lis.Addr().(*net.TCPAddr).Port}
}

// cdCall makes one health RPC (no wait-for-ready: a pick that fails is a
// failed RPC) and returns the name of the backend that answered.
func cdCall(hc healthpb.HealthClient) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var md metadata.MD
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&md)); err != nil {
		return "", err
	}
	if v := md.Get("x-backend"); len(v) == 1 {
		return v[0], nil
	}
	return "", fmt.Errorf("no x-backend in the response headers %v", md)
}

// cdSettle waits until the last streak RPCs of tr since index i0 reached
// exactly the backends named, then until n more RPCs were made, and
// returns the tally of those n (the figures of the new state) and of all
// RPCs since i0 (failures across the change).
func cdSettle(t *testing.T, who string, tr *policyTraffic, i0, streak, n int, want ...string) (after, across map[string]int) {
	t.Helper()
	sort.Strings(want)
	waitFor(t, 20*time.Second, fmt.Sprintf("%s: %d RPCs in a row to exactly %v", who, streak, want), func() error {
		recs := tr.since(i0)
		if len(recs) < streak {
			return fmt.Errorf("%d RPCs since the change", len(recs))
		}
		got := tally(recs[len(recs)-streak:])
		if !cdExactly(got, want) {
			return fmt.Errorf("last %d RPCs: %v", streak, got)
		}
		return nil
	})
	i1 := i0 + len(tr.since(i0))
	waitFor(t, 20*time.Second, fmt.Sprintf("%s: %d more RPCs", who, n), func() error {
		if got := tr.n() - i1; got < n {
			return fmt.Errorf("%d RPCs", got)
		}
		return nil
	})
	return tally(tr.since(i1)[:n]), tally(tr.since(i0))
}

// cdExactly reports whether a tally has every name in want, and nothing
// else (no failures).
func cdExactly(got map[string]int, want []string) bool {
	if len(got) != len(want) {
		return false
	}
	for _, w := range want {
		if got[w] == 0 {
			return false
		}
	}
	return true
}

// cdEnvoyCluster is Envoy's active dynamic cluster named name, from its
// config_dump (nil if absent).
func cdEnvoyCluster(t *testing.T, ev *envoy, name string) map[string]any {
	t.Helper()
	body, err := ev.Get("/config_dump?resource=dynamic_active_clusters")
	if err != nil {
		t.Fatal(err)
	}
	var dump struct {
		Configs []struct {
			Cluster map[string]any `json:"cluster"`
		} `json:"configs"`
	}
	if err := json.Unmarshal([]byte(body), &dump); err != nil {
		t.Fatalf("config_dump: %v", err)
	}
	for _, c := range dump.Configs {
		if c.Cluster["name"] == name {
			return c.Cluster
		}
	}
	return nil
}

// cdUpstream says how Envoy's cluster speaks to its hosts, and its
// connect timeout: "http2" if its HttpProtocolOptions ask for HTTP/2,
// else "http1" (Envoy's default).
func cdUpstream(t *testing.T, ev *envoy, name string) (proto, timeout string, err error) {
	t.Helper()
	c := cdEnvoyCluster(t, ev, name)
	if c == nil {
		return "", "", fmt.Errorf("no active cluster %q in Envoy", name)
	}
	proto = "http1"
	if opts, ok := c["typed_extension_protocol_options"].(map[string]any); ok {
		if o, ok := opts["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"].(map[string]any); ok {
			if e, ok := o["explicit_http_config"].(map[string]any); ok {
				if _, ok := e["http2_protocol_options"]; ok {
					proto = "http2"
				}
			}
		}
	}
	timeout, _ = c["connect_timeout"].(string)
	return proto, timeout, nil
}

// cdWaitUpstream waits until Envoy's cluster name speaks proto with the
// connect timeout given.
func cdWaitUpstream(t *testing.T, ev *envoy, name, proto, timeout string) {
	t.Helper()
	waitFor(t, 20*time.Second, fmt.Sprintf("Envoy's cluster %s: %s, connect_timeout %s", name, proto, timeout), func() error {
		p, to, err := cdUpstream(t, ev, name)
		if err != nil {
			return err
		}
		if p != proto || to != timeout {
			return fmt.Errorf("%s, connect_timeout %s", p, to)
		}
		return nil
	})
	t.Logf("Envoy config_dump: cluster %s speaks %s upstream, connect_timeout %s", name, proto, timeout)
}

// cdEnvoyFails makes n calls through Envoy and asserts each fails with
// UNAVAILABLE (an HTTP/1.1 request to a gRPC server: the connection is
// reset before a response), reaching no backend.
func cdEnvoyFails(t *testing.T, hc healthpb.HealthClient, n int, what string) {
	t.Helper()
	failed, msg := 0, ""
	for range n {
		name, err := cdCall(hc)
		if err == nil {
			t.Fatalf("%s: a gRPC call through Envoy reached %s; want every call to fail (HTTP/1.1 upstream)", what, name)
		}
		if !strings.Contains(err.Error(), "Unavailable") {
			t.Fatalf("%s: gRPC call through Envoy: %v; want UNAVAILABLE (upstream reset)", what, err)
		}
		failed++
		msg = err.Error()
	}
	t.Logf("%s: %d of %d gRPC calls through Envoy failed: %s", what, failed, n, msg)
}

// cdEnvoyDiag logs Envoy's counters that say why a request failed.
func cdEnvoyDiag(t *testing.T, ev *envoy) {
	t.Helper()
	var lines []string
	for k, v := range ev.Stats(t, "no_cluster|no_route|rq_reset|rx_reset|tx_reset|with_active_rq|pending_failure|cx_connect_fail|upstream_rq_5|rq_timeout|cx_protocol_error|warming|cds.update|rds.web.update|update_time|init_fetch") {
		if v != 0 {
			lines = append(lines, fmt.Sprintf("%s=%d", k, v))
		}
	}
	sort.Strings(lines)
	t.Logf("Envoy stats: %s", strings.Join(lines, " "))
}

// cdSet writes a config entry through the Consul API.
func cdSet(t *testing.T, a *consultest.Agent, e api.ConfigEntry) {
	t.Helper()
	if ok, _, err := a.Client.ConfigEntries().Set(e, nil); err != nil || !ok {
		t.Fatalf("writing %s/%s: ok=%v err=%v", e.GetKind(), e.GetName(), ok, err)
	}
}

func cdDelete(t *testing.T, a *consultest.Agent, kind, name string) {
	t.Helper()
	if _, err := a.Client.ConfigEntries().Delete(kind, name, nil); err != nil {
		t.Fatalf("deleting %s/%s: %v", kind, name, err)
	}
}

// Two issues used to fail a few RPCs right after a change that makes
// web's routes name a cluster they did not name before (web/v1 when the
// resolver is set, web when it is deleted); the bridge now prevents both,
// and cdFailures is called with known "" (no failure allowed):
//   - Envoy answered 503 without a body (no_cluster; a gRPC client sees
//     UNAVAILABLE with an empty message) while the route named web/v1
//     still warming: the RDS response went before web/v1's assignment.
//     The cache holds back, per stream, routes naming a cluster whose
//     assignment the stream awaits (xds/routehold.go).
//   - grpc-go (v1.85) installed the new config selector before its
//     cluster manager had the new cluster: UNAVAILABLE "unknown cluster
//     selected for RPC". A sotw stream first gets an interim route
//     configuration naming the added clusters in a route that never
//     matches, and the real one once the client could apply it; a
//     cluster deleted with the change stays in its CDS until its routes
//     stop naming it (xds/mbb.go).

// cdFailures checks the RPCs recs made since a change at t0: every
// failure must be of the known kind (an error containing known, or equal
// to it when exact; none allowed when known is ""), and begin within
// cdWindow of the change. It logs them and returns how many there were.
func cdFailures(t *testing.T, who string, recs []rpcRecord, t0 time.Time, known string, exact bool) int {
	t.Helper()
	n, other := 0, 0
	var first, last time.Duration
	for _, r := range recs {
		if r.err == nil {
			continue
		}
		msg := r.err.Error()
		if known == "" || (exact && msg != known) || (!exact && !strings.Contains(msg, known)) {
			if other == 0 {
				t.Errorf("%s: failed RPC %v after the change: %v", who, r.start.Sub(t0).Round(time.Millisecond), r.err)
			}
			other++
			continue
		}
		d := r.start.Sub(t0)
		if n == 0 {
			first = d
		}
		last = d
		n++
	}
	if other > 0 {
		t.Errorf("%s: %d of %d RPCs failed; want none", who, other, len(recs))
	}
	if n > 0 {
		t.Logf("%s: KNOWN ISSUE: %d of %d RPCs failed with %q, from %v to %v after the change", who, n, len(recs), known,
			first.Round(time.Millisecond), last.Round(time.Millisecond))
		if last > cdWindow {
			t.Errorf("%s: an RPC failed %v after the change with %q; want such failures only within %v", who, last, known, cdWindow)
		}
	} else {
		t.Logf("%s: 0 of %d RPCs failed", who, len(recs))
	}
	return n
}

// cdWindow bounds how long after a change the known failures may go on.
const cdWindow = 5 * time.Second

// cdNoCluster is Envoy's count of requests it answered "no cluster".
func cdNoCluster(t *testing.T, ev *envoy) int64 {
	t.Helper()
	return ev.Stats(t, "http.ingress.no_cluster")["http.ingress.no_cluster"]
}

// TestConsulEntriesDefaultsAndResolver runs a real Consul 1.14 agent with
// three gRPC backends of service web (b1 and b2 tagged v1, b3 tagged v2),
// the bridge with the Consul source (config_entries: true), a proxyless
// grpc-go client of xds:///web and a real Envoy taking web's routes by
// RDS, both calling web's health service under continuous traffic. Each
// config entry written through the Consul API changes what both do, and
// deleting it restores the default:
//
//   - service-defaults Protocol grpc: Envoy's cluster speaks HTTP/2
//     upstream, so gRPC through Envoy, which fails against the default
//     HTTP/1.1 upstream, succeeds; grpc-go is unaffected (no failed RPC).
//     Deleted: HTTP/1.1 again, gRPC through Envoy fails again.
//   - service-resolver with subsets on Service.Tags, DefaultSubset v1 and
//     ConnectTimeout 2s: both clients send only to b1 and b2 (v1), Envoy's
//     clusters take the timeout. Deleted: all three hosts again, 5s.
//
// No RPC fails across a change that leaves hosts routable; no client
// NACKs.
func TestConsulEntriesDefaultsAndResolver(t *testing.T) {
	a := consultest.StartAgent(t, "dc1")
	tags := map[string]string{"b1": "v1", "b2": "v1", "b3": "v2"}
	for _, name := range []string{"b1", "b2", "b3"} {
		b := startNamedBackend(t, name)
		a.Register(&api.AgentServiceRegistration{
			ID: "web-" + name, Name: "web", Address: "127.0.0.1", Port: b.port, Tags: []string{tags[name]},
			Check: &api.AgentServiceCheck{CheckID: "web-" + name + "-ttl", TTL: "10m", Status: api.HealthPassing},
		})
	}
	br := startBridgeConfig(t, t.TempDir(), fmt.Sprintf(`
sources:
  - name: consul
    consul:
      address: %q
      services: {include: [web]}
      wait_time: 2s
      coalesce: 10ms
      config_entries: true
`, a.Addr()), nil)

	// grpc-go: xds:///web, resolved by its own xDS client.
	gc := dialXDS(t, br, "web")
	// Envoy: web's route configuration by RDS; gRPC (h2c) from a grpc-go
	// client dialing Envoy's listener with authority web (the virtual
	// host's domain).
	ev := startEnvoyCerts(t, "envoy-sotw.yaml", br.app.XDSAddr(), "",
		envoyRDS[0], strings.Replace(envoyRDS[1], "route_config_name: greeter", "route_config_name: web", 1))
	conn, err := grpc.NewClient("passthrough:///"+ev.listener, grpc.WithAuthority("web"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ec := healthpb.NewHealthClient(conn)
	grpcCall := func() (string, error) { return cdCall(gc.health) }
	envoyCall := func() (string, error) { return cdCall(ec) }
	all := []string{"b1", "b2", "b3"}
	v1 := []string{"b1", "b2"}

	// 0. No entries: grpc-go reaches all three; Envoy has web's three
	// hosts and its route, speaks HTTP/1.1 to them (default), and every
	// gRPC call through it fails.
	gt := startCalls(grpcCall)
	after, _ := cdSettle(t, "grpc-go, no entries", gt, 0, 100, 200, all...)
	t.Logf("grpc-go, no entries, 200 RPCs: %v", after)
	waitFor(t, 20*time.Second, "Envoy: web's three hosts and its route", func() error {
		if h := ev.clusterHosts(t, "web"); len(h) != 3 {
			return fmt.Errorf("hosts %v", h)
		}
		if n := ev.Stats(t, "rds.web.update_success")["http.ingress.rds.web.update_success"]; n < 1 {
			return fmt.Errorf("rds web update_success %d", n)
		}
		return nil
	})
	cdWaitUpstream(t, ev, "web", "http1", "5s")
	cdEnvoyFails(t, ec, 50, "no entries")

	// 1. service-defaults Protocol grpc: HTTP/2 upstream, gRPC through
	// Envoy succeeds to all three; grpc-go fails nothing.
	gi, t0 := gt.n(), time.Now()
	cdSet(t, a, &api.ServiceConfigEntry{Kind: api.ServiceDefaults, Name: "web", Protocol: "grpc"})
	cdWaitUpstream(t, ev, "web", "http2", "5s")
	et := startCalls(envoyCall)
	eAfter, eAcross := cdSettle(t, "Envoy, protocol grpc", et, 0, 100, 300, all...)
	t.Logf("Envoy, service-defaults protocol grpc: 300 calls %v (since the change: %v)", eAfter, eAcross)
	if eAfter["failed"] != 0 {
		t.Errorf("Envoy, protocol grpc: %v", eAfter)
	}
	after, across := cdSettle(t, "grpc-go, protocol grpc", gt, gi, 100, 200, all...)
	t.Logf("grpc-go, service-defaults protocol grpc: 200 RPCs %v (since the change: %v)", after, across)
	cdFailures(t, "grpc-go across service-defaults", gt.since(gi), t0, "", false)
	assertNoNACKs(t, br)

	// 2. service-resolver: subsets by tag, default v1, connect timeout 2s:
	// both clients only to b1 and b2. Across the change both clients
	// move to a cluster they did not use: no RPC fails (see cdFailures'
	// comment for the two issues the bridge prevents).
	nc0 := cdNoCluster(t, ev)
	gi, ei, t0 := gt.n(), et.n(), time.Now()
	cdSet(t, a, &api.ServiceResolverConfigEntry{Kind: api.ServiceResolver, Name: "web",
		ConnectTimeout: 2 * time.Second, DefaultSubset: "v1",
		Subsets: map[string]api.ServiceResolverSubset{
			"v1": {Filter: `"v1" in Service.Tags`},
			"v2": {Filter: `"v2" in Service.Tags`},
		}})
	after, across = cdSettle(t, "grpc-go, resolver", gt, gi, 200, 300, v1...)
	t.Logf("grpc-go, service-resolver default_subset v1: 300 RPCs %v (since the change: %v)", after, across)
	eAfter, eAcross = cdSettle(t, "Envoy, resolver", et, ei, 200, 300, v1...)
	t.Logf("Envoy, service-resolver default_subset v1: 300 calls %v (since the change: %v)", eAfter, eAcross)
	for who, got := range map[string]map[string]int{"grpc-go": after, "Envoy": eAfter} {
		if got["b3"] != 0 || got["failed"] != 0 || got["b1"]+got["b2"] != 300 {
			t.Errorf("%s with default_subset v1: %v; want all 300 to b1 and b2", who, got)
		}
	}
	cdWaitUpstream(t, ev, "web/v1", "http2", "2s")
	cdWaitUpstream(t, ev, "web", "http2", "2s")
	if h := ev.clusterHosts(t, "web/v1"); len(h) != 2 {
		t.Errorf("Envoy's cluster web/v1 hosts: %v; want b1's and b2's", h)
	}
	cdFailures(t, "grpc-go across the resolver", gt.since(gi), t0, "", false)
	// Which came first on Envoy: the route naming web/v1, or web/v1's
	// assignment (which warms it)? Both in ms since the epoch.
	st := ev.Stats(t, "update_time")
	t.Logf("Envoy: RDS web applied at %d, cluster web/v1's EDS at %d (the route %d ms before the assignment; negative: after)",
		st["http.ingress.rds.web.update_time"], st["cluster.web/v1.update_time"],
		st["cluster.web/v1.update_time"]-st["http.ingress.rds.web.update_time"])
	// The protocol's order, which the bridge keeps per stream
	// (xds/routehold.go): the route after the assignment.
	if d := st["cluster.web/v1.update_time"] - st["http.ingress.rds.web.update_time"]; d > 0 {
		t.Errorf("Envoy applied the route naming web/v1 %d ms before web/v1's assignment; want after", d)
	}
	// No call failed, and Envoy answered none "no cluster" (the route
	// went after web/v1's assignment).
	if n, nc := cdFailures(t, "Envoy across the resolver", et.since(ei), t0, "", false), cdNoCluster(t, ev)-nc0; n != 0 || nc != 0 {
		t.Errorf("Envoy across the resolver: %d calls failed, Envoy's no_cluster went up by %d; want 0 and 0", n, nc)
	}
	assertNoNACKs(t, br)

	// 3. Resolver deleted: all three hosts again, connect timeout 5s.
	gi, ei, t0 = gt.n(), et.n(), time.Now()
	cdDelete(t, a, api.ServiceResolver, "web")
	after, across = cdSettle(t, "grpc-go, resolver deleted", gt, gi, 200, 300, all...)
	t.Logf("grpc-go, service-resolver deleted: 300 RPCs %v (since the change: %v)", after, across)
	eAfter, eAcross = cdSettle(t, "Envoy, resolver deleted", et, ei, 200, 300, all...)
	t.Logf("Envoy, service-resolver deleted: 300 calls %v (since the change: %v)", eAfter, eAcross)
	for who, got := range map[string]map[string]int{"grpc-go": after, "Envoy": eAfter} {
		if got["failed"] != 0 || got["b1"]+got["b2"]+got["b3"] != 300 {
			t.Errorf("%s with the resolver deleted: %v; want all 300 to b1, b2 and b3", who, got)
		}
	}
	cdWaitUpstream(t, ev, "web", "http2", "5s")
	cdFailures(t, "grpc-go across the resolver's deletion", gt.since(gi), t0, "", false)
	cdFailures(t, "Envoy across the resolver's deletion", et.since(ei), t0, "", false)
	assertNoNACKs(t, br)

	// 4. service-defaults deleted: HTTP/1.1 upstream again, gRPC through
	// Envoy fails again; grpc-go fails nothing.
	eAll := et.end()
	t.Logf("Envoy, while web's protocol was grpc: %d calls %v", len(eAll), tally(eAll))
	gi, t0 = gt.n(), time.Now()
	cdDelete(t, a, api.ServiceDefaults, "web")
	cdWaitUpstream(t, ev, "web", "http1", "5s")
	// The active cluster is HTTP/1.1; Envoy's worker takes it next.
	waitFor(t, 10*time.Second, "a gRPC call through Envoy to fail", func() error {
		if name, err := cdCall(ec); err == nil {
			return fmt.Errorf("reached %s", name)
		}
		return nil
	})
	cdEnvoyFails(t, ec, 50, "service-defaults deleted")
	after, across = cdSettle(t, "grpc-go, service-defaults deleted", gt, gi, 100, 200, all...)
	t.Logf("grpc-go, service-defaults deleted: 200 RPCs %v (since the change: %v)", after, across)
	cdFailures(t, "grpc-go across the service-defaults' deletion", gt.since(gi), t0, "", false)
	gAll := gt.end()
	t.Logf("grpc-go, whole run: %d RPCs %v", len(gAll), tally(gAll))
	cdEnvoyDiag(t, ev)
	ev.assertNoRejections(t)
	assertNoNACKs(t, br)
}
