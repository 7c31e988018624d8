package xds_test

import (
	"slices"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"

	"github.com/xdsbridge/xdsbridge/translate"
	"github.com/xdsbridge/xdsbridge/xds"
)

// The egress table over VHDS (vhds.go): delta clients get the table's
// name as a RouteConfiguration without virtual hosts and fetch virtual
// hosts by alias "<table>/<Host>"; sotw clients get the whole table.

const vhdsTable = "eg"

// vhdsHarness serves VHDS for the table vhdsTable and publishes the table
// of services (each with its cluster).
func vhdsHarness(t *testing.T, services ...string) (*harness, translate.Egress) {
	t.Helper()
	h := newHarness(t, true)
	e := translate.Egress{RouteConfigName: vhdsTable, VHDS: true}.WithDefaults()
	if err := h.cache.ServeVHDS(xds.VHDSOptions{RouteConfigName: vhdsTable, Split: e.VHDSSplit}); err != nil {
		t.Fatal(err)
	}
	var rs []translate.Resources
	for _, s := range services {
		rs = append(rs, svc(s, 1000))
	}
	h.publish(append(rs, vhdsTableOf(e, services...)))
	return h, e
}

// vhdsTableOf is the table of services, for PublishServices.
func vhdsTableOf(e translate.Egress, services ...string) translate.Resources {
	var es []translate.EgressService
	for _, s := range services {
		es = append(es, translate.EgressService{Name: s})
	}
	rc, _ := e.RouteTable(es)
	return translate.Resources{Route: rc}
}

// vhdsOpen opens a delta stream, takes its route configuration (the
// stub) and answers VHDS's first request, as Envoy does.
func vhdsOpen(t *testing.T, h *harness) *deltaClient {
	t.Helper()
	c := h.delta("envoy")
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: xds.RouteType, ResourceNamesSubscribe: []string{vhdsTable}})
	r := c.recv()
	eq(t, "route names", []string{vhdsTable}, names(r))
	var rc route.RouteConfiguration
	if err := r.Resources[0].Resource.UnmarshalTo(&rc); err != nil {
		t.Fatal(err)
	}
	if rc.GetName() != vhdsTable || len(rc.GetVirtualHosts()) != 0 || rc.GetVhds().GetConfigSource().GetAds() == nil {
		t.Fatalf("delta route configuration %v, want %s with no virtual host and vhds over ADS", &rc, vhdsTable)
	}
	c.ack(r)
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: xds.VirtualHostType})
	r = c.recv()
	eq(t, "first VHDS response: resources", 0, len(r.Resources))
	eq(t, "first VHDS response: removed (the empty host, for Envoy's watch)", []string{vhdsTable + "/"}, r.RemovedResources)
	c.ack(r)
	return c
}

// vhdsAsk subscribes c to aliases and returns the answer.
func vhdsAsk(t *testing.T, c *deltaClient, aliases ...string) *discovery.DeltaDiscoveryResponse {
	t.Helper()
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: xds.VirtualHostType, ResourceNamesSubscribe: aliases})
	r := c.recv()
	c.ack(r)
	return r
}

// TestVHDSHostsByAlias: a delta client asking for "<table>/<Host>" gets
// the virtual host whose domains match Host (port or suffix forms
// included), under its own name with the alias asked for; a Host no
// service has gets the alias alone, without a resource; a sotw client
// gets the whole table under the table's name.
func TestVHDSHostsByAlias(t *testing.T) {
	h, _ := vhdsHarness(t, "api", "web")
	c := vhdsOpen(t, h)

	r := vhdsAsk(t, c, vhdsTable+"/api:8080")
	eq(t, "api:8080", []string{vhdsTable + "/api"}, names(r))
	eq(t, "api:8080 aliases", []string{vhdsTable + "/api:8080"}, r.Resources[0].Aliases)
	var vh route.VirtualHost
	if err := r.Resources[0].Resource.UnmarshalTo(&vh); err != nil {
		t.Fatal(err)
	}
	if vh.GetName() != vhdsTable+"/api" || vh.GetRoutes()[0].GetRoute().GetCluster() != "api" || vh.GetTypedPerFilterConfig()[translate.OnDemandFilter] == nil {
		t.Fatalf("virtual host %v: want %s/api routing to cluster api, with on-demand CDS", &vh, vhdsTable)
	}

	r = vhdsAsk(t, c, vhdsTable+"/web.service.consul:10000")
	eq(t, "web.service.consul:10000", []string{vhdsTable + "/web"}, names(r))

	r = vhdsAsk(t, c, vhdsTable+"/nosuch")
	eq(t, "unknown host", []string{vhdsTable + "/nosuch"}, names(r))
	eq(t, "unknown host: aliases", []string{vhdsTable + "/nosuch"}, r.Resources[0].Aliases)
	if r.Resources[0].Resource != nil {
		t.Fatalf("unknown host answered with a resource: %v", r.Resources[0])
	}
	c.none()

	s := h.sotw()
	s.send(&discovery.DiscoveryRequest{Node: &core.Node{Id: "sotw"}, TypeUrl: xds.RouteType, ResourceNames: []string{vhdsTable}})
	sr := s.recv()
	var full route.RouteConfiguration
	if len(sr.Resources) != 1 || sr.Resources[0].UnmarshalTo(&full) != nil {
		t.Fatalf("sotw routes: %v", sr.Resources)
	}
	if full.GetVhds() != nil || len(full.GetVirtualHosts()) != 3 {
		t.Fatalf("sotw route configuration has %d virtual hosts, vhds %v; want the whole table (api, web, catch-all), no vhds", len(full.GetVirtualHosts()), full.GetVhds())
	}
}

// TestVHDSChangeReachesOnlyHolders: a change to one service's virtual
// host goes to the stream holding it and to no other; a removed one is
// reported removed to its holder only; a service added under a host a
// stream asked for before it existed is sent to that stream at once.
func TestVHDSChangeReachesOnlyHolders(t *testing.T) {
	h, e := vhdsHarness(t, "api", "web")
	a, b := vhdsOpen(t, h), vhdsOpen(t, h)
	ra := vhdsAsk(t, a, vhdsTable+"/api")
	vhdsAsk(t, a, vhdsTable+"/billing")
	vhdsAsk(t, b, vhdsTable+"/web")

	// api changes: a header added to its virtual host.
	table := vhdsTableOf(e, "api", "web")
	changed := proto.Clone(table.Route).(*route.RouteConfiguration)
	changed.VirtualHosts[0].RequestHeadersToAdd = []*core.HeaderValueOption{{Header: &core.HeaderValue{Key: "x-v", Value: "2"}}}
	h.publish([]translate.Resources{{Route: changed}})
	r := a.recv()
	eq(t, "api changed: to its holder", []string{vhdsTable + "/api"}, names(r))
	if r.Resources[0].Version == ra.Resources[0].Version {
		t.Fatalf("api changed, same version %s", r.Resources[0].Version)
	}
	a.ack(r)
	b.none()

	// web removed: its holder is told, the other is not.
	without := proto.Clone(changed).(*route.RouteConfiguration)
	without.VirtualHosts = slices.Delete(without.VirtualHosts, 1, 2) // web
	h.publish([]translate.Resources{{Route: without}}, "web")
	r = b.recv()
	eq(t, "web removed: resources", 0, len(r.Resources))
	eq(t, "web removed", []string{vhdsTable + "/web"}, r.RemovedResources)
	b.ack(r)
	a.none()

	// billing added: a asked for it before.
	added := vhdsTableOf(e, "api", "billing")
	added.Route.VirtualHosts[0] = without.VirtualHosts[0] // api as changed
	h.publish([]translate.Resources{svc("billing", 1001), added})
	r = a.recv()
	eq(t, "billing added", []string{vhdsTable + "/billing"}, names(r))
	eq(t, "billing aliases", []string{vhdsTable + "/billing"}, r.Resources[0].Aliases)
	if r.Resources[0].Resource == nil {
		t.Fatal("billing sent without its virtual host")
	}
	a.ack(r)
	b.none()
}

// TestVHDSWildcardRouteClientGetsStub: a delta client subscribed to every
// route configuration gets the table's name once, as the stub, never the
// whole table.
func TestVHDSWildcardRouteClientGetsStub(t *testing.T) {
	h, _ := vhdsHarness(t, "api", "web")
	c := h.delta("wildcard")
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: xds.RouteType})
	r := c.recv()
	eq(t, "route names", []string{"api", vhdsTable, "web"}, names(r))
	for _, res := range r.Resources {
		var rc route.RouteConfiguration
		if err := res.Resource.UnmarshalTo(&rc); err != nil {
			t.Fatal(err)
		}
		if res.Name == vhdsTable && (len(rc.GetVirtualHosts()) != 0 || rc.GetVhds() == nil) {
			t.Fatalf("%s sent with %d virtual hosts, vhds %v; want the stub", vhdsTable, len(rc.GetVirtualHosts()), rc.GetVhds())
		}
	}
}

// TestVHDSAnsweredAfterResumeWithCurrentRoute: a delta client that
// reconnects holding the current route configuration (its
// initial_resource_versions), and so is not sent it again, has its VHDS
// requests answered: the route configuration it holds comes first.
func TestVHDSAnsweredAfterResumeWithCurrentRoute(t *testing.T) {
	h, _ := vhdsHarness(t, "api", "web")
	first := h.delta("envoy")
	first.send(&discovery.DeltaDiscoveryRequest{TypeUrl: xds.RouteType, ResourceNamesSubscribe: []string{vhdsTable}})
	r := first.recv()
	eq(t, "route names", []string{vhdsTable}, names(r))
	version := r.Resources[0].Version

	c := h.delta("envoy")
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: xds.RouteType, ResourceNamesSubscribe: []string{vhdsTable},
		InitialResourceVersions: map[string]string{vhdsTable: version}})
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: xds.VirtualHostType, ResourceNamesSubscribe: []string{vhdsTable + "/api"}})
	for {
		r := c.recv()
		if r.TypeUrl == xds.VirtualHostType {
			eq(t, "api after resume", []string{vhdsTable + "/api"}, names(r))
			return
		}
	}
}
