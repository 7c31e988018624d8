package translate

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/xdsbridge/xdsbridge/policy"
)

// envoyBootstrap is a bootstrap as the bridge's Envoys have (ADS for
// dynamic resources), with one static listener per route configuration
// whose HTTP connection manager holds it inline, and a static cluster for
// every cluster those routes send to: Envoy checks that the clusters of a
// static route table exist (validate_clusters defaults to true for it).
// Clusters named in missing are left out.
func envoyBootstrap(t *testing.T, rcs map[string]*route.RouteConfiguration, missing ...string) []byte {
	t.Helper()
	return envoyBootstrapWith(t, rcs, envoyRig{missing: missing})
}

// envoyRig is what a bootstrap that serves (not only validates) adds.
type envoyRig struct {
	missing []string
	// ports are the listeners' ports by route name (default 20000 + i:
	// a validated bootstrap binds nothing).
	ports map[string]int
	// backend is the address of a cluster's one host (HTTP/2); nil:
	// clusters without hosts.
	backend func(cluster string) string
	admin   int // the admin port (0: any) of a serving bootstrap
}

func envoyBootstrapWith(t *testing.T, rcs map[string]*route.RouteConfiguration, rig envoyRig) []byte {
	t.Helper()
	missing := rig.missing
	names := make([]string, 0, len(rcs))
	for n := range rcs {
		names = append(names, n)
	}
	sort.Strings(names)
	clusters := map[string]bool{}
	var listeners []any
	for i, n := range names {
		b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(rcs[n])
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range RouteClusters(rcs[n]) {
			clusters[c] = true
		}
		port := 20000 + i
		if p, ok := rig.ports[n]; ok {
			port = p
		}
		listeners = append(listeners, map[string]any{
			"name": "route-" + n,
			"address": map[string]any{"socket_address": map[string]any{
				"address": "127.0.0.1", "port_value": port,
			}},
			"filter_chains": []any{map[string]any{"filters": []any{map[string]any{
				"name": "envoy.filters.network.http_connection_manager",
				"typed_config": map[string]any{
					"@type":        "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
					"stat_prefix":  n,
					"route_config": json.RawMessage(b),
					"http_filters": []any{map[string]any{
						"name":         "envoy.filters.http.router",
						"typed_config": map[string]any{"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"},
					}},
				},
			}}}},
		})
	}
	for _, m := range missing {
		delete(clusters, m)
	}
	staticClusters := []any{map[string]any{
		"name":                             "xdsbridge",
		"type":                             "STATIC",
		"connect_timeout":                  "1s",
		"typed_extension_protocol_options": http2Options,
		"load_assignment": map[string]any{"cluster_name": "xdsbridge", "endpoints": []any{map[string]any{
			"lb_endpoints": []any{map[string]any{"endpoint": map[string]any{"address": map[string]any{
				"socket_address": map[string]any{"address": "127.0.0.1", "port_value": 18000},
			}}}},
		}}},
	}}
	cnames := make([]string, 0, len(clusters))
	for c := range clusters {
		cnames = append(cnames, c)
	}
	sort.Strings(cnames)
	for _, c := range cnames {
		cl := map[string]any{
			"name":            c,
			"type":            "STATIC",
			"connect_timeout": "1s",
			"lb_policy":       "RING_HASH",
			"load_assignment": map[string]any{"cluster_name": c},
		}
		if rig.backend != nil {
			host, port, err := net.SplitHostPort(rig.backend(c))
			if err != nil {
				t.Fatal(err)
			}
			cl["load_assignment"] = map[string]any{"cluster_name": c, "endpoints": []any{map[string]any{
				"lb_endpoints": []any{map[string]any{"endpoint": map[string]any{"address": map[string]any{
					"socket_address": map[string]any{"address": host, "port_value": json.Number(port)},
				}}}},
			}}}
			cl["typed_extension_protocol_options"] = http2Options
		}
		staticClusters = append(staticClusters, cl)
	}
	doc := map[string]any{
		"node": map[string]any{"id": "route-validation", "cluster": "route-validation"},
		"dynamic_resources": map[string]any{
			"ads_config": map[string]any{
				"api_type":              "GRPC",
				"transport_api_version": "V3",
				"grpc_services":         []any{map[string]any{"envoy_grpc": map[string]any{"cluster_name": "xdsbridge"}}},
			},
			"cds_config": map[string]any{"ads": map[string]any{}, "resource_api_version": "V3"},
			"lds_config": map[string]any{"ads": map[string]any{}, "resource_api_version": "V3"},
		},
		"static_resources": map[string]any{"listeners": listeners, "clusters": staticClusters},
	}
	if rig.backend != nil {
		// A running Envoy would wait for its first clusters over ADS
		// (15s) before listening.
		delete(doc, "dynamic_resources")
	}
	if rig.admin >= 0 && rig.backend != nil {
		doc["admin"] = map[string]any{"address": map[string]any{"socket_address": map[string]any{"address": "127.0.0.1", "port_value": rig.admin}}}
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var http2Options = map[string]any{
	"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": map[string]any{
		"@type":                "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
		"explicit_http_config": map[string]any{"http2_protocol_options": map[string]any{}},
	},
}

// envoyValidate runs envoy --mode validate on a bootstrap.
func envoyValidateRoutes(t *testing.T, envoy string, bootstrap []byte) (string, error) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "bootstrap.json")
	if err := os.WriteFile(path, bootstrap, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(envoy, "--mode", "validate", "-c", path, "--log-level", "warn", "--use-dynamic-base-id")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// policyRouteConfigs are the route configurations of every golden policy
// case, by golden name.
func policyRouteConfigs(t *testing.T) map[string]*route.RouteConfiguration {
	t.Helper()
	rcs := map[string]*route.RouteConfiguration{}
	for _, tc := range routeCases() {
		rc, _ := RouteConfigFor(tc.service, parseServicePolicy(t, tc.service, tc.yaml))
		rcs[tc.name] = rc
	}
	for name, p := range fullPolicies(t) {
		rc, _ := RouteConfigFor(name, p)
		rcs["full-"+name] = rc
	}
	return rcs
}

// Envoy 1.40 accepts every golden policy route, in a bootstrap shaped as
// the bridge's Envoys' are; and refuses one whose cluster is missing, so
// that a pass means something.
func TestPolicyRoutesEnvoyValidates(t *testing.T) {
	envoy := requireEnvoy(t)
	rcs := policyRouteConfigs(t)
	if out, err := envoyValidateRoutes(t, envoy, envoyBootstrap(t, rcs)); err != nil {
		t.Fatalf("envoy --mode validate refused the policy routes: %v\n%s", err, tail(out, 40))
	}
	out, err := envoyValidateRoutes(t, envoy, envoyBootstrap(t, rcs, "greeter/v2"))
	if err == nil {
		t.Fatalf("envoy accepted routes to a missing cluster: the validation proves nothing\n%s", tail(out, 20))
	}
	if !strings.Contains(out, "greeter/v2") {
		t.Errorf("envoy refused the bootstrap, but not for the missing cluster:\n%s", tail(out, 20))
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Translation drops exactly the routes whose regex Envoy refuses: the
// route configuration it publishes is accepted, and each dropped regex,
// alone in a route, is refused.
func TestPolicyRouteRegexesEnvoyAccepts(t *testing.T) {
	envoy := requireEnvoy(t)
	regexes := []string{
		"[a-z]{1,48}", "[a-z]{1,49}", // 99 and 101 RE2 instructions
		"(?:a+?){32}", "(?:a+?){33}", // 99 and 102
		`/x\x{ff}`, `/x\x{100}`, // Envoy's RE2 reads Latin-1
		"(?:[a-z]*)?/(?:[0-9]+)?" + strings.Repeat("x", 84), // 100: RE2 merges (x*)? into x*
		`/a\777`,
	}
	p := &policy.Service{}
	for _, re := range regexes {
		p.Routes = append(p.Routes, policy.Route{Match: policy.Match{Regex: re}})
	}
	rc, diags := RouteConfigFor("s", p)
	dropped := map[string]bool{}
	for _, d := range diags {
		if strings.Contains(d.Message, "route dropped") {
			var i int
			if _, err := fmt.Sscanf(d.Field, "routes[%d]", &i); err != nil {
				t.Fatalf("diagnostic on %s", d.Field)
			}
			dropped[regexes[i]] = true
		}
	}
	want := map[string]bool{"[a-z]{1,49}": true, "(?:a+?){33}": true, `/x\x{100}`: true, `/a\777`: true}
	if d := cmp.Diff(want, dropped); d != "" {
		t.Errorf("dropped (-want +got):\n%s", d)
	}
	if out, err := envoyValidateRoutes(t, envoy, envoyBootstrap(t, map[string]*route.RouteConfiguration{"s": rc})); err != nil {
		t.Fatalf("envoy refused the translated routes: %v\n%s", err, tail(out, 5))
	}
	for re := range dropped {
		one := RouteConfig("x")
		one.VirtualHosts[0].Routes[0].Match.PathSpecifier = &route.RouteMatch_SafeRegex{SafeRegex: &matcher.RegexMatcher{Regex: re}}
		if out, err := envoyValidateRoutes(t, envoy, envoyBootstrap(t, map[string]*route.RouteConfiguration{"x": one})); err == nil {
			t.Errorf("%q was dropped, and Envoy accepts it", re)
		} else if !strings.Contains(out, "RE2 program size") && !strings.Contains(out, "invalid escape") {
			t.Errorf("%q: envoy refused it for another reason:\n%s", re, tail(out, 5))
		}
	}
}
