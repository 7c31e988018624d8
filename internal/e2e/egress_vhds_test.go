package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/xdsbridge/xdsbridge/translate"
	"github.com/xdsbridge/xdsbridge/xds"
)

// The VHDS tests run Envoys from examples/envoy-egress-vhds.yaml (delta
// ADS, listeners only: no cluster subscribed up front) against a bridge
// with egress.vhds: true, and call services by Host through its egress
// listener: the first request for a host makes Envoy fetch the host's
// virtual host (VHDS), then its cluster (on-demand CDS).

// vhdsHead is the bridge config's egress block with VHDS, listening on
// port.
func vhdsHead(port int) string {
	return egressHead(port) + "  vhds: true\n"
}

// vhdsFiller is how many services besides api, web and billing the VHDS
// tests' catalog holds (Envoy fetches none of them).
const vhdsFiller = 50

// vhdsCatalog is a services file: api and web on their backends' ports,
// vhdsFiller more services on a port nothing listens on, and billing and
// greeter (gRPC) on their backends' ports unless 0.
func vhdsCatalog(api, web, billing uint32, greeter int) string {
	var sb strings.Builder
	sb.WriteString("services:\n")
	add := func(name string, port uint32) {
		fmt.Fprintf(&sb, "  %s:\n    endpoints: [{address: 127.0.0.1, port: %d}]\n", name, port)
	}
	add("api", api)
	add("web", web)
	if billing != 0 {
		add("billing", billing)
	}
	if greeter != 0 {
		add("greeter", uint32(greeter))
	}
	for i := range vhdsFiller {
		add(fmt.Sprintf("svc-%03d", i), 1)
	}
	return sb.String()
}

// startVHDSBridge writes the catalog and a policy file (policyYAML) into
// a new directory and runs a bridge with egress.vhds on port.
func startVHDSBridge(t *testing.T, port int, catalog, policyYAML string) (*bridge, string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "services.yaml"), []byte(catalog), 0o644); err != nil {
		t.Fatal(err)
	}
	return startPolicyBridge(t, dir, vhdsHead(port), "  - name: static\n    file: {path: services.yaml, settle: 10ms}\n", policyYAML)
}

// startVHDSEnvoy starts an Envoy from examples/envoy-egress-vhds.yaml
// whose listener is the bridge's egress listener on port.
func startVHDSEnvoy(t *testing.T, br *bridge, port int) *envoy {
	t.Helper()
	ev := startEnvoy(t, "envoy-egress-vhds.yaml", br.app.XDSAddr())
	ev.listener = fmt.Sprintf("127.0.0.1:%d", port)
	return ev
}

// vhdsStat is the prefix of Envoy's VHDS statistics for the egress table.
const vhdsStat = "http.egress.rds.vhds.xdsbridge_egress."

// dynamicVirtualHosts are the names of the virtual hosts Envoy holds in
// its dynamic route configurations (/config_dump).
func dynamicVirtualHosts(t *testing.T, ev *envoy) []string {
	t.Helper()
	body, err := ev.Get("/config_dump?resource=dynamic_route_configs")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range regexp.MustCompile(`"name": "(xdsbridge:egress/[^"]*)"`).FindAllStringSubmatch(body, -1) {
		out = append(out, m[1])
	}
	return out
}

// tableTimeout is the timeout of service's first route in the egress
// table the bridge serves (its sotw clients' whole table); 0 if none.
func tableTimeout(t *testing.T, br *bridge, service string) time.Duration {
	t.Helper()
	rc, _ := br.app.Cache.Get(xds.RouteType, translate.DefaultEgressName).(*route.RouteConfiguration)
	for _, vh := range rc.GetVirtualHosts() {
		if vh.GetName() == service {
			return vh.GetRoutes()[0].GetRoute().GetTimeout().AsDuration()
		}
	}
	return 0
}

// TestEgressVHDSOnDemand: an Envoy with VHDS and on-demand CDS in front of
// a catalog of vhdsFiller+3 services. A request by Host (plain, with a
// port, in a suffix form) to a service Envoy never called fetches its
// virtual host, then its cluster, and is answered 200 by that service's
// backend, and so does a first gRPC call by :authority; Envoy then holds
// those virtual hosts and clusters only. An
// unknown host gets a 404 at once, the second time too. A service added
// to the file under traffic to api becomes reachable (Envoy asked for it
// before: the bridge sends it), and once removed gets 404 or 503, never
// another service's backend, without a failed call to api. A policy
// change to a service Envoy does not hold sends it nothing (no VHDS
// update, no byte); one to api, which it holds, one VHDS update. Envoy's
// first VHDS request is answered (no initial fetch timeout), and Envoy
// rejects no update.
func TestEgressVHDSOnDemand(t *testing.T) {
	api := startBackend(t, "api-1", "127.0.0.1:0")
	web := startBackend(t, "web-1", "127.0.0.1:0")
	billing := startBackend(t, "billing-1", "127.0.0.1:0")
	greeter := startNamedBackend(t, "greeter-1")
	port := freePort(t)
	const grpcPolicy = "services:\n  greeter: {protocol: grpc}\n"
	catalog := func(billing uint32) string { return vhdsCatalog(api.port, web.port, billing, greeter.port) }
	br, policyPath := startVHDSBridge(t, port, catalog(0), grpcPolicy)
	ev := startVHDSEnvoy(t, br, port)

	if vh := dynamicVirtualHosts(t, ev); len(vh) != 0 {
		t.Fatalf("Envoy holds virtual hosts %v before any request", vh)
	}
	for _, c := range []struct{ host, want string }{
		{"api", "api-1"},
		{fmt.Sprintf("web:%d", port), "web-1"},
		{"api.service.dc1.consul", "api-1"},
	} {
		t0 := time.Now()
		got, code, err := epNewHTTP(t, ev, c.host).get()
		if err != nil || code != http.StatusOK || got != c.want {
			t.Fatalf("first request, Host %s: %d %q %v; want 200 from %s", c.host, code, got, err, c.want)
		}
		t.Logf("first request, Host %s: 200 from %s in %v", c.host, got, time.Since(t0).Round(time.Microsecond))
	}
	// gRPC by :authority: the first call fetches too.
	hc := egressGRPC(t, ev, "greeter")
	t0 := time.Now()
	if got, err := cdCall(hc); err != nil || got != "greeter-1" {
		t.Fatalf("first gRPC call, :authority greeter: %q %v; want greeter-1", got, err)
	}
	t.Logf("first gRPC call, :authority greeter: greeter-1 in %v", time.Since(t0).Round(time.Microsecond))
	egressOnly(t, "gRPC :authority greeter", 20, func() (string, error) { return cdCall(hc) }, "greeter-1")
	egressOnly(t, "Host: api", 50, egressCall(epNewHTTP(t, ev, "api")), "api-1")
	vh, cl := dynamicVirtualHosts(t, ev), dynamicClusters(t, ev)
	t.Logf("Envoy holds virtual hosts %v, clusters %v", vh, cl)
	if strings.Join(vh, ",") != "xdsbridge:egress/api,xdsbridge:egress/greeter,xdsbridge:egress/web" {
		t.Errorf("Envoy holds virtual hosts %v; want api, greeter and web only", vh)
	}
	if strings.Join(cl, ",") != "api,greeter,web" {
		t.Errorf("Envoy holds clusters %v; want api, greeter and web only", cl)
	}

	for i := range 2 {
		t0 := time.Now()
		body, code, err := epNewHTTP(t, ev, "nope").get()
		d := time.Since(t0)
		if err != nil || code != http.StatusNotFound {
			t.Fatalf("Host: nope (%d): %d %q %v; want 404", i+1, code, body, err)
		}
		t.Logf("Host: nope (%d): 404 in %v", i+1, d.Round(time.Microsecond))
		if d > time.Second {
			t.Errorf("Host: nope took %v; want an answer at once, not a timeout", d)
		}
	}

	// A change to a service Envoy does not hold sends it nothing; one to
	// a service it holds sends it that virtual host.
	attempt := regexp.QuoteMeta(vhdsStat) + "update_attempt$"
	attempts := func() int64 { return ev.Stats(t, "^"+attempt)[vhdsStat+"update_attempt"] }
	sentBefore, before := envoyXDSBytes(t, ev), attempts()
	if err := os.WriteFile(policyPath, []byte(grpcPolicy+"  svc-007: {timeout: 7s}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "svc-007's new timeout in the table", func() error {
		if d := tableTimeout(t, br, "svc-007"); d != 7*time.Second {
			return fmt.Errorf("timeout %v", d)
		}
		return nil
	})
	time.Sleep(300 * time.Millisecond)
	if got, sent := attempts(), envoyXDSBytes(t, ev)-sentBefore; got != before || sent != 0 {
		t.Errorf("svc-007 changed, which Envoy does not hold: VHDS updates %d → %d, %d bytes received; want none", before, got, sent)
	}
	if err := os.WriteFile(policyPath, []byte(grpcPolicy+"  svc-007: {timeout: 7s}\n  api: {timeout: 7s}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "api's virtual host with its new timeout in Envoy", func() error {
		if got := attempts(); got != before+1 {
			return fmt.Errorf("VHDS updates %d → %d", before, got)
		}
		return nil
	})
	t.Logf("api changed, which Envoy holds: one VHDS update, %d bytes received from the bridge", envoyXDSBytes(t, ev)-sentBefore)

	trAPI := startCalls(egressCall(epNewHTTP(t, ev, "api")))

	// billing added under traffic: Envoy asked for it before? No: ask
	// now (404), then add it.
	hBilling := epNewHTTP(t, ev, "billing")
	if _, code, err := hBilling.get(); err != nil || code != http.StatusNotFound {
		t.Fatalf("Host: billing before it exists: %d %v; want 404", code, err)
	}
	t0 = time.Now()
	br.writeServices(t, catalog(billing.port))
	for {
		name, code, err := hBilling.get()
		if err == nil && code == http.StatusOK {
			if name != "billing-1" {
				t.Fatalf("Host: billing answered by %q", name)
			}
			break
		}
		if err == nil && code != http.StatusNotFound {
			t.Fatalf("Host: billing before it is published: %d %q; want 404", code, name)
		}
		if time.Since(t0) > 10*time.Second {
			t.Fatalf("billing not reachable 10s after it was added: %d %q %v", code, name, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("billing reachable %s after it was added to the file", time.Since(t0).Round(time.Millisecond))
	egressOnly(t, "Host: billing", 50, egressCall(hBilling), "billing-1")

	br.writeServices(t, catalog(0))
	egressGone(t, hBilling, "billing-1", nil)
	recs := trAPI.end()
	bad := 0
	for _, r := range recs {
		if r.err != nil || r.subset != "api-1" {
			bad++
		}
	}
	t.Logf("Host: api: %d calls while billing came and went, %d failed or misrouted", len(recs), bad)
	if bad > 0 {
		t.Errorf("Host: api: %d of %d calls failed or misrouted (first: %v)", bad, len(recs), epFirstError(recs))
	}
	// Envoy's first VHDS request was answered: its listener did not wait
	// out the initial fetch timeout.
	if n := ev.Stats(t, "^"+regexp.QuoteMeta(vhdsStat)+"init_fetch_timeout$")[vhdsStat+"init_fetch_timeout"]; n != 0 {
		t.Errorf("%sinit_fetch_timeout = %d; want 0", vhdsStat, n)
	}
	ev.assertNoRejections(t)
	assertNoNACKs(t, br)
}

// TestEgressVHDSSotwKeepsFullTable: with egress.vhds, an Envoy over state
// of the world (examples/envoy-egress.yaml, api_type GRPC) still gets the
// whole table (VHDS needs delta xDS): every service's virtual host and
// the catch-all, each service reached by name, an unknown host the
// catch-all's 404, and no update rejected.
func TestEgressVHDSSotwKeepsFullTable(t *testing.T) {
	api := startBackend(t, "api-1", "127.0.0.1:0")
	web := startBackend(t, "web-1", "127.0.0.1:0")
	port := freePort(t)
	br, _ := startVHDSBridge(t, port, vhdsCatalog(api.port, web.port, 0, 0), "services: {}\n")
	ev := startEgressEnvoy(t, br, "GRPC", port)
	hAPI, hWeb := epNewHTTP(t, ev, "api"), epNewHTTP(t, ev, "web.service.consul")
	waitFor(t, 20*time.Second, "api and web through the egress listener", func() error {
		if _, err := hAPI.ok(); err != nil {
			return err
		}
		_, err := hWeb.ok()
		return err
	})
	egressOnly(t, "Host: api", 20, egressCall(hAPI), "api-1")
	egressOnly(t, "Host: web.service.consul", 20, egressCall(hWeb), "web-1")
	body, err := ev.Get("/config_dump?resource=dynamic_route_configs")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(body, `"domains"`); n != vhdsFiller+3 || strings.Contains(body, `"vhds"`) {
		t.Errorf("sotw Envoy's route configuration has %d virtual hosts (vhds: %v); want the whole table, %d, without vhds", n, strings.Contains(body, `"vhds"`), vhdsFiller+3)
	}
	got, code, err := epNewHTTP(t, ev, "nope").get()
	if err != nil || code != http.StatusNotFound || !strings.HasPrefix(got, translate.EgressNotFoundBody) {
		t.Errorf("Host: nope: %d %q %v; want the catch-all's 404", code, got, err)
	}
	ev.assertNoRejections(t)
	assertNoNACKs(t, br)
}
