package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/xdsbridge/xdsbridge/sources/consul/consultest"
	"github.com/xdsbridge/xdsbridge/translate"
)

// The egress tests run Envoys from examples/envoy-egress.yaml (only the
// bridge's address; listeners, clusters, endpoints and routes over ADS)
// against a bridge with egress.listener on a free port, and call services
// by name through that listener: HTTP by Host, gRPC by :authority.
// Delta and SotW Envoys each get a bridge of their own: two Envoys would
// share the listener's port (SO_REUSEPORT) and the kernel would split the
// requests between them.

var egressAPIs = []struct{ name, apiType string }{{"delta", "DELTA_GRPC"}, {"sotw", "GRPC"}}

// egressHead is the bridge config's egress block, listening on port.
func egressHead(port int) string {
	return fmt.Sprintf("egress:\n  listener: {port: %d}\n  domain_suffixes: [.service.consul, .service.dc1.consul]\n", port)
}

// startEgressEnvoy starts an Envoy from examples/envoy-egress.yaml over
// the ADS flavour apiType, whose listener is the bridge's egress listener
// on port.
func startEgressEnvoy(t *testing.T, br *bridge, apiType string, port int) *envoy {
	t.Helper()
	ev := startEnvoyCerts(t, "envoy-egress.yaml", br.app.XDSAddr(), "", "api_type: DELTA_GRPC", "api_type: "+apiType)
	ev.listener = fmt.Sprintf("127.0.0.1:%d", port)
	return ev
}

// egressGRPC is a gRPC client of a service through the egress listener:
// the channel's authority is the service's name.
func egressGRPC(t *testing.T, ev *envoy, service string) healthpb.HealthClient {
	t.Helper()
	cc, err := grpc.NewClient(ev.listener, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithAuthority(service))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return healthpb.NewHealthClient(cc)
}

// egressRegister registers instance id of service name on port with a
// passing TTL check.
func egressRegister(t *testing.T, a *consultest.Agent, id, name string, port int) {
	t.Helper()
	a.Register(&api.AgentServiceRegistration{
		ID: id, Name: name, Address: "127.0.0.1", Port: port,
		Check: &api.AgentServiceCheck{CheckID: id + "-ttl", TTL: "10m", Status: api.HealthPassing},
	})
}

// egressCall is h.ok without headers.
func egressCall(h *epHTTP) func() (string, error) {
	return func() (string, error) { return h.ok() }
}

// egressOnly sends n calls and fails unless each is answered by want.
func egressOnly(t *testing.T, what string, n int, call func() (string, error), want string) {
	t.Helper()
	for i := range n {
		got, err := call()
		if err != nil {
			t.Fatalf("%s: call %d: %v", what, i, err)
		}
		if got != want {
			t.Fatalf("%s: call %d answered by %q, want %q", what, i, got, want)
		}
	}
}

// TestEgressConsulCatalog: three services registered in a real Consul are
// reached through the egress listener by name, two over HTTP (Host, with
// and without a port, and Consul's DNS forms) and one over gRPC
// (:authority), each only by its own backend; an unknown host gets the
// catch-all's 404. A service registered under traffic is reachable within
// 1 s without a failed call to the others; once deregistered, its name
// gets 404 or 503, never another service's backend.
func TestEgressConsulCatalog(t *testing.T) {
	for _, f := range egressAPIs {
		t.Run(f.name, func(t *testing.T) { testEgressConsulCatalog(t, f.apiType) })
	}
}

func testEgressConsulCatalog(t *testing.T, apiType string) {
	a := consultest.StartAgent(t, "dc1")
	web := startBackend(t, "web-1", "127.0.0.1:0")
	apiB := startBackend(t, "api-1", "127.0.0.1:0")
	greeter := startNamedBackend(t, "greeter-1")
	egressRegister(t, a, "web-1", "web", int(web.port))
	egressRegister(t, a, "api-1", "api", int(apiB.port))
	egressRegister(t, a, "greeter-1", "greeter", greeter.port)
	port := freePort(t)
	src := fmt.Sprintf("  - name: consul\n    consul: {address: %q, wait_time: 2s, coalesce: 10ms}\n", a.Addr())
	br, _ := startPolicyBridge(t, t.TempDir(), egressHead(port), src, "services:\n  greeter: {protocol: grpc}\n")
	ev := startEgressEnvoy(t, br, apiType, port)

	hWeb := epNewHTTP(t, ev, "web")
	hAPI := epNewHTTP(t, ev, fmt.Sprintf("api:%d", port))
	hAPIDNS := epNewHTTP(t, ev, "api.service.dc1.consul")
	hc := egressGRPC(t, ev, "greeter")
	grpcCall := func() (string, error) { return cdCall(hc) }
	waitFor(t, 20*time.Second, "the three services through the egress listener", func() error {
		for _, c := range []struct {
			call func() (string, error)
			want string
		}{{egressCall(hWeb), "web-1"}, {egressCall(hAPI), "api-1"}, {egressCall(hAPIDNS), "api-1"}, {grpcCall, "greeter-1"}} {
			if got, err := c.call(); err != nil || got != c.want {
				return fmt.Errorf("%q, %v; want %q", got, err, c.want)
			}
		}
		return nil
	})
	const n = 100
	egressOnly(t, "Host: web", n, egressCall(hWeb), "web-1")
	egressOnly(t, "Host: api:PORT", n, egressCall(hAPI), "api-1")
	egressOnly(t, "Host: api.service.dc1.consul", n, egressCall(hAPIDNS), "api-1")
	egressOnly(t, "gRPC :authority greeter", n, grpcCall, "greeter-1")
	body, code, err := epNewHTTP(t, ev, "nope").get()
	if err != nil || code != http.StatusNotFound || !strings.HasPrefix(body, translate.EgressNotFoundBody) {
		t.Errorf("Host: nope: %d %q, %v; want the catch-all's 404", code, body, err)
	}

	// billing, registered under traffic to the others.
	trWeb := startCalls(egressCall(hWeb))
	defer trWeb.end()
	trGRPC := startCalls(grpcCall)
	defer trGRPC.end()
	billing := startBackend(t, "billing-1", "127.0.0.1:0")
	hBilling := epNewHTTP(t, ev, "billing")
	waitFor(t, 10*time.Second, "traffic to web and greeter", func() error {
		if trWeb.n() < 50 || trGRPC.n() < 50 {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	t0 := time.Now()
	egressRegister(t, a, "billing-1", "billing", int(billing.port))
	var reached time.Duration
	for {
		name, code, err := hBilling.get()
		if err == nil && code == http.StatusOK {
			if name != "billing-1" {
				t.Fatalf("Host: billing answered by %q", name)
			}
			reached = time.Since(t0)
			break
		}
		if err == nil && code != http.StatusNotFound {
			t.Fatalf("Host: billing before it is published: %d %q; want the catch-all's 404", code, name)
		}
		if time.Since(t0) > 10*time.Second {
			t.Fatalf("billing not reachable 10s after its registration: %d %q %v", code, name, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("billing reachable %s after its registration in Consul", reached.Round(time.Millisecond))
	if reached > time.Second {
		t.Errorf("billing reachable %s after its registration; want within 1s", reached)
	}
	egressOnly(t, "Host: billing", n, egressCall(hBilling), "billing-1")

	// billing deregistered: 404 (or 503 while its cluster goes), never
	// another service's backend.
	a.Deregister("billing-1")
	for t1 := time.Now(); ; {
		name, code, err := hBilling.get()
		if err == nil && code == http.StatusNotFound {
			if !strings.HasPrefix(name, translate.EgressNotFoundBody) {
				t.Fatalf("Host: billing after deregistration: 404 %q, not the catch-all's", name)
			}
			break
		}
		if err == nil && code == http.StatusOK && name != "billing-1" {
			t.Fatalf("Host: billing after deregistration answered by %q", name)
		}
		if err == nil && code != http.StatusOK && code != http.StatusServiceUnavailable {
			t.Fatalf("Host: billing after deregistration: %d %q; want 404 or 503", code, name)
		}
		if time.Since(t1) > 10*time.Second {
			t.Fatalf("Host: billing still routed 10s after deregistration: %d %q %v", code, name, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, c := range []struct {
		what string
		tr   *policyTraffic
		want string
	}{{"Host: web", trWeb, "web-1"}, {"gRPC greeter", trGRPC, "greeter-1"}} {
		recs := c.tr.end()
		bad := 0
		for _, r := range recs {
			if r.err != nil || r.subset != c.want {
				bad++
			}
		}
		t.Logf("%s: %d calls while billing came and went, %d failed or misrouted", c.what, len(recs), bad)
		if bad > 0 {
			t.Errorf("%s: %d of %d calls failed or misrouted (first: %v)", c.what, bad, len(recs), epFirstError(recs))
		}
	}
	// The bridge's API listeners (one per service, for proxyless gRPC)
	// reach this Envoy too; it skips them without rejecting the update.
	st := ev.Stats(t, `^listener_manager\.(total_listeners_active|lds\.update_success|lds\.update_rejected)$`)
	t.Logf("envoy listener_manager: %v", st)
	if st["listener_manager.total_listeners_active"] != 1 || st["listener_manager.lds.update_success"] == 0 {
		t.Errorf("envoy listener_manager %v; want the egress listener alone active", st)
	}
	ev.assertNoRejections(t)
	assertNoNACKs(t, br)
}

// egressPolicy splits web 80/20 across subsets v1 and v2 (by Consul tag
// in the file source's metadata), sends x-version: v2 to v2, and retries
// flaky's 503s twice.
const egressPolicy = `services:
  web:
    subsets:
      v1: {filter: '"v1" in Service.Tags'}
      v2: {filter: '"v2" in Service.Tags'}
    routes:
      - match:
          prefix: /
          headers: [{name: x-version, exact: v2}]
        destination: {subset: v2}
    split:
      - {weight: 80, subset: v1}
      - {weight: 20, subset: v2}
  flaky:
    retry: {retry_on: [5xx], num_retries: 2}
`

// TestEgressPolicyThroughEnvoy: the egress table carries each service's
// policy routes to Envoy: web's 80/20 split across subsets is within a
// binomial bound over 1,000 requests, a header routes to one subset only,
// and flaky's retry policy shows in Envoy's upstream_rq_retry.
func TestEgressPolicyThroughEnvoy(t *testing.T) {
	for _, f := range egressAPIs {
		t.Run(f.name, func(t *testing.T) { testEgressPolicyThroughEnvoy(t, f.apiType) })
	}
}

func testEgressPolicyThroughEnvoy(t *testing.T, apiType string) {
	bs := startBackends(t, 4)
	flaky := epStartStatusBackend(t, "flaky-1", http.StatusServiceUnavailable)
	var sb strings.Builder
	sb.WriteString("services:\n  web:\n    endpoints:\n")
	for i, b := range bs {
		fmt.Fprintf(&sb, "      - {address: 127.0.0.1, port: %d, metadata: {consul: {tags: [v%d]}}}\n", b.port, i/2+1)
	}
	fmt.Fprintf(&sb, "  flaky:\n    endpoints:\n      - {address: 127.0.0.1, port: %d}\n", flaky.port)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "services.yaml"), []byte(sb.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	src := "  - name: static\n    file: {path: services.yaml, settle: 10ms}\n"
	br, _ := startPolicyBridge(t, dir, egressHead(port), src, egressPolicy)
	ev := startEgressEnvoy(t, br, apiType, port)
	epWaitHosts(t, ev, "web/v1", hostsOf(bs[0], bs[1]))
	epWaitHosts(t, ev, "web/v2", hostsOf(bs[2], bs[3]))
	h := epNewHTTP(t, ev, "web")
	waitFor(t, 20*time.Second, "web through the egress listener", func() error {
		_, err := h.ok()
		return err
	})

	const n = 1000
	got := map[string]int{}
	for range n {
		name, err := h.ok()
		if err != nil {
			t.Fatal(err)
		}
		got[name]++
	}
	v2 := got["b3"] + got["b4"]
	lo, hi := crBinomialBounds(n, 0.2, 5)
	t.Logf("%d requests: %v; v2 %d (bounds %d..%d)", n, got, v2, lo, hi)
	if got["b1"]+got["b2"]+v2 != n || v2 < lo || v2 > hi {
		t.Errorf("split: %v; want v2 (b3, b4) in %d..%d of %d and nothing else", got, lo, hi, n)
	}
	got = map[string]int{}
	for range 200 {
		name, err := h.ok("x-version", "v2")
		if err != nil {
			t.Fatal(err)
		}
		got[name]++
	}
	if got["b3"]+got["b4"] != 200 {
		t.Errorf("x-version: v2: %v; want b3 and b4 only", got)
	}

	hf := epNewHTTP(t, ev, "flaky")
	const calls = 20
	for range calls {
		if _, code, err := hf.get(); err != nil || code != http.StatusServiceUnavailable {
			t.Fatalf("Host: flaky: %d, %v; want flaky's 503", code, err)
		}
	}
	retries := ev.Stats(t, `^cluster\.flaky\.upstream_rq_retry$`)["cluster.flaky.upstream_rq_retry"]
	t.Logf("flaky: %d requests, %d upstream requests, upstream_rq_retry %d", calls, flaky.hits.Load(), retries)
	if retries != 2*calls || flaky.hits.Load() != 3*calls {
		t.Errorf("flaky: upstream_rq_retry %d, %d upstream requests; want %d and %d (2 retries each)", retries, flaky.hits.Load(), 2*calls, 3*calls)
	}
	ev.assertNoRejections(t)
	assertNoNACKs(t, br)
}
