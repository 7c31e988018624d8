package translate

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/xdsbridge/xdsbridge/policy"
	"github.com/xdsbridge/xdsbridge/sources"
)

// routeCase is a golden case of RouteConfigFor: the policy of service
// name, as written in a policy file (it must pass the file's Check).
type routeCase struct {
	name    string // golden file testdata/policy-route-<name>.golden.json
	service string
	yaml    string // the service's policy, indented under services.<service>
	diags   []Diagnostic
}

func routeCases() []routeCase {
	return []routeCase{
		{
			name: "paths", service: "greeter",
			yaml: `
routes:
  - match: {prefix: /a.A/}
    destination: {service: a}
  - match: {path: /b.B/Get}
    destination: {service: b}
  - match: {regex: '/c\.C/(Get|List)'}
    destination: {service: c}
  - match: {prefix: /D.d/, case_insensitive: true}
    destination: {service: d}
  - match: {path: /E.e/Get, case_insensitive: true}
    destination: {service: e}
  - match: {}
    destination: {service: f}
`,
		},
		{
			name: "headers", service: "greeter",
			yaml: `
routes:
  - match:
      headers:
        - {name: X-Tenant, exact: test}
        - {name: x-region, prefix: eu-}
        - {name: x-host, suffix: .internal}
        - {name: x-trace, contains: abc, invert: true}
        - {name: x-id, regex: '[0-9]+'}
        - {name: x-debug, present: true}
        - {name: x-shard, range: {start: -5, end: 10}}
        - {name: x-canary, present: true, invert: true}
    destination: {service: matched}
  - match:
      headers:
        - {name: ':authority', exact: greeter.example.com}
    destination: {service: by-authority}
  - match:
      headers:
        - {name: content-type, prefix: application/grpc}
    destination: {service: by-content-type}
  - match:
      headers:
        - {name: user-agent, present: true, invert: true}
        - {name: x-token-bin, present: true}
    destination: {service: with-token}
  - match:
      headers:
        - {name: x-key-bin, exact: abc}
    destination: {service: by-key}
`,
			diags: []Diagnostic{
				{"greeter", "routes[1].match.headers[0].name", `gRPC clients choose the route before their transport adds ":authority": it is absent to them, the match always fails for them: they never take this route`},
				{"greeter", "routes[2].match.headers[0].name", `gRPC clients choose the route before their transport adds "content-type": it is absent to them, the match always fails for them: they never take this route`},
				{"greeter", "routes[3].match.headers[0].name", `gRPC clients choose the route before their transport adds "user-agent": it is absent to them, the match always holds for them`},
				{"greeter", "routes[4].match.headers[0].name", "gRPC clients match binary (-bin) headers on their raw bytes, Envoy on their base64 text: only a present match means the same to both"},
			},
		},
		{
			name: "methods", service: "web",
			yaml: `
routes:
  - match: {prefix: /static/, methods: [GET]}
    destination: {service: static}
  - match: {methods: [GET, HEAD, OPTIONS]}
    destination: {service: reader}
`,
			diags: []Diagnostic{
				{"web", "routes[0].match.methods", `gRPC clients choose the route before their transport adds ":method": they never take this route`},
				{"web", "routes[1].match.methods", `gRPC clients choose the route before their transport adds ":method": they never take this route`},
			},
		},
		{
			name: "query-parameters", service: "web",
			yaml: `
routes:
  - match:
      prefix: /search
      query_parameters:
        - {name: q, exact: xds}
        - {name: page, regex: '[0-9]{1,3}'}
        - {name: debug, present: true}
    destination: {service: search}
`,
			diags: []Diagnostic{
				{"web", "routes[0].match.query_parameters", "gRPC clients ignore every route that matches query parameters (gRFC A28): they never take this route"},
			},
		},
		{
			name: "fractions", service: "greeter",
			yaml: `
routes:
  - match: {prefix: /a/, fraction: 12.5}
    destination: {service: eighth}
  - match: {prefix: /b/, fraction: 0.0001}
    destination: {service: one-in-a-million}
  - match: {prefix: /c/, fraction: 100}
    destination: {service: all}
  - match: {prefix: /d/, fraction: 0}
    destination: {service: none}
  - match: {prefix: /e/, fraction: 33.3333}
    destination: {service: third}
`,
		},
		{
			name: "splits", service: "greeter",
			yaml: `
subsets:
  v1: {filter: 'Service.Meta.version == "1"'}
  v2: {filter: 'Service.Meta.version == "2"'}
split:
  - {weight: 99.5, subset: v1}
  - {weight: 0.5, subset: v2}
routes:
  - match: {prefix: /canary/}
    split:
      - {weight: 49.99, service: other}
      - {weight: 25.25, service: other, subset: blue}
      - {weight: 0, subset: v2}
      - {weight: 24.75}
      - {weight: 0.01, service: other}
`,
		},
		{
			name: "retries", service: "greeter",
			yaml: `
retry:
  retry_on: [unavailable, 5xx, retriable-status-codes]
  status_codes: [503, 504]
  per_try_timeout: 1s
  num_retries: 7
routes:
  - match: {prefix: /idempotent/}
    retry: {retry_on: [unavailable, cancelled, deadline-exceeded, internal, resource-exhausted], num_retries: 3, base_interval: 10ms, max_interval: 100ms}
  - match: {prefix: /http/}
    retry: {retry_on: [reset, connect-failure], base_interval: 20ms}
  - match: {prefix: /inherits/}
    destination: {service: other}
`,
			diags: []Diagnostic{
				{"greeter", "retry.retry_on", "gRPC clients ignore 5xx, retriable-status-codes (Envoy only)"},
				{"greeter", "retry.num_retries", "7: gRFC A44 caps gRPC clients at 5 attempts, 4 retries (grpc-go v1.85 does not: it makes all 8)"},
				{"greeter", "retry.per_try_timeout", "gRPC clients ignore it (gRFC A44: not without hedging); Envoy only"},
				{"greeter", "routes[1].retry.retry_on", "no gRPC condition (cancelled, deadline-exceeded, internal, resource-exhausted, unavailable): gRPC clients do not retry"},
			},
		},
		{
			name: "timeouts", service: "greeter",
			yaml: `
timeout: 30s
routes:
  - match: {prefix: /slow/}
    timeout: 2m
  - match: {prefix: /fast/}
    timeout: 250ms
    destination: {service: fast}
  - match: {prefix: /inherits/}
`,
		},
		{
			name: "domains", service: "greeter",
			yaml: `
domains: [greeter.example.com, "*.greeter", "greeter.*", "*-api.example.com", GREETER, "*"]
`,
			diags: []Diagnostic{
				{"greeter", "domains[4]", `"GREETER" is the service's name, always a domain; dropped (Envoy refuses a domain twice)`},
			},
		},
		{
			name: "redirect", service: "old-api",
			yaml: `
redirect: {service: greeter, subset: v2}
subsets:
  legacy: {filter: '"legacy" in Service.Tags'}
routes:
  - match: {prefix: /self/}
    destination: {}
  - match: {prefix: /named-self/}
    destination: {service: old-api}
  - match: {prefix: /legacy/}
    destination: {subset: legacy}
  - match: {prefix: /other/}
    destination: {service: other}
  - match: {prefix: /split/}
    split:
      - {weight: 90}
      - {weight: 10, service: other}
`,
		},
		{
			name: "redirect-own-subset", service: "api",
			yaml: `
redirect: {subset: stable}
subsets:
  stable: {filter: 'Service.Meta.track == "stable"'}
`,
		},
		{
			name: "datacenters", service: "api",
			yaml: `
redirect: {service: api, datacenter: dc2}
routes:
  - match: {prefix: /dc3/}
    destination: {service: billing, subset: v1, datacenter: dc3}
  - match: {prefix: /own-dc3/}
    destination: {datacenter: dc3}
`,
			diags: []Diagnostic{
				{"api", "redirect.datacenter", `datacenter "dc2" cannot be routed to: the clusters of other datacenters are named by the Consul source's cluster_name template, unknown here; sent to service "api"'s own cluster (with the default template, every datacenter's hosts, as failover priorities)`},
				{"api", "routes[0].destination.datacenter", `datacenter "dc3" cannot be routed to: the clusters of other datacenters are named by the Consul source's cluster_name template, unknown here; sent to service "billing"'s own cluster (with the default template, every datacenter's hosts, as failover priorities)`},
				{"api", "routes[1].destination.datacenter", `datacenter "dc3" cannot be routed to: the clusters of other datacenters are named by the Consul source's cluster_name template, unknown here; sent to service "api"'s own cluster (with the default template, every datacenter's hosts, as failover priorities)`},
			},
		},
		{
			name: "hash-policies", service: "greeter",
			yaml: `
load_balancer:
  policy: ring_hash
  hash_policies:
    - {header: X-User, terminal: true}
    - cookie: {name: session, ttl: 1h, path: /}
    - cookie: {name: sticky}
    - source_ip: true
    - query_parameter: user
    - header: x-key-bin
routes:
  - match: {prefix: /other/}
    destination: {service: other}
`,
			diags: []Diagnostic{
				{"greeter", "load_balancer.hash_policies[1].cookie", "gRPC clients hash only headers and ignore it (Envoy only)"},
				{"greeter", "load_balancer.hash_policies[2].cookie", "gRPC clients hash only headers and ignore it (Envoy only)"},
				{"greeter", "load_balancer.hash_policies[3].source_ip", "gRPC clients hash only headers and ignore it (Envoy only)"},
				{"greeter", "load_balancer.hash_policies[4].query_parameter", "gRPC clients hash only headers and ignore it (Envoy only)"},
				{"greeter", "load_balancer.hash_policies[5].header", "gRPC clients do not hash binary (-bin) headers (Envoy only)"},
			},
		},
		{
			name: "default-subset", service: "web",
			yaml: `
subsets:
  v1: {filter: 'Service.Meta.version == "1"'}
  v2: {filter: 'Service.Meta.version == "2"'}
default_subset: v1
routes:
  - match: {prefix: /self/}
    destination: {}
  - match: {prefix: /named-self/}
    destination: {service: web}
  - match: {prefix: /v2/}
    destination: {subset: v2}
    prefix_rewrite: /
`,
			diags: []Diagnostic{
				{"web", "routes[2].prefix_rewrite", "gRPC clients cannot rewrite paths and ignore it (Envoy only)"},
			},
		},
	}
}

// parseServicePolicy parses one service's policy as a policy file would
// hold it, checked.
func parseServicePolicy(t *testing.T, service, yaml string) *policy.Service {
	t.Helper()
	var b strings.Builder
	b.WriteString("services:\n  " + service + ":\n")
	for _, l := range strings.Split(strings.TrimPrefix(yaml, "\n"), "\n") {
		b.WriteString("    " + l + "\n")
	}
	f, err := policy.ParseFile([]byte(b.String()))
	if err != nil {
		t.Fatalf("policy does not parse: %v\n%s", err, b.String())
	}
	p, _, ok := f.For(service)
	if !ok {
		t.Fatalf("no policy for %s", service)
	}
	return &p
}

// fullPolicies are the services of policy/testdata/full.yaml that are not
// patterns.
func fullPolicies(t *testing.T) map[string]*policy.Service {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "policy", "testdata", "full.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := policy.ParseFile(data)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*policy.Service{}
	for name, p := range f.Services {
		if !policy.IsPattern(name) {
			p := p
			out[name] = &p
		}
	}
	return out
}

func TestPolicyRouteGolden(t *testing.T) {
	for _, tc := range routeCases() {
		t.Run(tc.name, func(t *testing.T) {
			p := parseServicePolicy(t, tc.service, tc.yaml)
			rc := checkRouteConfig(t, tc.service, p, tc.diags)
			golden(t, "policy-route-"+tc.name, marshal(t, rc))
		})
	}
}

// TestPolicyRouteFullFile translates the services of the policy file that
// shows every feature.
func TestPolicyRouteFullFile(t *testing.T) {
	ps := fullPolicies(t)
	want := map[string][]Diagnostic{
		"greeter": {
			{"greeter", "load_balancer.hash_policies[1].cookie", "gRPC clients hash only headers and ignore it (Envoy only)"},
			{"greeter", "load_balancer.hash_policies[2].source_ip", "gRPC clients hash only headers and ignore it (Envoy only)"},
			{"greeter", "retry.retry_on", "gRPC clients ignore 5xx, retriable-status-codes (Envoy only)"},
			{"greeter", "retry.per_try_timeout", "gRPC clients ignore it (gRFC A44: not without hedging); Envoy only"},
			{"greeter", "routes[2].prefix_rewrite", "gRPC clients cannot rewrite paths and ignore it (Envoy only)"},
			{"greeter", "routes[2].match.methods", `gRPC clients choose the route before their transport adds ":method": they never take this route`},
			{"greeter", "routes[2].match.query_parameters", "gRPC clients ignore every route that matches query parameters (gRFC A28): they never take this route"},
		},
		"old-api": nil,
	}
	if len(ps) != len(want) {
		t.Fatalf("full.yaml has services %v; the test knows %d", len(ps), len(want))
	}
	for name, p := range ps {
		t.Run(name, func(t *testing.T) {
			rc := checkRouteConfig(t, name, p, want[name])
			golden(t, "policy-route-full-"+name, marshal(t, rc))
		})
	}
}

// checkRouteConfig builds a service's route and checks what every route
// must hold: its diagnostics, the proto's own validation, the name and
// domain gRPC clients look for, a default route last, the policy
// untouched, and the same result twice.
func checkRouteConfig(t *testing.T, service string, p *policy.Service, diags []Diagnostic) *route.RouteConfiguration {
	t.Helper()
	before := clonePolicy(t, p)
	rc, got := RouteConfigFor(service, p)
	if d := cmp.Diff(diags, got); d != "" {
		t.Errorf("diagnostics (-want +got):\n%s", d)
	}
	if err := rc.ValidateAll(); err != nil {
		t.Errorf("ValidateAll: %v", err)
	}
	if d := cmp.Diff(before, clonePolicy(t, p)); d != "" {
		t.Errorf("policy modified (-before +after):\n%s", d)
	}
	again, _ := RouteConfigFor(service, p)
	if d := cmp.Diff(rc, again, protocmp.Transform()); d != "" {
		t.Errorf("not deterministic (-first +second):\n%s", d)
	}
	if rc.GetName() != service || len(rc.GetVirtualHosts()) != 1 {
		t.Fatalf("route configuration %q with %d virtual hosts", rc.GetName(), len(rc.GetVirtualHosts()))
	}
	vh := rc.GetVirtualHosts()[0]
	if vh.GetDomains()[0] != service {
		t.Errorf("first domain %q, want the service's name", vh.GetDomains()[0])
	}
	routes := vh.GetRoutes()
	if len(routes) != len(p.Routes)+1 {
		t.Fatalf("%d routes, want the policy's %d and the default", len(routes), len(p.Routes))
	}
	if last := routes[len(routes)-1].GetMatch(); last.GetPrefix() != "/" || len(last.GetHeaders()) > 0 || last.GetRuntimeFraction() != nil {
		t.Errorf("last route matches %v, want everything", last)
	}
	checkGRPCAccepts(t, rc)
	return rc
}

func clonePolicy(t *testing.T, p *policy.Service) string {
	t.Helper()
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A nil policy is today's route, and so is the zero policy, and a policy
// of cluster settings only: no golden file changes.
func TestPolicyRouteDefault(t *testing.T) {
	want := RouteConfig("web")
	for _, p := range []*policy.Service{
		nil,
		{},
		{Protocol: policy.ProtocolGRPC, ConnectTimeout: 1e9, Subsets: map[string]policy.Subset{"v1": {}}},
	} {
		got, diags := RouteConfigFor("web", p)
		if !proto.Equal(got, want) || diags != nil {
			t.Errorf("policy %+v: %v, %v; want %v and no diagnostics", p, got, diags, want)
		}
	}
}

// The route is the one Options.Service publishes, with its diagnostics,
// and counts towards max_resource_bytes.
func TestPolicyRouteInService(t *testing.T) {
	p := parseServicePolicy(t, "web", `
routes:
  - match: {prefix: /q, query_parameters: [{name: a, present: true}]}
    destination: {service: other}
`)
	in := sources.Service{Name: "web", Endpoints: []sources.Endpoint{ep("10.0.0.1", 80)}}
	res, diags := Options{Policy: p}.Service(in)
	want, wantDiags := RouteConfigFor("web", p)
	if d := cmp.Diff(want, res.Route, protocmp.Transform()); d != "" {
		t.Errorf("published route (-want +got):\n%s", d)
	}
	if d := cmp.Diff(wantDiags, diags); d != "" || len(diags) != 1 {
		t.Errorf("diagnostics (-want +got):\n%s", d)
	}
	if err := res.Validate(); err != nil {
		t.Error(err)
	}

	// Many long routes: the route configuration alone is over the limit.
	big := &policy.Service{}
	for i := 0; i < 200; i++ {
		big.Routes = append(big.Routes, policy.Route{Match: policy.Match{Path: "/" + strings.Repeat("x", 100)}})
	}
	r := Options{Policy: big}.ServiceWithin(in, Limits{MaxResourceBytes: MinResourceBytes * 4})
	if !r.Refused || r.Exceeded[LimitResourceBytes] != 1 {
		t.Fatalf("refused %v, exceeded %v; want refused for the route's size", r.Refused, r.Exceeded)
	}
	last := r.Diagnostics[len(r.Diagnostics)-1]
	if last.Field != "route_configuration" {
		t.Errorf("diagnostic %v, want one for route_configuration", last)
	}
}

// Where targets go, one by one.
func TestPolicyRouteTargets(t *testing.T) {
	subsets := map[string]policy.Subset{"v1": {}, "v2": {}}
	for _, tc := range []struct {
		name   string
		p      policy.Service
		target policy.Target
		want   string
	}{
		{"self", policy.Service{}, policy.Target{}, "s"},
		{"self by name", policy.Service{}, policy.Target{Service: "s"}, "s"},
		{"self subset", policy.Service{Subsets: subsets}, policy.Target{Subset: "v2"}, "s/v2"},
		{"self by name and subset", policy.Service{Subsets: subsets}, policy.Target{Service: "s", Subset: "v2"}, "s/v2"},
		{"default subset", policy.Service{Subsets: subsets, DefaultSubset: "v1"}, policy.Target{}, "s/v1"},
		{"default subset by name", policy.Service{Subsets: subsets, DefaultSubset: "v1"}, policy.Target{Service: "s"}, "s/v1"},
		{"other", policy.Service{Subsets: subsets, DefaultSubset: "v1"}, policy.Target{Service: "o"}, "o"},
		{"other subset", policy.Service{}, policy.Target{Service: "o", Subset: "v1"}, "o/v1"},
		{"redirected", policy.Service{Redirect: &policy.Target{Service: "o"}}, policy.Target{}, "o"},
		{"redirected by name", policy.Service{Redirect: &policy.Target{Service: "o", Subset: "v9"}}, policy.Target{Service: "s"}, "o/v9"},
		{"redirected own subset", policy.Service{Subsets: subsets, Redirect: &policy.Target{Service: "o"}}, policy.Target{Subset: "v1"}, "s/v1"},
		{"redirect to own subset", policy.Service{Subsets: subsets, Redirect: &policy.Target{Subset: "v2"}}, policy.Target{}, "s/v2"},
		{"redirected, other", policy.Service{Redirect: &policy.Target{Service: "o"}}, policy.Target{Service: "x"}, "x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.p
			target := tc.target
			p.Routes = []policy.Route{{Match: policy.Match{Prefix: "/r"}, Destination: &target}}
			rc, _ := RouteConfigFor("s", &p)
			routes := rc.GetVirtualHosts()[0].GetRoutes()
			if got := routes[0].GetRoute().GetCluster(); got != tc.want {
				t.Errorf("destination %+v goes to %q, want %q", tc.target, got, tc.want)
			}
			// The split share and the default route resolve the same way.
			p.Routes[0].Destination = nil
			p.Routes[0].Split = []policy.Split{{Weight: 100, Service: target.Service, Subset: target.Subset}}
			rc, _ = RouteConfigFor("s", &p)
			if got := rc.GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetWeightedClusters().GetClusters(); len(got) != 1 || got[0].GetName() != tc.want {
				t.Errorf("split %+v goes to %v, want %q", tc.target, got, tc.want)
			}
			if (tc.target == policy.Target{}) {
				if got := routes[1].GetRoute().GetCluster(); got != tc.want {
					t.Errorf("default route goes to %q, want %q", got, tc.want)
				}
			}
		})
	}
}

// Input the policy's Check refuses still translates to something every
// client accepts, with a diagnostic.
func TestPolicyRouteUncheckedInput(t *testing.T) {
	zero := uint32(0)
	p := &policy.Service{
		Split: []policy.Split{{Weight: 0, Service: "a"}, {Weight: 0.001, Service: "b"}},
		Routes: []policy.Route{
			{Match: policy.Match{Regex: "/x", CaseInsensitive: true, Headers: []policy.HeaderMatch{{Name: "x-empty"}}}},
		},
		Retry:        &policy.Retry{On: []string{"unavailable"}, NumRetries: &zero, MaxInterval: 1e9},
		LoadBalancer: &policy.LoadBalancer{HashPolicies: []policy.HashPolicy{{}}},
	}
	rc, diags := RouteConfigFor("s", p)
	want := []Diagnostic{
		{"s", "load_balancer.hash_policies[0]", "names nothing to hash; dropped"},
		{"s", "routes[0].match.case_insensitive", "ignored with a regex (write (?i) in it)"},
		{"s", "routes[0].match.headers[0]", "matches nothing (give one of exact, prefix, suffix, contains, regex, present and range); dropped"},
		{"s", "split", "no share has a weight above 0; the route goes to the service itself"},
	}
	if d := cmp.Diff(want, diags); d != "" {
		t.Errorf("diagnostics (-want +got):\n%s", d)
	}
	if err := rc.ValidateAll(); err != nil {
		t.Error(err)
	}
	checkGRPCAccepts(t, rc)
	def := rc.GetVirtualHosts()[0].GetRoutes()[1].GetRoute()
	if def.GetCluster() != "s" {
		t.Errorf("default route to %v, want the service", def.GetClusterSpecifier())
	}
	if rp := def.GetRetryPolicy(); rp.GetNumRetries() != nil || rp.GetRetryBackOff() != nil {
		t.Errorf("retry policy %v: num_retries 0 and a back-off without base are NACKed by gRPC clients", rp)
	}
}

// A route with a regex Envoy would refuse is dropped, whichever matcher
// holds it; the others stay.
func TestPolicyRouteRegexTooBig(t *testing.T) {
	big := "[a-z]{1,50}"
	// Four methods of 32 letters, without a common prefix to factor out.
	methods := []string{strings.Repeat("A", 32), strings.Repeat("B", 32), strings.Repeat("C", 32), strings.Repeat("D", 32)}
	p := &policy.Service{Routes: []policy.Route{
		{Match: policy.Match{Regex: big}},
		{Match: policy.Match{Prefix: "/kept", Headers: []policy.HeaderMatch{{Name: "x", Regex: "[a-z]{1,20}"}}}},
		{Match: policy.Match{Headers: []policy.HeaderMatch{{Name: "x", Exact: "a"}, {Name: "y", Regex: big}}}},
		{Match: policy.Match{Methods: methods}},
		{Match: policy.Match{QueryParameters: []policy.QueryParameterMatch{{Name: "q", Regex: big}}}},
	}}
	rc, diags := RouteConfigFor("s", p)
	var fields []string
	for _, d := range diags {
		if strings.Contains(d.Message, "route dropped") {
			fields = append(fields, d.Field)
		}
	}
	want := []string{"routes[0].match.regex", "routes[2].match.headers[1].regex", "routes[3].match.methods", "routes[4].match.query_parameters[0].regex"}
	if d := cmp.Diff(want, fields); d != "" {
		t.Errorf("dropped (-want +got):\n%s", d)
	}
	routes := rc.GetVirtualHosts()[0].GetRoutes()
	if len(routes) != 2 || routes[0].GetMatch().GetPrefix() != "/kept" {
		t.Errorf("routes %v, want /kept and the default", routes)
	}
}
