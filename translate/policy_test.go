package translate

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/xdsbridge/xdsbridge/config/decode"
	"github.com/xdsbridge/xdsbridge/policy"
	"github.com/xdsbridge/xdsbridge/sources"
)

func u32p(v uint32) *uint32 { return &v }

func dur(d time.Duration) decode.Duration { return decode.Duration(d) }

// consulEP is an endpoint as the Consul source publishes it (see
// sources/consul/mapping.go metadataOf).
func consulEP(addr string, node string, tags []string, meta, nodeMeta map[string]string) sources.Endpoint {
	md := map[string]any{"datacenter": "dc1", "node": node, "service_id": "web-" + addr, "service": "web"}
	ts := []any{}
	for _, t := range tags {
		ts = append(ts, t)
		md["tag."+t] = true
	}
	md["tags"] = ts
	for k, v := range meta {
		md["meta."+k] = v
	}
	for k, v := range nodeMeta {
		md["node_meta."+k] = v
	}
	return sources.Endpoint{Address: addr, Port: 8080, Metadata: sources.Metadata{"consul": md}}
}

// subsetService has hosts told apart by tags, service meta, node meta,
// health, locality and file-source metadata.
func subsetService() sources.Service {
	e1 := consulEP("10.0.0.1", "n1", []string{"v1"}, map[string]string{"version": "1"}, map[string]string{"rack": "r1"})
	e1.Health = sources.HealthHealthy
	e2 := consulEP("10.0.0.2", "n2", []string{"v1", "canary"}, map[string]string{"version": "1"}, map[string]string{"rack": "r2"})
	e2.Health = sources.HealthUnhealthy
	e3 := consulEP("10.0.0.3", "n3", []string{"v2"}, map[string]string{"version": "2"}, map[string]string{"rack": "r1"})
	e3.Locality = sources.Locality{Region: "eu", Zone: "eu-1"}
	e4 := consulEP("10.0.0.4", "n3", []string{"v2"}, map[string]string{"version": "2", "app.kubernetes.io/name": "web"}, nil)
	e4.Health = sources.HealthDraining
	e4.Priority = 1
	e5 := sources.Endpoint{Address: "10.0.1.1", Port: 9090, Hostname: "file-0", Metadata: sources.Metadata{"xdsbridge": {"track": "beta"}}}
	return sources.Service{Name: "web", Endpoints: []sources.Endpoint{e3, e1, e5, e4, e2}}
}

func policyCases() []goldenCase {
	two := sources.Service{Name: "api", Endpoints: []sources.Endpoint{ep("10.0.0.1", 80), ep("10.0.0.2", 80)}}
	named := func(name string) sources.Service { s := two.Clone(); s.Name = name; return s }
	return []goldenCase{
		{
			// protocol grpc: HTTP/2 upstream through HttpProtocolOptions.
			name: "policy-grpc-timeout",
			opts: Options{Policy: &policy.Service{Protocol: policy.ProtocolGRPC, ConnectTimeout: dur(2 * time.Second)}},
			in:   named("greeter"),
			diags: []Diagnostic{
				{"greeter", "connect_timeout", "grpc clients ignore it (they wait up to 20s for a connection)"},
			},
		},
		{
			name: "policy-http-round-robin",
			opts: Options{Policy: &policy.Service{Protocol: policy.ProtocolHTTP, LoadBalancer: &policy.LoadBalancer{Policy: policy.LBRoundRobin}}},
			in:   named("http1"),
		},
		{
			name: "policy-least-request",
			opts: Options{Policy: &policy.Service{LoadBalancer: &policy.LoadBalancer{Policy: policy.LBLeastRequest, LeastRequest: &policy.LeastRequest{ChoiceCount: 3}}}},
			in:   named("lr"),
		},
		{
			name: "policy-ring-hash",
			opts: Options{Policy: &policy.Service{Protocol: policy.ProtocolHTTP2, LoadBalancer: &policy.LoadBalancer{
				Policy: policy.LBRingHash, RingHash: &policy.RingHash{MinimumRingSize: 1024, MaximumRingSize: 65536},
				HashPolicies: []policy.HashPolicy{{Header: "x-user"}},
			}}},
			in:    named("rh"),
			diags: []Diagnostic{{"rh", "load_balancer.ring_hash", "grpc clients cap the ring at 4096 entries (GRPC_RING_HASH_CAP)"}},
		},
		{
			name: "policy-maglev",
			opts: Options{Policy: &policy.Service{LoadBalancer: &policy.LoadBalancer{Policy: policy.LBMaglev}}},
			in:   named("mg"),
			diags: []Diagnostic{
				{"mg", "load_balancer.policy", "grpc clients have no maglev: they use ring_hash, the next policy of load_balancing_policy"},
			},
		},
		{
			name: "policy-random",
			opts: Options{Policy: &policy.Service{LoadBalancer: &policy.LoadBalancer{Policy: policy.LBRandom}}},
			in:   named("rnd"),
			diags: []Diagnostic{
				{"rnd", "load_balancer.policy", "grpc clients have no random: they use round_robin (in wrr_locality), the next policy of load_balancing_policy"},
			},
		},
		{
			name: "policy-circuit-breakers",
			opts: Options{Policy: &policy.Service{CircuitBreakers: &policy.CircuitBreakers{
				MaxConnections: u32p(100), MaxPendingRequests: u32p(10), MaxRequests: u32p(200), MaxRetries: u32p(0),
			}}},
			in: named("cb"),
			diags: []Diagnostic{
				{"cb", "circuit_breakers.max_connections", "grpc clients ignore it (they honour max_requests only)"},
				{"cb", "circuit_breakers.max_pending_requests", "grpc clients ignore it (they honour max_requests only)"},
				{"cb", "circuit_breakers.max_retries", "grpc clients ignore it (they honour max_requests only)"},
			},
		},
		{
			// max_requests alone is what gRPC clients honour: nothing to say.
			name: "policy-max-requests",
			opts: Options{Policy: &policy.Service{CircuitBreakers: &policy.CircuitBreakers{MaxRequests: u32p(50)}}},
			in:   named("mr"),
		},
		{
			name: "policy-outlier-detection",
			opts: Options{Policy: &policy.Service{OutlierDetection: &policy.OutlierDetection{
				Consecutive5xx: u32p(3), ConsecutiveGatewayFailure: u32p(2),
				Interval: dur(time.Second), BaseEjectionTime: dur(30 * time.Second), MaxEjectionTime: dur(5 * time.Minute),
				MaxEjectionPercent: u32p(50), EnforcingConsecutive5xx: u32p(80),
			}}},
			in: named("od"),
			diags: []Diagnostic{
				{"od", "outlier_detection.consecutive_5xx", "grpc clients ignore it: they eject on success rate and failure percentage (gRFC A50)"},
				{"od", "outlier_detection.consecutive_gateway_failure", "grpc clients ignore it: they eject on success rate and failure percentage (gRFC A50)"},
				{"od", "outlier_detection.enforcing_consecutive_5xx", "grpc clients ignore it: they eject on success rate and failure percentage (gRFC A50)"},
			},
		},
		{
			// Ejection times and percentage only: all of it honoured by gRPC.
			name: "policy-outlier-times",
			opts: Options{Policy: &policy.Service{OutlierDetection: &policy.OutlierDetection{
				Interval: dur(10 * time.Second), BaseEjectionTime: dur(time.Minute), MaxEjectionPercent: u32p(10),
			}}},
			in: named("odt"),
		},
		{
			name: "policy-tls",
			opts: Options{Policy: &policy.Service{TLS: &policy.UpstreamTLS{SNI: "secure.internal", CAFile: "/etc/xdsbridge/ca.pem"}}},
			in:   named("secure"),
			diags: []Diagnostic{
				{"secure", "tls", "grpc clients NACK this cluster: they take an UpstreamTlsContext only with a certificate provider instance of their own bootstrap (trusted_ca is ignored); Envoys get TLS"},
			},
		},
		{
			// With a gRPC certificate provider instance, gRPC clients take
			// the cluster; Envoy still verifies with trusted_ca.
			name: "policy-tls-grpc-provider",
			opts: Options{GRPCCertificateProvider: "upstream-ca", Policy: &policy.Service{TLS: &policy.UpstreamTLS{SNI: "secure.internal", CAFile: "/etc/xdsbridge/ca.pem"}}},
			in:   named("secure"),
			diags: []Diagnostic{
				{"secure", "tls", `grpc clients NACK this cluster unless their bootstrap defines certificate provider "upstream-ca"; with xds credentials they verify the hosts' chain with it, not the name (they read only the deprecated match_subject_alt_names); with other credentials they ignore TLS`},
			},
		},
		{
			// No SNI: the service's name is sent; no CA: not verified.
			name: "policy-tls-default-sni",
			opts: Options{Policy: &policy.Service{TLS: &policy.UpstreamTLS{}}},
			in:   named("tls.example.internal"),
			diags: []Diagnostic{
				{"tls.example.internal", "tls", "grpc clients NACK this cluster: they take an UpstreamTlsContext only with a certificate provider instance of their own bootstrap (trusted_ca is ignored); Envoys get TLS"},
			},
		},
		{
			// Subsets by service meta, tags, node meta, health, locality and
			// file metadata; one selecting nothing; one with no filter. The
			// subset clusters carry the service's cluster settings.
			name: "policy-subsets",
			opts: Options{Policy: &policy.Service{
				Protocol:        policy.ProtocolGRPC,
				CircuitBreakers: &policy.CircuitBreakers{MaxRequests: u32p(64)},
				Subsets: map[string]policy.Subset{
					"v1":      {Filter: `Service.Meta.version == "1"`},
					"v1-ok":   {Filter: `Service.Meta.version == "1"`, OnlyPassing: true},
					"canary":  {Filter: `"canary" in Service.Tags`},
					"rack1":   {Filter: `Node.Meta.rack == r1`},
					"eu":      {Filter: `Locality.Region == eu`},
					"beta":    {Filter: `Metadata.xdsbridge.track == beta`},
					"k8s":     {Filter: `Service.Meta["app.kubernetes.io/name"] == web`},
					"passing": {OnlyPassing: true},
					"all":     {},
					"none":    {Filter: `Service.Meta.version == "3"`},
				},
				DefaultSubset: "v1",
			}},
			in: subsetService(),
		},
		{
			// The default locality is what Locality.* sees of hosts without
			// one, as LoadAssignment publishes them.
			name: "policy-subsets-default-locality",
			opts: Options{DefaultLocality: sources.Locality{Region: "home"}, Policy: &policy.Service{Subsets: map[string]policy.Subset{
				"home": {Filter: `Locality.Region == home`},
			}}},
			in: subsetService(),
		},
	}
}

func TestPolicyGolden(t *testing.T) {
	for _, tc := range policyCases() {
		t.Run(tc.name, func(t *testing.T) {
			if errs := tc.opts.Policy.Check(); len(errs) > 0 {
				t.Fatalf("the case's policy does not pass Check: %v", errs)
			}
			res, _ := checkGolden(t, tc)
			if got := len(res.Subsets); got != len(tc.opts.Policy.Subsets) {
				t.Errorf("%d subsets; want %d", got, len(tc.opts.Policy.Subsets))
			}
			for i, sub := range res.Subsets {
				if i > 0 && sub.Cluster.GetName() <= res.Subsets[i-1].Cluster.GetName() {
					t.Errorf("subsets not sorted: %q after %q", sub.Cluster.GetName(), res.Subsets[i-1].Cluster.GetName())
				}
				if sub.Load == nil || sub.Load.GetClusterName() != sub.Cluster.GetName() {
					t.Errorf("subset %q: assignment %v", sub.Cluster.GetName(), sub.Load.GetClusterName())
				}
				// Same settings as the service's cluster but the name.
				c := proto.Clone(sub.Cluster).(*cluster.Cluster)
				c.Name = res.Cluster.GetName()
				if d := cmp.Diff(res.Cluster, c, protocmp.Transform()); d != "" {
					t.Errorf("subset %q cluster differs from the service's (-service +subset):\n%s", sub.Cluster.GetName(), d)
				}
			}
			// Deterministic whatever the endpoints' order.
			r := rand.New(rand.NewPCG(2, uint64(len(tc.name))))
			for i := 0; i < 20; i++ {
				in := tc.in.Clone()
				r.Shuffle(len(in.Endpoints), func(i, j int) { in.Endpoints[i], in.Endpoints[j] = in.Endpoints[j], in.Endpoints[i] })
				got, diags := tc.opts.Service(in)
				if d := cmp.Diff(res, got, protocmp.Transform()); d != "" {
					t.Fatalf("resources differ after shuffle (-want +got):\n%s", d)
				}
				if d := cmp.Diff(tc.diags, diags); d != "" {
					t.Fatalf("diagnostics differ after shuffle (-want +got):\n%s", d)
				}
			}
		})
	}
}

// subsetHosts lists the addresses of a subset's assignment.
func subsetHosts(t *testing.T, res Resources, subset string) []string {
	t.Helper()
	for _, sub := range res.Subsets {
		if sub.Cluster.GetName() != SubsetCluster(res.Cluster.GetName(), subset) {
			continue
		}
		var out []string
		for _, g := range sub.Load.GetEndpoints() {
			for _, lb := range g.GetLbEndpoints() {
				out = append(out, lb.GetEndpoint().GetAddress().GetSocketAddress().GetAddress())
			}
		}
		return out
	}
	t.Fatalf("no subset %q", subset)
	return nil
}

// What each subset of the golden case selects, said in addresses.
func TestSubsetSelection(t *testing.T) {
	var tc goldenCase
	for _, c := range policyCases() {
		if c.name == "policy-subsets" {
			tc = c
		}
	}
	res, _ := tc.opts.Service(tc.in)
	for subset, want := range map[string]string{
		"v1":      "10.0.0.1 10.0.0.2",
		"v1-ok":   "10.0.0.1",                                     // 10.0.0.2 is UNHEALTHY
		"canary":  "10.0.0.2",                                     // tags
		"rack1":   "10.0.0.1 10.0.0.3",                            // node meta
		"eu":      "10.0.0.3",                                     // locality
		"beta":    "10.0.1.1",                                     // file metadata
		"k8s":     "10.0.0.4",                                     // an index selector
		"passing": "10.0.0.1 10.0.1.1 10.0.0.3",                   // HEALTHY and UNKNOWN; by locality, then address
		"all":     "10.0.0.1 10.0.0.2 10.0.1.1 10.0.0.3 10.0.0.4", // priority 1 last
		"none":    "",
	} {
		if got := strings.Join(subsetHosts(t, res, subset), " "); got != want {
			t.Errorf("subset %s: %q; want %q", subset, got, want)
		}
	}
	// An empty subset still has its assignment, with no endpoints.
	for _, sub := range res.Subsets {
		if sub.Cluster.GetName() == "web/none" && (sub.Load == nil || len(sub.Load.GetEndpoints()) != 0) {
			t.Errorf("web/none: %v", sub.Load)
		}
	}
}

// TestFilterView: what filters see of an endpoint, expression by
// expression.
func TestFilterView(t *testing.T) {
	e := consulEP("::ffff:10.0.0.7", "node-7", []string{"primary", "v2"},
		map[string]string{"version": "2", "app.kubernetes.io/name": "web"}, map[string]string{"rack": "r7", "zone": "z"})
	e.Hostname = "web-7.internal"
	e.Health = sources.HealthDegraded
	e.Weight = 5
	e.Priority = 2
	e.Metadata["envoy.lb"] = map[string]any{"canary": true, "shard": float64(3), "labels": map[string]any{"team": "pay"}}
	file := sources.Endpoint{Address: "2001:DB8::1", Port: 443, Health: sources.HealthStatus(42), Metadata: sources.Metadata{"x": {"k": "v"}}}
	o := Options{DefaultLocality: sources.Locality{Region: "r0", Zone: "z0"}}
	for _, c := range []struct {
		ep   sources.Endpoint
		expr string
		want bool
	}{
		{e, `Service.ID == "web-::ffff:10.0.0.7"`, true},
		{e, `Service.Service == web`, true},
		{e, `"primary" in Service.Tags`, true},
		{e, `Service.Tags contains v2`, true},
		{e, `Service.Tags contains v3`, false},
		{e, `"v3" not in Service.Tags`, true},
		{e, `Service.Meta.version == "2"`, true},
		{e, `Service.Meta.version != "2"`, false},
		{e, `Service.Meta["app.kubernetes.io/name"] == web`, true},
		{e, `Service.Meta.missing == ""`, true},
		{e, `Service.Meta.missing is empty`, true},
		{e, `Service.Meta is not empty`, true},
		{e, `Node.Node == "node-7"`, true},
		{e, `Node.Datacenter == dc1`, true},
		{e, `Node.Meta.rack == r7 and Node.Meta.zone == z`, true},
		{e, `Address == "10.0.0.7"`, true}, // the canonical form
		{e, `Port == 8080`, true},
		{e, `Hostname matches "^web-[0-9]+\\.internal$"`, true},
		{e, `Health == DEGRADED`, true},
		{e, `Weight == 5 and Priority == 2`, true},
		{e, `Locality.Region == r0 and Locality.Zone == z0`, true}, // the default
		{e, `Metadata.consul.node == "node-7"`, true},
		{e, `Metadata["envoy.lb"].canary == true`, true},
		{e, `Metadata["envoy.lb"].shard == 3`, true},
		{e, `Metadata["envoy.lb"].labels.team == pay`, true},
		{e, `Metadata.nope.k == v`, false},
		{e, `not (Service.Meta.version == "1" or Health == HEALTHY)`, true},
		{e, `any Service.Tags as t { t matches "^v[0-9]$" }`, true},
		{e, `all Service.Tags as t { t == primary }`, false},
		// An endpoint of the file source: no Consul view, its own metadata.
		{file, `Service.Tags is empty and Service.ID == "" and Node.Meta is empty`, true},
		{file, `Address == "2001:db8::1" and Port == 443`, true},
		{file, `Health == UNKNOWN`, true}, // an unknown status is published as UNKNOWN
		{file, `Metadata.x.k == v`, true},
		{file, `"v1" in Service.Tags`, false},
	} {
		ev, err := policy.CompileFilter(c.expr)
		if err != nil {
			t.Errorf("%s: %v", c.expr, err)
			continue
		}
		got, err := ev.Evaluate(o.FilterView(c.ep))
		if err != nil {
			t.Errorf("%s: %v", c.expr, err)
			continue
		}
		if got != c.want {
			t.Errorf("%s on %s = %v; want %v", c.expr, c.ep.Address, got, c.want)
		}
	}
}

// A filter that does not compile (the policy did not pass Check) or cannot
// be evaluated on an endpoint selects nothing there, with a Diagnostic;
// the subset is still published.
func TestSubsetFilterErrors(t *testing.T) {
	in := sources.Service{Name: "s", Endpoints: []sources.Endpoint{ep("10.0.0.2", 80), ep("10.0.0.1", 80)}}
	opts := Options{Policy: &policy.Service{Subsets: map[string]policy.Subset{
		"bad":  {Filter: `Port ==`},
		"eval": {Filter: `Port.x == 1 or Address == "10.0.0.1"`},
	}}}
	res, diags := opts.Service(in)
	if len(diags) != 2 {
		t.Fatalf("diagnostics %q", diags)
	}
	if d := diags[0]; d.Field != "subsets.bad.filter" || !strings.HasPrefix(d.Message, `"Port ==": `) || !strings.HasSuffix(d.Message, "; the subset has no endpoints") {
		t.Errorf("diagnostic %q", d)
	}
	if d := diags[1]; d.Field != "subsets.eval.filter" || !strings.HasPrefix(d.Message, "cannot be evaluated on 2 endpoints, left out of the subset (first: endpoints[10.0.0.1:80]: ") {
		t.Errorf("diagnostic %q", d)
	}
	if got := subsetHosts(t, res, "bad"); len(got) != 0 {
		t.Errorf("bad: %v", got)
	}
	if got := subsetHosts(t, res, "eval"); len(got) != 0 {
		t.Errorf("eval: %v", got)
	}
	if err := res.Validate(); err != nil {
		t.Error(err)
	}
}

// A zero policy is the default cluster, and Options without a policy have
// no subsets.
func TestZeroPolicyIsDefault(t *testing.T) {
	in := sources.Service{Name: "s", Endpoints: []sources.Endpoint{ep("10.0.0.1", 80)}}
	def, _ := Service(in)
	zero, diags := Options{Policy: &policy.Service{}}.Service(in)
	if len(diags) != 0 {
		t.Errorf("diagnostics %v", diags)
	}
	if d := cmp.Diff(def, zero, protocmp.Transform()); d != "" {
		t.Errorf("zero policy differs from none (-none +zero):\n%s", d)
	}
	if len(def.Subsets) != 0 {
		t.Errorf("subsets without a policy: %v", def.Subsets)
	}
}

// The limits hold for subsets too: a subset's assignment is refused when
// it is too large, and what the limits drop from the service's endpoints
// is reported once.
func TestSubsetLimits(t *testing.T) {
	big := strings.Repeat("x", 3000)
	var eps []sources.Endpoint
	for i := 0; i < 4; i++ {
		e := ep("10.0.0."+string(rune('1'+i)), 80)
		e.Hostname = big // over max_hostname_bytes: dropped
		e.Metadata = sources.Metadata{"ns": {"k": big}}
		eps = append(eps, e)
	}
	in := sources.Service{Name: "s", Endpoints: eps}
	opts := Options{Policy: &policy.Service{Subsets: map[string]policy.Subset{"all": {}}}}
	r := opts.ServiceWithin(in, Limits{MaxResourceBytes: 16 << 10})
	if r.Refused {
		t.Fatalf("refused: %v", r.Diagnostics)
	}
	if got := r.Exceeded[LimitHostnameBytes]; got != 4 {
		t.Errorf("hostname limit counted %d times; want 4 (once per endpoint, not again per subset)", got)
	}
	for _, g := range r.Subsets[0].Load.GetEndpoints() {
		for _, lb := range g.GetLbEndpoints() {
			if h := lb.GetEndpoint().GetHostname(); h != "" {
				t.Errorf("subset endpoint kept a hostname of %d bytes", len(h))
			}
		}
	}
	// A subset selecting every host has the service's assignment under a
	// longer name: with the limit between the two sizes, the subset's
	// assignment is what refuses the service.
	long := strings.Repeat("s", 63)
	opts = Options{Policy: &policy.Service{Subsets: map[string]policy.Subset{long: {}}}}
	r = opts.ServiceWithin(in, Limits{MaxResourceBytes: 1 << 20})
	main := proto.Size(r.Load)
	if sub := proto.Size(r.Subsets[0].Load); sub <= main+60 || main < MinResourceBytes {
		t.Fatalf("sizes: service %d, subset %d", main, sub)
	}
	r = opts.ServiceWithin(in, Limits{MaxResourceBytes: main + 10})
	if !r.Refused || !r.Resources.IsZero() {
		t.Fatalf("not refused: %v", r.Diagnostics)
	}
	last := r.Diagnostics[len(r.Diagnostics)-1]
	if want := "subsets." + long + ".cluster_load_assignment"; last.Field != want || r.Exceeded[LimitResourceBytes] != 1 {
		t.Errorf("refused on %q (%v); want %q", last.Field, r.Exceeded, want)
	}
}

// FuzzSubsetFilter: no filter panics the translation, every subset passes
// Validate, and a filter and its negation split the service's hosts in
// two (when the filter can be evaluated on every host).
func FuzzSubsetFilter(f *testing.F) {
	for _, s := range []string{
		`Service.Meta.version == "1"`, `"canary" in Service.Tags`, `Node.Meta.rack != r1 and Health == HEALTHY`,
		`Metadata.xdsbridge.track matches "^b"`, `Service.Tags is empty or Port == 9090`,
		`any Service.Tags as t { t contains "v" }`, `Locality.Zone not in "eu-1"`, `Service.Meta["app.kubernetes.io/name"] is not empty`,
	} {
		f.Add(s)
	}
	in := subsetService()
	f.Fuzz(func(t *testing.T, expr string) {
		if _, err := policy.CompileFilter(expr); err != nil {
			return
		}
		p := &policy.Service{Subsets: map[string]policy.Subset{"a": {Filter: expr}, "b": {Filter: "not (" + expr + ")"}}}
		res, diags := Options{Policy: p}.Service(in)
		if err := res.Validate(); err != nil {
			t.Fatalf("%q: %v", expr, err)
		}
		if len(res.Subsets) != 2 {
			t.Fatalf("%q: %d subsets", expr, len(res.Subsets))
		}
		if len(diags) > 0 {
			return // some host could not be evaluated: left out of both
		}
		a, b := subsetHosts(t, res, "a"), subsetHosts(t, res, "b")
		seen := map[string]bool{}
		for _, h := range append(a, b...) {
			if seen[h] {
				t.Fatalf("%q: host %s in the subset and in its negation", expr, h)
			}
			seen[h] = true
		}
		if len(seen) != len(in.Endpoints) {
			t.Fatalf("%q: the subset (%v) and its negation (%v) do not cover the %d hosts", expr, a, b, len(in.Endpoints))
		}
	})
}
