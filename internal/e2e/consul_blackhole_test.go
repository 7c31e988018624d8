package e2e

import (
	"slices"
	"testing"
	"time"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/hashicorp/consul/api"

	"github.com/xdsbridge/xdsbridge/sources/consul/consultest"
	"github.com/xdsbridge/xdsbridge/translate"
	"github.com/xdsbridge/xdsbridge/xds"
)

// A Consul service-router sending to a service with no instances follows
// that service's resolver failover, as Consul's discovery chain does,
// instead of a cluster that does not exist; once the service has an
// instance, the route goes to it.
func TestConsulRouterToServiceWithoutInstancesFailsOver(t *testing.T) {
	a := consultest.StartAgent(t, "dc1")
	a.Register(&api.AgentServiceRegistration{ID: "g1", Name: "greeter", Address: "127.0.0.1", Port: 9201})
	a.Register(&api.AgentServiceRegistration{ID: "b1", Name: "backup", Address: "127.0.0.1", Port: 9202})
	for _, e := range []api.ConfigEntry{
		&api.ServiceConfigEntry{Kind: api.ServiceDefaults, Name: "greeter", Protocol: "grpc"},
		&api.ServiceConfigEntry{Kind: api.ServiceDefaults, Name: "empty", Protocol: "grpc"},
		&api.ServiceConfigEntry{Kind: api.ServiceDefaults, Name: "backup", Protocol: "grpc"},
		&api.ServiceResolverConfigEntry{Kind: api.ServiceResolver, Name: "empty", Failover: map[string]api.ServiceResolverFailover{"*": {Service: "backup"}}},
		&api.ServiceRouterConfigEntry{Kind: api.ServiceRouter, Name: "greeter", Routes: []api.ServiceRoute{{
			Match:       &api.ServiceRouteMatch{HTTP: &api.ServiceRouteHTTPMatch{PathPrefix: "/x.Empty/"}},
			Destination: &api.ServiceRouteDestination{Service: "empty"},
		}}},
	} {
		if _, _, err := a.Client.ConfigEntries().Set(e, nil); err != nil {
			t.Fatal(err)
		}
	}
	br := startConsulBridge(t, a)
	routes := func() []string {
		rc, _ := br.app.Cache.Get(xds.RouteType, "greeter").(*route.RouteConfiguration)
		return translate.RouteClusters(rc)
	}
	waitRoutes := func(want ...string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !slices.Equal(routes(), want) {
			if time.Now().After(deadline) {
				t.Fatalf("greeter routes to %v; want %v (diagnostics %v)", routes(), want, br.app.Loop.Diagnostics()["greeter"])
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitRoutes("backup", "greeter")
	a.Register(&api.AgentServiceRegistration{ID: "e1", Name: "empty", Address: "127.0.0.1", Port: 9203})
	waitRoutes("empty", "greeter")
}
