package xds_test

import (
	"testing"
	"time"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/xdsbridge/xdsbridge/xds"
	"github.com/xdsbridge/xdsbridge/xds/store"
)

const rdsURL = xds.RouteType

// routeTo is RouteConfiguration "r" whose one route sends to the
// clusters, in equal shares when more than one.
func routeTo(clusters ...string) store.Resource {
	a := &route.RouteAction{}
	if len(clusters) == 1 {
		a.ClusterSpecifier = &route.RouteAction_Cluster{Cluster: clusters[0]}
	} else {
		wc := &route.WeightedCluster{}
		for _, c := range clusters {
			wc.Clusters = append(wc.Clusters, &route.WeightedCluster_ClusterWeight{Name: c, Weight: wrapperspb.UInt32(1)})
		}
		a.ClusterSpecifier = &route.RouteAction_WeightedClusters{WeightedClusters: wc}
	}
	return store.Resource{Name: "r", Msg: &route.RouteConfiguration{Name: "r", VirtualHosts: []*route.VirtualHost{{
		Name: "vh", Domains: []string{"*"},
		Routes: []*route.Route{{Match: &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}},
			Action: &route.Route_Route{Route: a}}},
	}}}}
}

func sotwAck(c *sotwClient, r *discovery.DiscoveryResponse, names ...string) {
	c.send(&discovery.DiscoveryRequest{TypeUrl: r.TypeUrl, VersionInfo: r.VersionInfo, ResponseNonce: r.Nonce, ResourceNames: names})
}

// shortTypeName is a short name of a type URL.
func shortTypeName(u string) string {
	return map[string]string{cds: "cds", eds: "eds", rdsURL: "rds"}[u]
}

// envoySotwClient sets up an Envoy-like sotw client (wildcard CDS, EDS and RDS
// by name) holding cluster A, its assignment and route r → A.
func envoySotwClient(t *testing.T, h *harness) *sotwClient {
	h.apply(store.Change{TypeURL: cds, Upserts: []store.Resource{rcl("A", 0)}},
		store.Change{TypeURL: eds, Upserts: []store.Resource{rla("A", 0)}},
		store.Change{TypeURL: rdsURL, Upserts: []store.Resource{routeTo("A")}})
	c := h.sotw()
	c.send(&discovery.DiscoveryRequest{TypeUrl: cds})
	r := c.recv()
	eq(t, "cds", []string{"A"}, sotwNames(t, r))
	sotwAck(c, r)
	c.send(&discovery.DiscoveryRequest{TypeUrl: eds, ResourceNames: []string{"A"}})
	r = c.recv()
	eq(t, "eds", []string{"A"}, sotwNames(t, r))
	sotwAck(c, r, "A")
	c.send(&discovery.DiscoveryRequest{TypeUrl: rdsURL, ResourceNames: []string{"r"}})
	r = c.recv()
	eq(t, "rds type", rdsURL, r.TypeUrl)
	sotwAck(c, r, "r")
	h.waitWatches(1, cds, eds, rdsURL)
	return c
}

// TestRouteAfterNewClusterAssignmentSotw: a change adding cluster V, its
// assignment and a route to it reaches an Envoy-like sotw client as the
// protocol orders it: CDS, then (once the client asks for V's assignment)
// EDS, then RDS — not RDS while V warms (Envoy: 503 no_cluster).
func TestRouteAfterNewClusterAssignmentSotw(t *testing.T) {
	h := newHarness(t, true)
	c := envoySotwClient(t, h)
	h.apply(store.Change{TypeURL: cds, Upserts: []store.Resource{rcl("V", 0)}},
		store.Change{TypeURL: eds, Upserts: []store.Resource{rla("V", 0)}},
		store.Change{TypeURL: rdsURL, Upserts: []store.Resource{routeTo("A", "V")}})
	r := c.recv()
	eq(t, "first: the clusters", []string{"A", "V"}, sotwNames(t, r))
	c.none() // not the routes: V's assignment was not sent
	// As Envoy: ACKs CDS, then asks for V's assignment.
	sotwAck(c, r)
	c.send(&discovery.DiscoveryRequest{TypeUrl: eds, ResourceNames: []string{"A", "V"}})
	var order []string
	for len(order) < 2 {
		r := c.recv()
		order = append(order, shortTypeName(r.TypeUrl))
		if r.TypeUrl == eds {
			eq(t, "eds", []string{"V"}, sotwNames(t, r))
		}
	}
	eq(t, "V's assignment, then the routes", []string{"eds", "rds"}, order)
	st := h.cache.Stats()
	t.Logf("route holds %d, timeouts %d", st.RouteHolds, st.RouteHoldTimeouts)
	eq(t, "holds, timeouts", [2]uint64{1, 0}, [2]uint64{st.RouteHolds, st.RouteHoldTimeouts})
}

// TestRouteAfterNewClusterAssignmentDelta: the same on a delta stream.
func TestRouteAfterNewClusterAssignmentDelta(t *testing.T) {
	h := newHarness(t, true)
	h.apply(store.Change{TypeURL: cds, Upserts: []store.Resource{rcl("A", 0)}},
		store.Change{TypeURL: eds, Upserts: []store.Resource{rla("A", 0)}},
		store.Change{TypeURL: rdsURL, Upserts: []store.Resource{routeTo("A")}})
	c := h.delta("n")
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: cds})
	r := c.recv()
	eq(t, "cds", []string{"A"}, names(r))
	c.ack(r)
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: []string{"A"}})
	r = c.recv()
	eq(t, "eds", []string{"A"}, names(r))
	c.ack(r)
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: rdsURL, ResourceNamesSubscribe: []string{"r"}})
	r = c.recv()
	eq(t, "rds", []string{"r"}, names(r))
	c.ack(r)
	h.waitWatches(1, cds, eds, rdsURL)

	h.apply(store.Change{TypeURL: cds, Upserts: []store.Resource{rcl("V", 0)}},
		store.Change{TypeURL: eds, Upserts: []store.Resource{rla("V", 0)}},
		store.Change{TypeURL: rdsURL, Upserts: []store.Resource{routeTo("A", "V")}})
	r = c.recv()
	eq(t, "first: the cluster", []string{"V"}, names(r))
	eq(t, "its type", cds, r.TypeUrl)
	c.none()
	c.ack(r)
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: []string{"V"}})
	var order []string
	for len(order) < 2 {
		r := c.recv()
		order = append(order, shortTypeName(r.TypeUrl)+":"+names(r)[0])
	}
	eq(t, "V's assignment, then the routes", []string{"eds:V", "rds:r"}, order)
}

// TestRouteNotHeldForClustersLearnedFromRoutes: a grpc-go-like client
// (LDS, RDS, then CDS and EDS by name for the clusters its routes name)
// gets a route naming a new cluster at once: it asks for that cluster
// only once it has the route.
func TestRouteNotHeldForClustersLearnedFromRoutes(t *testing.T) {
	h := newHarness(t, true)
	h.apply(store.Change{TypeURL: cds, Upserts: []store.Resource{rcl("A", 0)}},
		store.Change{TypeURL: eds, Upserts: []store.Resource{rla("A", 0)}},
		store.Change{TypeURL: rdsURL, Upserts: []store.Resource{routeTo("A")}})
	c := h.sotw()
	c.send(&discovery.DiscoveryRequest{TypeUrl: rdsURL, ResourceNames: []string{"r"}})
	r := c.recv()
	sotwAck(c, r, "r")
	c.send(&discovery.DiscoveryRequest{TypeUrl: cds, ResourceNames: []string{"A"}})
	r = c.recv()
	eq(t, "cds", []string{"A"}, sotwNames(t, r))
	sotwAck(c, r, "A")
	c.send(&discovery.DiscoveryRequest{TypeUrl: eds, ResourceNames: []string{"A"}})
	r = c.recv()
	sotwAck(c, r, "A")
	h.waitWatches(1, cds, eds, rdsURL)

	start := time.Now()
	h.apply(store.Change{TypeURL: cds, Upserts: []store.Resource{rcl("V", 0)}},
		store.Change{TypeURL: eds, Upserts: []store.Resource{rla("V", 0)}},
		store.Change{TypeURL: rdsURL, Upserts: []store.Resource{routeTo("A", "V")}})
	r = c.recv()
	eq(t, "the routes, at once", rdsURL, r.TypeUrl)
	if d := time.Since(start); d > time.Second {
		t.Fatalf("routes after %v; want them without a hold", d)
	}
	c.none()
	if st := h.cache.Stats(); st.RouteHolds != 0 {
		t.Fatalf("%d route holds; want none", st.RouteHolds)
	}
}

// TestRouteHoldIsBounded: a client that never asks for the new cluster's
// assignment gets the routes once WithRouteHold's bound runs out, and the
// timeout is counted.
func TestRouteHoldIsBounded(t *testing.T) {
	h := newHarness(t, true, xds.WithRouteHold(300*time.Millisecond))
	c := envoySotwClient(t, h)
	start := time.Now()
	h.apply(store.Change{TypeURL: cds, Upserts: []store.Resource{rcl("V", 0)}},
		store.Change{TypeURL: eds, Upserts: []store.Resource{rla("V", 0)}},
		store.Change{TypeURL: rdsURL, Upserts: []store.Resource{routeTo("A", "V")}})
	r := c.recv()
	eq(t, "cds", cds, r.TypeUrl)
	sotwAck(c, r)
	r = c.recv()
	eq(t, "then the routes", rdsURL, r.TypeUrl)
	d := time.Since(start)
	t.Logf("routes after %v", d)
	if d < 300*time.Millisecond {
		t.Fatalf("routes after %v; want them held for 300ms", d)
	}
	st := h.cache.Stats()
	eq(t, "holds, timeouts", [2]uint64{1, 1}, [2]uint64{st.RouteHolds, st.RouteHoldTimeouts})
}
