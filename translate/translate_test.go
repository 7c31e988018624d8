package translate

import (
	"bytes"
	"encoding/json"
	"flag"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/xdsbridge/xdsbridge/sources"
)

var update = flag.Bool("update", false, "rewrite golden files")

// notJSON is a metadata value structpb cannot carry (and cmp can compare).
var notJSON = make(chan int)

func ep(addr string, port uint32) sources.Endpoint {
	return sources.Endpoint{Address: addr, Port: port}
}

func at(e sources.Endpoint, prio uint32, region, zone, subZone string) sources.Endpoint {
	e.Priority = prio
	e.Locality = sources.Locality{Region: region, Zone: zone, SubZone: subZone}
	return e
}

func weighted(e sources.Endpoint, w uint32) sources.Endpoint { e.Weight = w; return e }

func health(e sources.Endpoint, h sources.HealthStatus) sources.Endpoint { e.Health = h; return e }

type goldenCase struct {
	name  string
	opts  Options
	in    sources.Service
	diags []Diagnostic
}

func goldenCases() []goldenCase {
	return []goldenCase{
		{
			name: "empty",
			in:   sources.Service{Name: "empty"},
		},
		{
			name: "one-endpoint",
			in: sources.Service{Name: "web", Endpoints: []sources.Endpoint{
				{Address: "10.0.0.1", Port: 8080, Hostname: "web-0.example.internal"},
			}},
		},
		{
			// Three localities in priority 0, one in 3 and one in 7: the
			// priorities are renumbered 0, 1, 2 in order, and endpoints of a
			// locality stay together whatever the input order.
			name: "localities-and-priorities",
			in: sources.Service{Name: "api", Endpoints: []sources.Endpoint{
				at(ep("10.2.0.1", 80), 7, "eu-west-1", "eu-west-1a", ""),
				at(ep("10.1.0.2", 80), 0, "us-east-1", "us-east-1b", ""),
				at(ep("10.1.0.1", 80), 0, "us-east-1", "us-east-1a", "rack1"),
				at(ep("10.1.0.3", 80), 0, "us-east-1", "us-east-1b", ""),
				at(ep("10.3.0.1", 80), 3, "us-west-2", "us-west-2a", ""),
				at(ep("10.1.0.9", 80), 0, "", "", ""),
				at(ep("10.3.0.2", 80), 3, "us-west-2", "us-west-2a", ""),
			}},
			diags: []Diagnostic{{"api", "priority", "priorities must be contiguous from 0; 3 renumbered to 1"}},
		},
		{
			// Endpoints without a locality take the default, and share a
			// group with those that name it; one that sets only a zone
			// keeps it as it is (fields are not filled in one by one).
			name: "default-locality",
			opts: Options{DefaultLocality: sources.Locality{Region: "r0", Zone: "z0"}},
			in: sources.Service{Name: "dflt", Endpoints: []sources.Endpoint{
				ep("10.0.0.3", 80),
				at(ep("10.0.0.2", 80), 0, "r0", "z0", ""),
				ep("10.0.0.1", 80),
				at(ep("10.0.1.1", 80), 0, "", "z1", ""),
				at(ep("10.0.2.1", 80), 1, "", "", ""),
			}},
		},
		{
			name: "weights",
			in: sources.Service{Name: "weighted", Endpoints: []sources.Endpoint{
				weighted(ep("10.0.0.1", 80), 1),
				weighted(ep("10.0.0.2", 80), 100),
				ep("10.0.0.3", 80),                       // unset: Envoy's default
				weighted(ep("10.0.0.4", 80), 4294967000), // sum 4294967102 still fits
			}},
		},
		{
			// Envoy rejects a locality whose weights sum past 2^32-1; they
			// are scaled down, per locality, keeping at least 1 each.
			name: "weights-overflow",
			in: sources.Service{Name: "heavy", Endpoints: []sources.Endpoint{
				weighted(ep("10.0.0.1", 80), 4294967295),
				weighted(ep("10.0.0.2", 80), 4294967295),
				weighted(ep("10.0.0.3", 80), 2),
				ep("10.0.0.4", 80),
				at(weighted(ep("10.1.0.1", 80), 4294967295), 0, "r", "z", ""),
			}},
			diags: []Diagnostic{{"heavy", "weight", `weights of priority 0 locality "" sum to 8589934593, more than 4294967295; scaled down`}},
		},
		{
			name: "health-statuses",
			in: sources.Service{Name: "health", Endpoints: []sources.Endpoint{
				health(ep("10.0.0.1", 80), sources.HealthUnknown),
				health(ep("10.0.0.2", 80), sources.HealthHealthy),
				health(ep("10.0.0.3", 80), sources.HealthUnhealthy),
				health(ep("10.0.0.4", 80), sources.HealthDraining),
				health(ep("10.0.0.5", 80), sources.HealthTimeout),
				health(ep("10.0.0.6", 80), sources.HealthDegraded),
			}},
		},
		{
			name: "metadata",
			in: sources.Service{Name: "meta", Endpoints: []sources.Endpoint{
				{Address: "10.0.0.1", Port: 80, Metadata: sources.Metadata{
					"envoy.lb": {"canary": true, "version": "v2", "shard": float64(3)},
					"xdsbridge": {
						"labels": map[string]any{"team": "payments", "tier": map[string]any{"name": "gold", "rank": float64(1)}},
						"tags":   []any{"a", float64(2), false, nil, map[string]any{"k": "v"}},
						"none":   nil,
					},
				}},
				ep("10.0.0.2", 80),
			}},
		},
		{
			name: "ipv6",
			in: sources.Service{Name: "v6", Endpoints: []sources.Endpoint{
				ep("2001:db8::2", 443),
				ep("2001:db8::1", 443),
				ep("::1", 8443),
				ep("::ffff:10.0.0.1", 443),
				ep("10.0.0.1", 443),
			}},
			// An IPv4-mapped IPv6 address is its IPv4 host: one endpoint,
			// published as 10.0.0.1.
			diags: []Diagnostic{{"v6", "endpoints[10.0.0.1:443]", "duplicate address and port; first kept"}},
		},
		{
			// The first of each duplicate in input order is kept, whatever
			// its priority or locality, and IPv6 duplicates are found on the
			// parsed address.
			name: "duplicates",
			in: sources.Service{Name: "dup", Endpoints: []sources.Endpoint{
				weighted(ep("10.0.0.1", 80), 5),
				ep("10.0.0.2", 80),
				weighted(ep("10.0.0.1", 80), 9),
				at(ep("10.0.0.2", 80), 1, "r", "z", ""),
				ep("10.0.0.1", 81), // another port: not a duplicate
				ep("2001:db8::1", 80),
				ep("2001:DB8:0::1", 80),
			}},
			diags: []Diagnostic{
				{"dup", "endpoints[10.0.0.1:80]", "duplicate address and port; first kept"},
				{"dup", "endpoints[10.0.0.2:80]", "duplicate address and port; first kept"},
				{"dup", "endpoints[[2001:db8::1]:80]", "duplicate address and port; first kept"},
			},
		},
		{
			name: "invalid-addresses",
			in: sources.Service{Name: "bad", Endpoints: []sources.Endpoint{
				ep("web.example.com", 80),
				ep("10.0.0.1", 0),
				ep("10.0.0.2", 70000),
				ep("", 80),
				ep("10.0.0.3", 80),
			}},
			diags: []Diagnostic{
				{"bad", "endpoints[web.example.com:80]", "address must be an IP and port in 1..65535; endpoint dropped"},
				{"bad", "endpoints[10.0.0.1:0]", "address must be an IP and port in 1..65535; endpoint dropped"},
				{"bad", "endpoints[10.0.0.2:4464]", "address must be an IP and port in 1..65535; endpoint dropped"},
				{"bad", "endpoints[:80]", "address must be an IP and port in 1..65535; endpoint dropped"},
			},
		},
		{
			name: "all-dropped",
			in: sources.Service{Name: "gone", Endpoints: []sources.Endpoint{
				ep("not-an-ip", 80),
			}},
			diags: []Diagnostic{
				{"gone", "endpoints[not-an-ip:80]", "address must be an IP and port in 1..65535; endpoint dropped"},
			},
		},
		{
			name: "bad-metadata-and-health",
			in: sources.Service{Name: "odd", Endpoints: []sources.Endpoint{
				{Address: "10.0.0.1", Port: 80, Health: sources.HealthStatus(42), Metadata: sources.Metadata{
					"ok":  {"k": "v"},
					"bad": {"a": "fine", "k": []string{"not", "a", "json", "value"}, "z": notJSON},
				}},
				{Address: "10.0.0.2", Port: 80, Metadata: sources.Metadata{
					"only-bad": {"c": notJSON},
				}},
			}},
			diags: []Diagnostic{
				{"odd", "endpoints[10.0.0.1:80].health", "unknown health status 42; sent as UNKNOWN"},
				{"odd", "endpoints[10.0.0.1:80].metadata", `namespace "bad" dropped: key "k" holds a []string, not a JSON value`},
				{"odd", "endpoints[10.0.0.2:80].metadata", `namespace "only-bad" dropped: key "c" holds a chan int, not a JSON value`},
			},
		},
	}
}

// marshal writes a message as indented JSON. protojson's whitespace is
// deliberately unstable, so the output is normalised through encoding/json.
func marshal(t *testing.T, m proto.Message) json.RawMessage {
	t.Helper()
	b, err := protojson.MarshalOptions{Multiline: true, Indent: "  ", UseProtoNames: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return normalise(t, b)
}

func normalise(t *testing.T, b []byte) []byte {
	t.Helper()
	var compact, out bytes.Buffer
	if err := json.Compact(&compact, b); err != nil {
		t.Fatalf("compact: %v\n%s", err, b)
	}
	if err := json.Indent(&out, compact.Bytes(), "", "  "); err != nil {
		t.Fatal(err)
	}
	out.WriteByte('\n')
	return out.Bytes()
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden.json")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if d := cmp.Diff(string(normalise(t, want)), string(got)); d != "" {
		t.Errorf("%s differs from the golden file (-want +got; go test -update rewrites it):\n%s", path, d)
	}
}

// checkGolden translates a golden case and checks what every case must
// hold: the input untouched, the diagnostics, Validate(), the golden file.
func checkGolden(t *testing.T, tc goldenCase) (Resources, []Diagnostic) {
	t.Helper()
	before := tc.in.Clone()
	res, diags := tc.opts.Service(tc.in)
	if d := cmp.Diff(before, tc.in, cmpopts.EquateEmpty()); d != "" {
		t.Errorf("input service modified (-before +after):\n%s", d)
	}
	if d := cmp.Diff(tc.diags, diags); d != "" {
		t.Errorf("diagnostics (-want +got):\n%s", d)
	}
	if err := res.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
	type pair struct {
		Cluster json.RawMessage `json:"cluster"`
		Load    json.RawMessage `json:"cluster_load_assignment"`
	}
	var subsets []pair
	for _, sub := range res.Subsets {
		subsets = append(subsets, pair{marshal(t, sub.Cluster), marshal(t, sub.Load)})
	}
	doc, err := json.Marshal(struct {
		pair
		Subsets []pair `json:"subsets,omitempty"`
	}{pair{marshal(t, res.Cluster), marshal(t, res.Load)}, subsets})
	if err != nil {
		t.Fatal(err)
	}
	golden(t, tc.name, normalise(t, doc))
	return res, diags
}

func TestGolden(t *testing.T) {
	for _, tc := range goldenCases() {
		t.Run(tc.name, func(t *testing.T) {
			res, _ := checkGolden(t, tc)
			if res.Cluster.GetName() != tc.in.Name || res.Load.GetClusterName() != tc.in.Name {
				t.Errorf("names: cluster %q, load assignment %q, want %q", res.Cluster.GetName(), res.Load.GetClusterName(), tc.in.Name)
			}
			checkDensePriorities(t, res)
		})
	}
}

// checkDensePriorities checks what Envoy insists on: priorities contiguous
// from 0 and in order, and each (priority, locality) group appearing once;
// and what gRPC clients insist on: every group has a Locality.
func checkDensePriorities(t *testing.T, res Resources) {
	t.Helper()
	var last uint32
	type key struct {
		prio uint32
		loc  string
	}
	groups := map[key]bool{}
	for i, g := range res.Load.GetEndpoints() {
		p := g.GetPriority()
		if i == 0 && p != 0 {
			t.Errorf("first priority is %d, want 0", p)
		}
		if i > 0 && p != last && p != last+1 {
			t.Errorf("priority %d follows %d", p, last)
		}
		last = p
		if g.GetLocality() == nil {
			t.Errorf("group priority %d has no locality: gRPC clients reject that", p)
		}
		k := key{p, g.GetLocality().String()}
		if groups[k] {
			t.Errorf("group priority %d locality %v appears twice", p, g.GetLocality())
		}
		groups[k] = true
		var sum uint64
		for _, lb := range g.GetLbEndpoints() {
			if w := lb.GetLoadBalancingWeight(); w != nil {
				sum += uint64(w.GetValue())
			} else {
				sum++
			}
		}
		if sum > 4294967295 {
			t.Errorf("weights of group priority %d locality %v sum to %d: Envoy rejects that", p, g.GetLocality(), sum)
		}
		if len(g.GetLbEndpoints()) == 0 {
			t.Errorf("empty group priority %d locality %v", p, g.GetLocality())
		}
	}
}

func TestDeterministic(t *testing.T) {
	for _, tc := range goldenCases() {
		if tc.name == "duplicates" {
			// Which duplicate is kept depends on input order by design.
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			want, wantDiags := tc.opts.Service(tc.in)
			r := rand.New(rand.NewPCG(1, uint64(len(tc.name))))
			for i := 0; i < 50; i++ {
				in := tc.in.Clone()
				r.Shuffle(len(in.Endpoints), func(i, j int) { in.Endpoints[i], in.Endpoints[j] = in.Endpoints[j], in.Endpoints[i] })
				got, gotDiags := tc.opts.Service(in)
				if d := cmp.Diff(want.Cluster, got.Cluster, protocmp.Transform()); d != "" {
					t.Fatalf("cluster differs after shuffle (-want +got):\n%s", d)
				}
				if d := cmp.Diff(want.Load, got.Load, protocmp.Transform()); d != "" {
					t.Fatalf("load assignment differs after shuffle (-want +got):\n%s", d)
				}
				// Dropped endpoints are reported in input order; the set is
				// the same.
				if len(gotDiags) != len(wantDiags) {
					t.Fatalf("diagnostics differ after shuffle: %v vs %v", wantDiags, gotDiags)
				}
				if tc.name != "invalid-addresses" {
					if d := cmp.Diff(wantDiags, gotDiags); d != "" {
						t.Fatalf("diagnostics differ after shuffle (-want +got):\n%s", d)
					}
				}
			}
		})
	}
}

func TestDuplicateFirstInInputKept(t *testing.T) {
	a := weighted(ep("10.0.0.1", 80), 3)
	b := at(weighted(ep("10.0.0.1", 80), 7), 0, "a-region", "", "")
	for _, tc := range []struct {
		in         []sources.Endpoint
		wantWeight uint32
	}{
		{[]sources.Endpoint{a, b}, 3},
		{[]sources.Endpoint{b, a}, 7},
	} {
		res, diags := Service(sources.Service{Name: "s", Endpoints: tc.in})
		if len(diags) != 1 {
			t.Fatalf("diags = %v", diags)
		}
		eps := res.Load.GetEndpoints()
		if len(eps) != 1 || len(eps[0].GetLbEndpoints()) != 1 {
			t.Fatalf("endpoints = %v", eps)
		}
		if w := eps[0].GetLbEndpoints()[0].GetLoadBalancingWeight().GetValue(); w != tc.wantWeight {
			t.Errorf("kept weight %d, want %d (first in input)", w, tc.wantWeight)
		}
	}
}

func TestInputNotModified(t *testing.T) {
	in := sources.Service{Name: "s", Endpoints: []sources.Endpoint{
		at(ep("10.0.0.3", 80), 4, "r", "", ""),
		{Address: "10.0.0.2", Port: 80, Metadata: sources.Metadata{"ns": {"k": map[string]any{"n": "v"}}}},
		ep("10.0.0.1", 80),
		ep("10.0.0.1", 80),
		ep("bad", 80),
	}}
	before := in.Clone()
	res, _ := Service(in)
	if !reflect.DeepEqual(in, before) {
		t.Fatalf("input modified: %+v", in)
	}
	// And the output does not alias the input's metadata.
	in.Endpoints[1].Metadata["ns"]["k"].(map[string]any)["n"] = "changed"
	got := res.Load.GetEndpoints()[0].GetLbEndpoints()[1].GetMetadata().GetFilterMetadata()["ns"].AsMap()
	if v := got["k"].(map[string]any)["n"]; v != "v" {
		t.Errorf("output metadata aliases the input: %v", v)
	}
}

func TestClusterIsEDSOverADS(t *testing.T) {
	c := Cluster("x")
	if c.GetType().String() != "EDS" {
		t.Errorf("type %v", c.GetType())
	}
	if c.GetEdsClusterConfig().GetEdsConfig().GetAds() == nil {
		t.Error("EDS config is not ADS")
	}
	if c.GetConnectTimeout().AsDuration() != DefaultConnectTimeout {
		t.Errorf("connect timeout %v", c.GetConnectTimeout().AsDuration())
	}
	if err := (Resources{Cluster: c}).Validate(); err != nil {
		t.Error(err)
	}
}

func TestValidateReportsInvalid(t *testing.T) {
	res, _ := Service(sources.Service{Name: ""})
	if err := res.Validate(); err == nil {
		t.Error("Validate accepted a load assignment without a cluster name")
	}
	if err := (Resources{}).Validate(); err != nil {
		t.Errorf("empty Resources: %v", err)
	}
}

func TestDiagnosticString(t *testing.T) {
	d := Diagnostic{"web", "endpoints[1.2.3.4:0]", "dropped"}
	if got, want := d.String(), "web: endpoints[1.2.3.4:0]: dropped"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

// TestEmptyLocalityOnTheWire: an endpoint without a locality is sent with
// an empty Locality message, which survives encoding (grpc-go checks
// GetLocality() != nil on the decoded message), and the default locality
// is used when one is given.
func TestEmptyLocalityOnTheWire(t *testing.T) {
	in := sources.Service{Name: "s", Endpoints: []sources.Endpoint{ep("10.0.0.1", 80), ep("10.0.0.2", 80)}}
	for _, tc := range []struct {
		opts Options
		want sources.Locality
	}{
		{Options{}, sources.Locality{}},
		{Options{DefaultLocality: sources.Locality{SubZone: "default"}}, sources.Locality{SubZone: "default"}},
	} {
		cla, _ := tc.opts.LoadAssignment(in)
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(cla)
		if err != nil {
			t.Fatal(err)
		}
		var got endpoint.ClusterLoadAssignment
		if err := proto.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		if len(got.GetEndpoints()) != 1 {
			t.Fatalf("%+v: %d groups, want 1", tc.opts, len(got.GetEndpoints()))
		}
		l := got.GetEndpoints()[0].GetLocality()
		if l == nil {
			t.Fatalf("%+v: decoded group has no locality", tc.opts)
		}
		if g := (sources.Locality{Region: l.GetRegion(), Zone: l.GetZone(), SubZone: l.GetSubZone()}); g != tc.want {
			t.Errorf("%+v: locality %+v, want %+v", tc.opts, g, tc.want)
		}
	}
}

// Two spellings of one host are one host (IPv6 case and zeros, IPv4-mapped
// IPv6), and the canonical form is what is published.
func TestDuplicateSpellingsOfOneHost(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want string
	}{
		{[]string{"2001:DB8:0::1", "2001:db8::1"}, "2001:db8::1"},
		{[]string{"::ffff:127.0.0.1", "127.0.0.1"}, "127.0.0.1"},
		{[]string{"::FFFF:10.0.0.1"}, "10.0.0.1"},
	} {
		var in []sources.Endpoint
		for _, a := range tc.in {
			in = append(in, ep(a, 80))
		}
		res, diags := Service(sources.Service{Name: "s", Endpoints: in})
		if len(diags) != len(tc.in)-1 {
			t.Errorf("%v: diags = %v", tc.in, diags)
		}
		eps := res.Load.GetEndpoints()
		if len(eps) != 1 || len(eps[0].GetLbEndpoints()) != 1 {
			t.Fatalf("%v: endpoints = %v", tc.in, eps)
		}
		if got := eps[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress().GetAddress(); got != tc.want {
			t.Errorf("%v: published %q, want %q", tc.in, got, tc.want)
		}
	}
}
