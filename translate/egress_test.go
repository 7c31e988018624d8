package translate

import (
	"slices"
	"strings"
	"testing"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/xdsbridge/xdsbridge/policy"
	"github.com/xdsbridge/xdsbridge/sources"
)

func egressServices(t *testing.T) []EgressService {
	t.Helper()
	rc, diags := RouteConfigFor("api", &policy.Service{Domains: []string{"api.example.com"}})
	if len(diags) > 0 {
		t.Fatal(diags)
	}
	return []EgressService{
		{Name: "web", Source: "consul", Tags: []string{"public"}, Route: RouteConfig("web")},
		{Name: "api", Source: "consul", Route: rc},
		{Name: "db", Source: "static", Tags: []string{"internal"}, Route: RouteConfig("db")},
	}
}

func vhostNames(rc *route.RouteConfiguration) []string {
	var out []string
	for _, vh := range rc.GetVirtualHosts() {
		out = append(out, vh.GetName())
	}
	return out
}

func TestEgressTableDomains(t *testing.T) {
	e := Egress{DomainSuffixes: []string{".service.consul", ".service.dc1.consul"}}.WithDefaults()
	rc, diags := e.RouteTable(egressServices(t))
	if len(diags) > 0 {
		t.Fatal(diags)
	}
	if err := rc.ValidateAll(); err != nil {
		t.Fatal(err)
	}
	if rc.GetName() != DefaultEgressName {
		t.Errorf("name %q, want %q", rc.GetName(), DefaultEgressName)
	}
	if got, want := vhostNames(rc), []string{"api", "db", "web", "xdsbridge-unknown-host"}; !slices.Equal(got, want) {
		t.Fatalf("virtual hosts %v, want %v", got, want)
	}
	want := []string{"api", "api:*", "api.service.consul", "api.service.consul:*", "api.service.dc1.consul", "api.service.dc1.consul:*", "api.example.com"}
	if got := rc.VirtualHosts[0].GetDomains(); !slices.Equal(got, want) {
		t.Errorf("api's domains %v, want %v", got, want)
	}
	// The routes are the service's own: the default route to its cluster.
	if c := rc.VirtualHosts[2].GetRoutes()[0].GetRoute().GetCluster(); c != "web" {
		t.Errorf("web's route goes to %q", c)
	}
}

func TestEgressTableCarriesPolicyRoutes(t *testing.T) {
	two := uint32(2)
	p := &policy.Service{
		Subsets: map[string]policy.Subset{"v1": {Filter: "true"}, "v2": {Filter: "true"}},
		Split:   []policy.Split{{Weight: 80, Subset: "v1"}, {Weight: 20, Subset: "v2"}},
		Retry:   &policy.Retry{NumRetries: &two, On: []string{"5xx"}},
	}
	own, _ := RouteConfigFor("api", p)
	rc, _ := Egress{}.WithDefaults().RouteTable([]EgressService{{Name: "api", Route: own}})
	r := rc.VirtualHosts[0].GetRoutes()
	if len(r) != len(own.VirtualHosts[0].Routes) {
		t.Fatalf("%d routes, want the service's %d", len(r), len(own.VirtualHosts[0].Routes))
	}
	var got []string
	for _, c := range r[len(r)-1].GetRoute().GetWeightedClusters().GetClusters() {
		got = append(got, c.GetName())
	}
	if want := []string{"api/v1", "api/v2"}; !slices.Equal(got, want) {
		t.Errorf("split %v, want %v", got, want)
	}
	if r[len(r)-1].GetRoute().GetRetryPolicy().GetNumRetries().GetValue() != 2 {
		t.Error("retry policy lost")
	}
	// The service's own route configuration is not modified.
	if d := own.VirtualHosts[0].GetDomains(); !slices.Equal(d, []string{"api"}) {
		t.Errorf("own domains modified: %v", d)
	}
}

func TestEgressTableCatchAll(t *testing.T) {
	rc, _ := Egress{}.WithDefaults().RouteTable(egressServices(t))
	last := rc.VirtualHosts[len(rc.VirtualHosts)-1]
	if !slices.Equal(last.GetDomains(), []string{"*"}) {
		t.Fatalf("last virtual host's domains %v", last.GetDomains())
	}
	dr := last.GetRoutes()[0].GetDirectResponse()
	if dr.GetStatus() != 404 || !strings.HasPrefix(dr.GetBody().GetInlineString(), EgressNotFoundBody) {
		t.Errorf("catch-all %v, want a 404 naming the problem", dr)
	}
	// An empty catalog is the catch-all alone.
	rc, _ = Egress{}.WithDefaults().RouteTable(nil)
	if got := vhostNames(rc); !slices.Equal(got, []string{"xdsbridge-unknown-host"}) {
		t.Errorf("empty table %v", got)
	}
}

func TestEgressTableFallback(t *testing.T) {
	rc, _ := Egress{Fallback: "web"}.WithDefaults().RouteTable(egressServices(t))
	if err := rc.ValidateAll(); err != nil {
		t.Fatal(err)
	}
	last := rc.VirtualHosts[len(rc.VirtualHosts)-1]
	if c := last.GetRoutes()[0].GetRoute().GetCluster(); c != "web" {
		t.Errorf("unknown hosts go to %q, want the fallback web", c)
	}
}

func TestEgressIncludeFilters(t *testing.T) {
	for _, c := range []struct {
		name string
		in   EgressInclude
		want []string
	}{
		{"all", EgressInclude{}, []string{"api", "db", "web"}},
		{"source", EgressInclude{Sources: []string{"consul"}}, []string{"api", "web"}},
		{"tag", EgressInclude{Tags: []string{"internal", "nope"}}, []string{"db"}},
		{"name", EgressInclude{Names: []string{"w*", "a?i"}}, []string{"api", "web"}},
		{"every list", EgressInclude{Sources: []string{"consul"}, Names: []string{"[a-d]*"}}, []string{"api"}},
		{"nothing", EgressInclude{Names: []string{"x*"}}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			rc, _ := Egress{Include: c.in}.WithDefaults().RouteTable(egressServices(t))
			got := vhostNames(rc)
			if !slices.Equal(got[:len(got)-1], c.want) {
				t.Errorf("virtual hosts %v, want %v and the catch-all", got, c.want)
			}
		})
	}
}

func TestEgressTableDuplicateDomains(t *testing.T) {
	// "a.service.consul" is a service and a's suffixed domain; "B" is a
	// policy domain of a and the name of another service (Envoy compares
	// domains without case and rejects a table with one twice).
	own, _ := RouteConfigFor("a", &policy.Service{Domains: []string{"b", "*"}})
	rc, diags := Egress{}.WithDefaults().RouteTable([]EgressService{
		{Name: "a", Route: own},
		{Name: "a.service.consul", Route: RouteConfig("a.service.consul")},
		{Name: "B", Route: RouteConfig("B")},
	})
	if err := rc.ValidateAll(); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, vh := range rc.VirtualHosts {
		for _, d := range vh.Domains {
			if seen[strings.ToLower(d)] {
				t.Errorf("domain %q twice", d)
			}
			seen[strings.ToLower(d)] = true
		}
	}
	if got := vhostNames(rc); !slices.Equal(got, []string{"B", "a", "a.service.consul", "xdsbridge-unknown-host"}) {
		t.Errorf("virtual hosts %v", got)
	}
	// A service named like the catch-all: the catch-all takes another name.
	named, _ := Egress{}.WithDefaults().RouteTable([]EgressService{{Name: EgressCatchAllName}, {Name: EgressCatchAllName + "-"}})
	if got := vhostNames(named); !slices.Equal(got, []string{EgressCatchAllName, EgressCatchAllName + "-", EgressCatchAllName + "--"}) {
		t.Errorf("virtual hosts %v", got)
	}
	// A service's own name outranks another's suffixed name.
	if d := rc.VirtualHosts[2].GetDomains(); d[0] != "a.service.consul" {
		t.Errorf("a.service.consul's domains %v", d)
	}
	if len(diags) != 4 {
		t.Errorf("diagnostics %v, want 4 (a: a.service.consul, a.service.consul:*, b, *)", diags)
	}
}

func TestEgressTags(t *testing.T) {
	s := sources.Service{Name: "x", Endpoints: []sources.Endpoint{
		{Metadata: sources.Metadata{"consul": {"tag.v1": true, "tags": []any{"v1", "canary"}}}},
		{Metadata: sources.Metadata{"other": {"tag.blue": true, "tag.off": false}}},
	}}
	if got, want := EgressTags(s), []string{"blue", "canary", "v1"}; !slices.Equal(got, want) {
		t.Errorf("tags %v, want %v", got, want)
	}
}

func TestEgressListener(t *testing.T) {
	e := Egress{Listener: &EgressListener{Port: 10001}}.WithDefaults()
	if err := e.Check(); err != nil {
		t.Fatal(err)
	}
	l, err := e.EgressListener()
	if err != nil {
		t.Fatal(err)
	}
	if err := l.ValidateAll(); err != nil {
		t.Fatal(err)
	}
	if a := l.GetAddress().GetSocketAddress(); a.GetAddress() != "127.0.0.1" || a.GetPortValue() != 10001 {
		t.Errorf("address %v", a)
	}
}

func TestEgressCheck(t *testing.T) {
	for _, c := range []struct {
		e    Egress
		want string
	}{
		{Egress{DomainSuffixes: []string{"service.consul"}}, "domain_suffixes[0]"},
		{Egress{DomainSuffixes: []string{".*.consul"}}, "domain_suffixes[0]"},
		{Egress{Include: EgressInclude{Names: []string{"["}}}, "include.names[0]"},
		{Egress{Include: EgressInclude{Sources: []string{""}}}, "include.sources[0]"},
		{Egress{Listener: &EgressListener{}}, "listener.port"},
		{Egress{Listener: &EgressListener{Port: 1, Address: "localhost"}}, "listener.address"},
		{Egress{Fallback: "a b"}, "fallback"},
	} {
		err := c.e.WithDefaults().Check()
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want one naming %s", c.e, err, c.want)
		}
	}
}
