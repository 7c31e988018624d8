package bridge

import (
	"testing"
	"time"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/xdsbridge/xdsbridge/policy"
	"github.com/xdsbridge/xdsbridge/translate"
	"github.com/xdsbridge/xdsbridge/xds"
)

// The policies' references to services nobody publishes are counted by
// kind while they last: a split share to ghost is dropped until ghost is
// published, then web's routes send it its share again; a router
// destination without hosts follows its resolver's failover; two
// services redirecting to each other are a cycle.
func TestBlackHolesFollowTheCatalog(t *testing.T) {
	cache := xds.NewCache()
	l := run(t, Options{Sources: []string{"a", "policy"}, Quiet: time.Millisecond}, cache)
	routes := func(service string) []string {
		rc, _ := cache.Get(xds.RouteType, service).(*route.RouteConfiguration)
		return translate.RouteClusters(rc)
	}
	gauge := func(kind string) float64 { return testutil.ToFloat64(l.m.blackHoles.WithLabelValues(kind)) }
	waitRoutes := func(service string, want ...string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !cmp.Equal(routes(service), want) {
			if time.Now().After(deadline) {
				t.Fatalf("%s routes to %v; want %v", service, routes(service), want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	publishPolicy(t, l, "policy", map[string]policy.Service{
		"web":   {Split: []policy.Split{{Weight: 50, Service: "web"}, {Weight: 50, Service: "ghost"}}},
		"front": {Routes: []policy.Route{{Match: policy.Match{Prefix: "/api"}, Destination: &policy.Target{Service: "empty"}}}},
		"empty": {Failover: []policy.Target{{Service: "backup"}}},
		"x":     {Redirect: &policy.Target{Service: "y"}},
		"y":     {Redirect: &policy.Target{Service: "x"}},
	})
	publish(t, l, "a", service("web", 1), service("front", 2), service("backup", 3), service("x", 4), service("y", 5))
	waitRoutes("web", "web")
	waitRoutes("front", "backup", "front")
	waitTrue(t, func() bool {
		return gauge(translate.BlackHoleSplit) == 1 && gauge(translate.BlackHoleRedirectCycle) == 2
	})
	if g := gauge(translate.BlackHoleRoute); g != 0 {
		t.Errorf("route black holes %v, want 0 (front's route follows empty's failover)", g)
	}
	if d := l.Diagnostics()["web"]; len(d) != 1 || d[0].Field != "split[1]" {
		t.Errorf("web diagnostics %v", d)
	}

	// ghost and empty appear: web splits again, front routes to empty.
	publish(t, l, "a", service("web", 1), service("front", 2), service("backup", 3), service("x", 4), service("y", 5), service("ghost", 6), service("empty", 7))
	waitRoutes("web", "web", "ghost")
	waitRoutes("front", "empty", "front")
	waitTrue(t, func() bool { return gauge(translate.BlackHoleSplit) == 0 })
	if d := l.Diagnostics()["web"]; len(d) != 0 {
		t.Errorf("web diagnostics %v", d)
	}
	// And go again: the share is dropped again.
	publish(t, l, "a", service("web", 1), service("front", 2), service("x", 4), service("y", 5))
	waitRoutes("web", "web")
	waitTrue(t, func() bool { return gauge(translate.BlackHoleSplit) == 1 && gauge(translate.BlackHoleRoute) == 1 })
}
