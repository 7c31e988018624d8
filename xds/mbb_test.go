package xds_test

import (
	"testing"
	"time"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"

	"github.com/xdsbridge/xdsbridge/translate"
	"github.com/xdsbridge/xdsbridge/xds"
	"github.com/xdsbridge/xdsbridge/xds/store"
)

// routeClusterNames decodes a sotw RDS response's one RouteConfiguration into, per
// route of its virtual host, the clusters it names ("+" marks the route
// that never matches).
func routeClusterNames(t *testing.T, r *discovery.DiscoveryResponse) []string {
	t.Helper()
	if r.TypeUrl != rdsURL || len(r.Resources) != 1 {
		t.Fatalf("want one RouteConfiguration; got type %s, %d resources", r.TypeUrl, len(r.Resources))
	}
	var rc route.RouteConfiguration
	if err := r.Resources[0].UnmarshalTo(&rc); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, rt := range rc.GetVirtualHosts()[0].GetRoutes() {
		s := ""
		if rt.GetName() == translate.MakeBeforeBreakRouteName {
			s = "+"
		}
		if c := rt.GetRoute().GetCluster(); c != "" {
			s += c
		}
		for i, wc := range rt.GetRoute().GetWeightedClusters().GetClusters() {
			if i > 0 {
				s += ","
			}
			s += wc.GetName()
		}
		out = append(out, s)
	}
	return out
}

// grpcGoSotwClient sets up a grpc-go-like sotw client (RDS, then CDS and EDS by
// name) holding route r → A, cluster A and its assignment.
func grpcGoSotwClient(t *testing.T, h *harness) *sotwClient {
	h.apply(store.Change{TypeURL: cds, Upserts: []store.Resource{rcl("A", 0)}},
		store.Change{TypeURL: eds, Upserts: []store.Resource{rla("A", 0)}},
		store.Change{TypeURL: rdsURL, Upserts: []store.Resource{routeTo("A")}})
	c := h.sotw()
	c.send(&discovery.DiscoveryRequest{TypeUrl: rdsURL, ResourceNames: []string{"r"}})
	r := c.recv()
	eq(t, "first routes: the real version", []string{"A"}, routeClusterNames(t, r))
	sotwAck(c, r, "r")
	c.send(&discovery.DiscoveryRequest{TypeUrl: cds, ResourceNames: []string{"A"}})
	r = c.recv()
	sotwAck(c, r, "A")
	c.send(&discovery.DiscoveryRequest{TypeUrl: eds, ResourceNames: []string{"A"}})
	r = c.recv()
	sotwAck(c, r, "A")
	h.waitWatches(1, cds, eds, rdsURL)
	return c
}

// TestMakeBeforeBreakInterimRoute: a route change that adds clusters V
// (and, next, W) reaches a sotw client in two steps: first the version it
// ACKed plus a never-matching route to the added clusters (its own
// version), then, on the ACK of that, the real version. A client that
// NACKs the interim gets the real version. A change naming no new
// cluster goes at once.
func TestMakeBeforeBreakInterimRoute(t *testing.T) {
	const settle = 200 * time.Millisecond
	h := newHarness(t, true, xds.WithMakeBeforeBreak(true, settle))
	c := grpcGoSotwClient(t, h)

	h.apply(store.Change{TypeURL: cds, Upserts: []store.Resource{rcl("V", 0)}},
		store.Change{TypeURL: eds, Upserts: []store.Resource{rla("V", 0)}},
		store.Change{TypeURL: rdsURL, Upserts: []store.Resource{routeTo("A", "V")}})
	im := c.recv()
	eq(t, "interim: the ACKed routes plus one to V", []string{"A", "+V"}, routeClusterNames(t, im))
	c.none() // the real version waits for the interim's ACK
	sotwAck(c, im, "r")
	c.none() // and for the client to ask for V
	// As grpc-go: the interim names V, so it asks for V's cluster, then
	// for its assignment.
	c.send(&discovery.DiscoveryRequest{TypeUrl: cds, ResourceNames: []string{"A", "V"}})
	r := c.recv()
	eq(t, "V's cluster", []string{"A", "V"}, sotwNames(t, r))
	sotwAck(c, r, "A", "V")
	c.send(&discovery.DiscoveryRequest{TypeUrl: eds, ResourceNames: []string{"A", "V"}})
	r = c.recv()
	eq(t, "V's assignment", []string{"V"}, sotwNames(t, r))
	sentEDS := time.Now()
	sotwAck(c, r, "A", "V")
	real := c.recv()
	d := time.Since(sentEDS)
	eq(t, "then the real version", []string{"A,V"}, routeClusterNames(t, real))
	t.Logf("real version %v after V's assignment", d)
	if d < settle-20*time.Millisecond {
		t.Fatalf("real version %v after V's assignment; want the settle time %v", d, settle)
	}
	if real.VersionInfo == im.VersionInfo {
		t.Fatalf("interim and real versions share version_info %q", im.VersionInfo)
	}
	sotwAck(c, real, "r")

	// The interim NACKed: the real version follows.
	h.apply(store.Change{TypeURL: cds, Upserts: []store.Resource{rcl("W", 0)}},
		store.Change{TypeURL: eds, Upserts: []store.Resource{rla("W", 0)}},
		store.Change{TypeURL: rdsURL, Upserts: []store.Resource{routeTo("A", "W")}})
	im = c.recv()
	eq(t, "interim to W", []string{"A,V", "+W"}, routeClusterNames(t, im))
	c.send(&discovery.DiscoveryRequest{TypeUrl: rdsURL, VersionInfo: real.VersionInfo, ResponseNonce: im.Nonce,
		ResourceNames: []string{"r"}, ErrorDetail: &statuspb.Status{Message: "refused for the test"}})
	real = c.recv()
	eq(t, "real version after the NACK", []string{"A,W"}, routeClusterNames(t, real))
	sotwAck(c, real, "r")

	// Fewer clusters: no interim.
	h.apply(store.Change{TypeURL: rdsURL, Upserts: []store.Resource{routeTo("W")}})
	eq(t, "a change adding no cluster", []string{"W"}, routeClusterNames(t, c.recv()))
	c.none()
	st := h.cache.Stats()
	t.Logf("interims %d, route holds %d, timeouts %d", st.Interims, st.RouteHolds, st.RouteHoldTimeouts)
	eq(t, "interims, timeouts", [2]uint64{2, 0}, [2]uint64{st.Interims, st.RouteHoldTimeouts})
}

// TestMakeBeforeBreakAfterAssignments: on an Envoy-like sotw stream
// (wildcard CDS) both rules hold: the cluster, its assignment, the
// interim routes, then (on their ACK) the real ones.
func TestMakeBeforeBreakAfterAssignments(t *testing.T) {
	h := newHarness(t, true)
	c := envoySotwClient(t, h)
	h.apply(store.Change{TypeURL: cds, Upserts: []store.Resource{rcl("V", 0)}},
		store.Change{TypeURL: eds, Upserts: []store.Resource{rla("V", 0)}},
		store.Change{TypeURL: rdsURL, Upserts: []store.Resource{routeTo("A", "V")}})
	r := c.recv()
	eq(t, "clusters", cds, r.TypeUrl)
	sotwAck(c, r)
	c.send(&discovery.DiscoveryRequest{TypeUrl: eds, ResourceNames: []string{"A", "V"}})
	r = c.recv()
	eq(t, "V's assignment", []string{"V"}, sotwNames(t, r))
	sotwAck(c, r, "A", "V")
	r = c.recv()
	eq(t, "interim", []string{"A", "+V"}, routeClusterNames(t, r))
	sotwAck(c, r, "r")
	eq(t, "real", []string{"A,V"}, routeClusterNames(t, c.recv()))
	if st := h.cache.Stats(); st.RouteHoldTimeouts != 0 {
		t.Fatalf("%d route hold timeouts; want none", st.RouteHoldTimeouts)
	}
}

// TestMakeBeforeBreakKeepsRoutedCluster: a change whose routes stop
// naming cluster V and that deletes V reaches a sotw client routes first:
// V stays in its CDS until it answers the routes that no longer name it.
func TestMakeBeforeBreakKeepsRoutedCluster(t *testing.T) {
	h := newHarness(t, true)
	h.apply(store.Change{TypeURL: cds, Upserts: []store.Resource{rcl("A", 0), rcl("V", 0)}},
		store.Change{TypeURL: eds, Upserts: []store.Resource{rla("A", 0), rla("V", 0)}},
		store.Change{TypeURL: rdsURL, Upserts: []store.Resource{routeTo("V")}})
	c := h.sotw()
	c.send(&discovery.DiscoveryRequest{TypeUrl: rdsURL, ResourceNames: []string{"r"}})
	r := c.recv()
	eq(t, "routes", []string{"V"}, routeClusterNames(t, r))
	sotwAck(c, r, "r")
	c.send(&discovery.DiscoveryRequest{TypeUrl: cds, ResourceNames: []string{"A", "V"}})
	r = c.recv()
	eq(t, "cds", []string{"A", "V"}, sotwNames(t, r))
	sotwAck(c, r, "A", "V")
	c.send(&discovery.DiscoveryRequest{TypeUrl: eds, ResourceNames: []string{"A", "V"}})
	r = c.recv()
	sotwAck(c, r, "A", "V")
	h.waitWatches(1, cds, eds, rdsURL)

	// As PublishServices orders it: routes first, then the deletions.
	h.apply(store.Change{TypeURL: rdsURL, Upserts: []store.Resource{routeTo("A")}},
		store.Change{TypeURL: eds, Deletes: []string{"V"}},
		store.Change{TypeURL: cds, Deletes: []string{"V"}})
	im := c.recv()
	eq(t, "interim: V's route plus one to A", []string{"V", "+A"}, routeClusterNames(t, im))
	c.none() // V stays: the client holds routes naming it
	sotwAck(c, im, "r")
	real := c.recv()
	eq(t, "the real routes (A is held already)", []string{"A"}, routeClusterNames(t, real))
	c.none()
	sotwAck(c, real, "r")
	r = c.recv()
	eq(t, "then V goes", []string{"A"}, sotwNames(t, r))
	eq(t, "in a CDS response", cds, r.TypeUrl)
}
