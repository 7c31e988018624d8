package translate

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"

	"github.com/xdsbridge/xdsbridge/sources"
)

// nested returns a namespace value of the given depth: depth 1 is the
// namespace's own object ({"k": "v"}), each level adds an object, or a list
// when lists is set.
func nested(depth int, lists bool) map[string]any {
	var v any = "v"
	for range depth - 1 {
		if lists {
			v = []any{v}
		} else {
			v = map[string]any{"k": v}
		}
	}
	return map[string]any{"k": v}
}

func withMeta(e sources.Endpoint, md sources.Metadata) sources.Endpoint { e.Metadata = md; return e }

func withHost(e sources.Endpoint, h string) sources.Endpoint { e.Hostname = h; return e }

// unpacksLikeEnvoy decodes an encoded resource with a recursion limit of 100
// nested messages, as Envoy's protobuf does. Go counts a map entry one
// level earlier than C++, so this is slightly stricter than Envoy (31
// object levels of metadata pass where Envoy takes 32), never laxer.
func unpacksLikeEnvoy(t *testing.T, m proto.Message) error {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return proto.UnmarshalOptions{RecursionLimit: 100}.Unmarshal(b, &endpoint.ClusterLoadAssignment{})
}

func limitGoldenCases() []goldenCase {
	return []goldenCase{
		{
			// Default limits: each endpoint loses only what is over a limit.
			name: "limits",
			in: sources.Service{Name: "lim", Endpoints: []sources.Endpoint{
				withHost(ep("10.0.0.1", 80), strings.Repeat("h", 253)[:250]+".io"),
				withHost(ep("10.0.0.2", 80), strings.Repeat("h", 251)+".io"),
				withMeta(ep("10.0.0.3", 80), sources.Metadata{
					"deep":     nested(17, false),
					"ok":       nested(16, false),
					"list":     nested(16, true),
					"deeplist": nested(17, true),
				}),
				withHost(ep("10.0.0.4", 80), "bad-\xff-utf8"),
			}},
			diags: []Diagnostic{
				{"lim", "endpoints[10.0.0.2:80].hostname", "hostname is 254 bytes, more than max_hostname_bytes 253; hostname dropped"},
				{"lim", "endpoints[10.0.0.3:80].metadata", `namespace "deep" dropped: nested more than max_metadata_depth 16 levels deep`},
				{"lim", "endpoints[10.0.0.3:80].metadata", `namespace "deeplist" dropped: nested more than max_metadata_depth 16 levels deep`},
				{"lim", "endpoints[10.0.0.4:80].hostname", "hostname is not UTF-8; hostname dropped"},
			},
		},
	}
}

func TestLimitsGolden(t *testing.T) {
	for _, tc := range limitGoldenCases() {
		t.Run(tc.name, func(t *testing.T) {
			res, diags := checkGolden(t, tc)
			if err := unpacksLikeEnvoy(t, res.Load); err != nil {
				t.Errorf("unpack: %v", err)
			}
			for _, m := range []proto.Message{res.Cluster, res.Load, res.Listener, res.Route} {
				if _, err := proto.Marshal(m); err != nil {
					t.Errorf("encoding: %v", err)
				}
			}

			// The same diagnostics whatever the input order.
			r := rand.New(rand.NewPCG(2, 3))
			for range 20 {
				in := tc.in.Clone()
				r.Shuffle(len(in.Endpoints), func(i, j int) { in.Endpoints[i], in.Endpoints[j] = in.Endpoints[j], in.Endpoints[i] })
				if _, got := Service(in); !cmp.Equal(diags, got) {
					t.Fatalf("diagnostics after shuffle: %v, want %v", got, diags)
				}
			}
		})
	}
}

func TestMetadataDepthLimit(t *testing.T) {
	for _, lists := range []bool{false, true} {
		for _, lim := range []int{1, 4, DefaultMaxMetadataDepth, CeilingMetadataDepth} {
			t.Run(fmt.Sprintf("lists=%v/limit=%d", lists, lim), func(t *testing.T) {
				s := sources.Service{Name: "svc", Endpoints: []sources.Endpoint{
					withMeta(ep("10.0.0.1", 80), sources.Metadata{"at": nested(lim, lists)}),
					withMeta(ep("10.0.0.2", 80), sources.Metadata{"over": nested(lim+1, lists), "flat": {"a": "b"}}),
				}}
				r := ServiceWithin(s, Limits{MaxMetadataDepth: lim})
				want := []Diagnostic{{"svc", "endpoints[10.0.0.2:80].metadata", fmt.Sprintf(`namespace "over" dropped: nested more than max_metadata_depth %d levels deep`, lim)}}
				if d := cmp.Diff(want, r.Diagnostics); d != "" {
					t.Errorf("diagnostics (-want +got):\n%s", d)
				}
				lbs := r.Load.GetEndpoints()[0].GetLbEndpoints()
				if _, ok := lbs[0].GetMetadata().GetFilterMetadata()["at"]; !ok {
					t.Error("namespace at the limit dropped")
				}
				if got := lbs[1].GetMetadata().GetFilterMetadata(); len(got) != 1 || got["flat"] == nil {
					t.Errorf("second endpoint's metadata %v, want only flat", got)
				}
				if r.Refused || r.Exceeded[LimitMetadataDepth] != 1 || len(r.Exceeded) != 1 {
					t.Errorf("refused %v, exceeded %v", r.Refused, r.Exceeded)
				}
			})
		}
	}
}

// The case: 48 levels passed Validate() and Envoy rejected the
// whole response. The namespace is dropped; the rest stays.
func TestFortyEightLevelsDeep(t *testing.T) {
	in := sources.Service{Name: "deep", Endpoints: []sources.Endpoint{
		withMeta(ep("10.0.0.1", 80), sources.Metadata{"envoy.lb": {"canary": true}, "bad": nested(48, false)}),
		ep("10.0.0.2", 80),
	}}
	// Without limits the assignment is valid, and a client cannot unpack it.
	raw, _ := LoadAssignment(in)
	if err := raw.ValidateAll(); err != nil {
		t.Fatalf("the unlimited assignment fails Validate (the case is about one that passes): %v", err)
	}
	if err := unpacksLikeEnvoy(t, raw); err == nil {
		t.Fatal("a 48-level namespace unpacks within 100 nested messages; the test no longer shows the problem")
	}

	res, diags := Service(in)
	want := []Diagnostic{{"deep", "endpoints[10.0.0.1:80].metadata", `namespace "bad" dropped: nested more than max_metadata_depth 16 levels deep`}}
	if d := cmp.Diff(want, diags); d != "" {
		t.Errorf("diagnostics (-want +got):\n%s", d)
	}
	if err := res.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := unpacksLikeEnvoy(t, res.Load); err != nil {
		t.Errorf("unpack: %v", err)
	}
	lbs := res.Load.GetEndpoints()[0].GetLbEndpoints()
	if len(lbs) != 2 || lbs[0].GetMetadata().GetFilterMetadata()["envoy.lb"] == nil {
		t.Errorf("endpoints %v", lbs)
	}
}

// Every depth the config accepts is one Envoy unpacks (the ceiling itself
// is checked against a real Envoy in internal/e2e).
func TestMetadataDepthCeilingUnpacks(t *testing.T) {
	for d := 1; d < CeilingMetadataDepth; d++ {
		cla, _ := LoadAssignment(sources.Service{Name: "s", Endpoints: []sources.Endpoint{withMeta(ep("10.0.0.1", 80), sources.Metadata{"ns": nested(d, false)})}})
		if err := unpacksLikeEnvoy(t, cla); err != nil {
			t.Fatalf("depth %d: %v", d, err)
		}
	}
}

func TestMetadataBytesLimit(t *testing.T) {
	const lim = 1000
	// Find a value length whose endpoint metadata encodes to exactly lim.
	var at sources.Metadata
	for n := 900; n < lim; n++ {
		md := sources.Metadata{"big": {"v": strings.Repeat("x", n)}}
		got, _ := metadata(md)
		if proto.Size(got) == lim {
			at = md
			break
		}
	}
	if at == nil {
		t.Fatal("no value encodes to the limit")
	}
	over := sources.Metadata{"big": {"v": at["big"]["v"].(string) + "x"}, "small": {"a": "b"}}
	s := sources.Service{Name: "svc", Endpoints: []sources.Endpoint{
		withMeta(ep("10.0.0.1", 80), at),
		withMeta(ep("10.0.0.2", 80), over),
	}}
	r := ServiceWithin(s, Limits{MaxMetadataBytes: lim})
	want := []Diagnostic{{"svc", "endpoints[10.0.0.2:80].metadata", `namespace "big" dropped: the endpoint's metadata encodes to 1022 bytes, more than max_metadata_bytes 1000`}}
	if d := cmp.Diff(want, r.Diagnostics); d != "" {
		t.Errorf("diagnostics (-want +got):\n%s", d)
	}
	lbs := r.Load.GetEndpoints()[0].GetLbEndpoints()
	if got := proto.Size(lbs[0].GetMetadata()); got != lim {
		t.Errorf("metadata at the limit: %d bytes kept, want %d", got, lim)
	}
	if got := lbs[1].GetMetadata().GetFilterMetadata(); len(got) != 1 || got["small"] == nil {
		t.Errorf("over the limit: kept %v, want only the small namespace", got)
	}
	if r.Exceeded[LimitMetadataBytes] != 1 {
		t.Errorf("exceeded %v", r.Exceeded)
	}
}

func TestMetadataBytesDropsLargestFirst(t *testing.T) {
	md := sources.Metadata{
		"a": {"v": strings.Repeat("a", 300)},
		"b": {"v": strings.Repeat("b", 500)},
		"c": {"v": strings.Repeat("c", 300)},
		"d": {"v": "small"},
	}
	r := ServiceWithin(sources.Service{Name: "s", Endpoints: []sources.Endpoint{withMeta(ep("10.0.0.1", 80), md)}}, Limits{MaxMetadataBytes: 400})
	var dropped []string
	for _, d := range r.Diagnostics {
		dropped = append(dropped, strings.Split(d.Message, `"`)[1])
	}
	// b (largest), then a before c (same size: by name); then it fits.
	if want := []string{"b", "a"}; !cmp.Equal(dropped, want) {
		t.Errorf("dropped %v, want %v (%v)", dropped, want, r.Diagnostics)
	}
	got := r.Load.GetEndpoints()[0].GetLbEndpoints()[0].GetMetadata()
	if n := proto.Size(got); n > 400 || got.GetFilterMetadata()["c"] == nil || got.GetFilterMetadata()["d"] == nil {
		t.Errorf("kept %d bytes: %v", n, got)
	}
}

func TestHostnameLimit(t *testing.T) {
	for _, lim := range []int{1, 10, DefaultMaxHostnameBytes} {
		t.Run(fmt.Sprint(lim), func(t *testing.T) {
			s := sources.Service{Name: "svc", Endpoints: []sources.Endpoint{
				withHost(ep("10.0.0.1", 80), strings.Repeat("a", lim)),
				withHost(ep("10.0.0.2", 80), strings.Repeat("b", lim+1)),
			}}
			r := ServiceWithin(s, Limits{MaxHostnameBytes: lim})
			want := []Diagnostic{{"svc", "endpoints[10.0.0.2:80].hostname", fmt.Sprintf("hostname is %d bytes, more than max_hostname_bytes %d; hostname dropped", lim+1, lim)}}
			if d := cmp.Diff(want, r.Diagnostics); d != "" {
				t.Errorf("diagnostics (-want +got):\n%s", d)
			}
			lbs := r.Load.GetEndpoints()[0].GetLbEndpoints()
			if len(lbs) != 2 || lbs[0].GetEndpoint().GetHostname() != strings.Repeat("a", lim) || lbs[1].GetEndpoint().GetHostname() != "" {
				t.Errorf("endpoints %v", lbs)
			}
		})
	}
}

// The other case: a 5 MB hostname made a response larger than a
// gRPC client accepts. The hostname goes; the endpoint stays.
func TestFiveMegabyteHostname(t *testing.T) {
	res, diags := Service(sources.Service{Name: "big", Endpoints: []sources.Endpoint{withHost(ep("10.0.0.1", 80), strings.Repeat("h", 5_000_000)), ep("10.0.0.2", 80)}})
	want := []Diagnostic{{"big", "endpoints[10.0.0.1:80].hostname", "hostname is 5000000 bytes, more than max_hostname_bytes 253; hostname dropped"}}
	if d := cmp.Diff(want, diags); d != "" {
		t.Errorf("diagnostics (-want +got):\n%s", d)
	}
	if n := proto.Size(res.Load); n > 200 || len(res.Load.GetEndpoints()[0].GetLbEndpoints()) != 2 {
		t.Errorf("load assignment of %d bytes: %v", n, res.Load)
	}
}

func TestNameLimit(t *testing.T) {
	lim := Limits{MaxNameBytes: 10}
	if r := ServiceWithin(sources.Service{Name: strings.Repeat("n", 10)}, lim); r.Refused || len(r.Diagnostics) != 0 || r.Cluster.GetName() != "nnnnnnnnnn" {
		t.Errorf("name at the limit: %+v", r)
	}
	r := ServiceWithin(sources.Service{Name: strings.Repeat("n", 11), Endpoints: []sources.Endpoint{ep("10.0.0.1", 80)}}, lim)
	want := []Diagnostic{{"nnnnnnnnnnn", "name", "the name is 11 bytes, more than max_name_bytes 10; service not served"}}
	if d := cmp.Diff(want, r.Diagnostics); d != "" {
		t.Errorf("diagnostics (-want +got):\n%s", d)
	}
	if !r.Refused || !r.Resources.IsZero() || r.Exceeded[LimitNameBytes] != 1 {
		t.Errorf("refused %v, resources %+v, exceeded %v", r.Refused, r.Resources, r.Exceeded)
	}

	// A long name is shortened in the diagnostic; the default limit is the sources' 255.
	r = ServiceWithin(sources.Service{Name: strings.Repeat("x", 256)}, Limits{})
	if !r.Refused || len(r.Diagnostics) != 1 || r.Diagnostics[0].Service != strings.Repeat("x", 64)+"…(256 bytes)" {
		t.Errorf("%+v", r)
	}
	if r := ServiceWithin(sources.Service{Name: "bad-\xff"}, Limits{}); !r.Refused || r.Diagnostics[0].Message != "the name is not UTF-8; service not served" {
		t.Errorf("%+v", r)
	}
}

func TestResourceBytesLimit(t *testing.T) {
	s := sources.Service{Name: "svc"}
	for i := range 100 {
		s.Endpoints = append(s.Endpoints, ep(fmt.Sprintf("10.0.%d.%d", i/250, i%250), 80))
	}
	size := proto.Size(resourcesOf(Service(s)).Load)
	at := ServiceWithin(s, Limits{MaxResourceBytes: size})
	if at.Refused || len(at.Diagnostics) != 0 || at.Load == nil {
		t.Fatalf("at the limit (%d bytes): %+v", size, at)
	}
	over := ServiceWithin(s, Limits{MaxResourceBytes: size - 1})
	want := []Diagnostic{{"svc", "cluster_load_assignment", fmt.Sprintf("encodes to %d bytes, more than max_resource_bytes %d; service update refused", size, size-1)}}
	if d := cmp.Diff(want, over.Diagnostics); d != "" {
		t.Errorf("diagnostics (-want +got):\n%s", d)
	}
	if !over.Refused || !over.Resources.IsZero() || over.Exceeded[LimitResourceBytes] != 1 {
		t.Errorf("refused %v, resources %+v, exceeded %v", over.Refused, over.Resources, over.Exceeded)
	}
}

// A string that cannot be encoded where nothing can be dropped refuses the
// service (the cache would fail to encode it and block every publish).
func TestUnencodableRefused(t *testing.T) {
	r := ServiceWithin(sources.Service{Name: "svc", Endpoints: []sources.Endpoint{at(ep("10.0.0.1", 80), 0, "bad-\xff", "", "")}}, Limits{})
	if !r.Refused || !r.Resources.IsZero() || r.Exceeded[LimitEncoding] != 1 {
		t.Fatalf("%+v", r)
	}
	want := []Diagnostic{{"svc", "locality", "a locality of priority 0 is not UTF-8; service update refused"}}
	if d := cmp.Diff(want, r.Diagnostics); d != "" {
		t.Errorf("diagnostics (-want +got):\n%s", d)
	}
	// A namespace whose name is not UTF-8 is dropped on its own.
	r = ServiceWithin(sources.Service{Name: "svc", Endpoints: []sources.Endpoint{withMeta(ep("10.0.0.1", 80), sources.Metadata{"a\xff": {"k": "v"}, "ok": {"k": "v"}})}}, Limits{})
	if r.Refused || len(r.Diagnostics) != 1 || r.Diagnostics[0].Field != "endpoints[10.0.0.1:80].metadata" {
		t.Fatalf("%+v", r)
	}
	if md := r.Load.GetEndpoints()[0].GetLbEndpoints()[0].GetMetadata().GetFilterMetadata(); len(md) != 1 || md["ok"] == nil {
		t.Errorf("metadata %v", md)
	}
}

func TestLimitsCheck(t *testing.T) {
	if err := (Limits{}).Check(); err != nil {
		t.Errorf("zero limits (defaults): %v", err)
	}
	if err := DefaultLimits().Check(); err != nil {
		t.Errorf("defaults: %v", err)
	}
	if got := (Limits{MaxNameBytes: 7}).WithDefaults(); got.MaxNameBytes != 7 || got.MaxResourceBytes != DefaultMaxResourceBytes || got.MaxMetadataBytes != DefaultMaxMetadataBytes {
		t.Errorf("WithDefaults: %+v", got)
	}
	// The metadata default is no more than a lower resource limit.
	if got := (Limits{MaxResourceBytes: 8192}).WithDefaults(); got.MaxMetadataBytes != 8192 || got.Check() != nil {
		t.Errorf("WithDefaults: %+v", got)
	}
	ok := Limits{MaxMetadataDepth: CeilingMetadataDepth, MaxNameBytes: CeilingNameBytes, MaxResourceBytes: CeilingResourceBytes, MaxMetadataBytes: CeilingResourceBytes, MaxHostnameBytes: 1}
	if err := ok.Check(); err != nil {
		t.Errorf("ceilings: %v", err)
	}
	for _, tc := range []struct {
		l    Limits
		want string
	}{
		{Limits{MaxMetadataDepth: 33}, "max_metadata_depth: 33 is not in 1..32"},
		{Limits{MaxMetadataDepth: -1}, "max_metadata_depth: -1 is not in 1..32"},
		{Limits{MaxNameBytes: 256}, "max_name_bytes: 256 is not in 1..255"},
		{Limits{MaxResourceBytes: 4095}, "max_resource_bytes: 4095 is not in 4096..4177920"},
		{Limits{MaxResourceBytes: 4 << 20}, "max_resource_bytes: 4194304 is not in 4096..4177920"},
		{Limits{MaxMetadataBytes: DefaultMaxResourceBytes + 1}, "max_metadata_bytes: 1048577 is not in 1..1048576"},
		{Limits{MaxResourceBytes: 8192, MaxMetadataBytes: 8193}, "max_metadata_bytes: 8193 is not in 1..8192"},
		{Limits{MaxHostnameBytes: -5}, "max_hostname_bytes: -5 is not in 1..1048576"},
	} {
		err := tc.l.Check()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want %q", tc.l, err, tc.want)
		}
	}
}

func resourcesOf(r Resources, _ []Diagnostic) Resources { return r }

// Whatever the input, a service is either refused or every resource
// encodes within the limits and unpacks within Envoy's recursion limit.
func TestLimitsHoldForRandomInput(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	var value func(depth int) any
	value = func(depth int) any {
		switch k := r.IntN(6); {
		case depth > 40 || k == 0:
			return strings.Repeat("s", r.IntN(3000))
		case k == 1:
			return r.Float64()
		case k == 2:
			return []any{value(depth + 1), value(depth + 1)}
		default:
			return map[string]any{"a": value(depth + 1)}
		}
	}
	lim := Limits{MaxMetadataDepth: 10, MaxMetadataBytes: 5000, MaxHostnameBytes: 100, MaxResourceBytes: 20000}
	refused := 0
	for i := range 300 {
		s := sources.Service{Name: fmt.Sprintf("s%d", i)}
		for j := range r.IntN(20) {
			e := ep(fmt.Sprintf("10.0.0.%d", j+1), 80)
			e.Hostname = strings.Repeat("h", r.IntN(150))
			e.Metadata = sources.Metadata{}
			for n := range r.IntN(4) {
				e.Metadata[fmt.Sprint("ns", n)] = map[string]any{"k": value(2)}
			}
			s.Endpoints = append(s.Endpoints, e)
		}
		res := ServiceWithin(s, lim)
		if res.Refused {
			refused++
			if !res.Resources.IsZero() {
				t.Fatalf("%s: refused with resources", s.Name)
			}
			continue
		}
		if err := res.Validate(); err != nil {
			t.Fatal(err)
		}
		b, err := proto.Marshal(res.Load)
		if err != nil || len(b) > lim.MaxResourceBytes {
			t.Fatalf("%s: %d bytes, %v", s.Name, len(b), err)
		}
		if err := unpacksLikeEnvoy(t, res.Load); err != nil {
			t.Fatalf("%s: %v", s.Name, err)
		}
		for _, g := range res.Load.GetEndpoints() {
			for _, lb := range g.GetLbEndpoints() {
				if n := proto.Size(lb.GetMetadata()); n > lim.MaxMetadataBytes || len(lb.GetEndpoint().GetHostname()) > lim.MaxHostnameBytes {
					t.Fatalf("%s: metadata of %d bytes, hostname of %d", s.Name, n, len(lb.GetEndpoint().GetHostname()))
				}
			}
		}
	}
	if refused == 0 || refused == 300 {
		t.Errorf("%d of 300 refused: the input does not exercise both outcomes", refused)
	}
}
