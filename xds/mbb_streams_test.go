package xds_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	routeservice "github.com/envoyproxy/go-control-plane/envoy/service/route/v3"

	statuspb "google.golang.org/genproto/googleapis/rpc/status"

	"github.com/xdsbridge/xdsbridge/xds"
	"github.com/xdsbridge/xdsbridge/xds/store"
)

// Envoy without ADS: CDS/EDS on one stream, RDS on its own
// RouteDiscoveryService stream. A route change adding cluster V goes to
// the RDS stream at once, without an interim (which would wait out the
// route hold there).
func TestMakeBeforeBreakRoutesOnlyStreamGetsNoInterim(t *testing.T) {
	h := newHarness(t, true, xds.WithMakeBeforeBreak(true, 50*time.Millisecond), xds.WithRouteHold(2*time.Second))
	h.apply(store.Change{TypeURL: cds, Upserts: []store.Resource{rcl("A", 0)}},
		store.Change{TypeURL: eds, Upserts: []store.Resource{rla("A", 0)}},
		store.Change{TypeURL: rdsURL, Upserts: []store.Resource{routeTo("A")}})
	c := clustersOnlyClient(t, h, "A")
	var r *discovery.DiscoveryResponse
	rs := routesOnlyStream(h)
	rs.send(&discovery.DiscoveryRequest{TypeUrl: rdsURL, ResourceNames: []string{"r"}})
	r = rs.recv()
	sotwAck(rs, r, "r")
	h.waitWatches(1, cds, eds, rdsURL)

	h.apply(store.Change{TypeURL: cds, Upserts: []store.Resource{rcl("V", 0)}},
		store.Change{TypeURL: eds, Upserts: []store.Resource{rla("V", 0)}},
		store.Change{TypeURL: rdsURL, Upserts: []store.Resource{routeTo("A", "V")}})
	r = c.recv() // CDS with V
	sotwAck(c, r)
	c.send(&discovery.DiscoveryRequest{TypeUrl: eds, ResourceNames: []string{"A", "V"}})
	r = c.recv()
	sotwAck(c, r, "A", "V")
	start := time.Now()
	got := rs.recv()
	d := time.Since(start)
	eq(t, "a routes-only stream gets the real routes, no interim", []string{"A,V"}, routeClusterNames(t, got))
	st := h.cache.Stats()
	if d > time.Second || st.Interims != 0 || st.RouteHoldTimeouts != 0 {
		t.Fatalf("routes after %v (interims %d, hold timeouts %d): a stream without clusters must not wait", d, st.Interims, st.RouteHoldTimeouts)
	}
}

// Envoy-like sotw ADS: route r → V. The bridge deletes r and V (listener
// gone); the client unsubscribes r (RDS request with no names).
func TestMakeBeforeBreakGraveAfterRouteUnsubscribed(t *testing.T) {
	h := newHarness(t, true)
	h.apply(store.Change{TypeURL: cds, Upserts: []store.Resource{rcl("A", 0), rcl("V", 0)}},
		store.Change{TypeURL: eds, Upserts: []store.Resource{rla("A", 0), rla("V", 0)}},
		store.Change{TypeURL: rdsURL, Upserts: []store.Resource{routeTo("V")}})
	c := clustersOnlyClient(t, h, "A", "V")
	var r *discovery.DiscoveryResponse
	c.send(&discovery.DiscoveryRequest{TypeUrl: rdsURL, ResourceNames: []string{"r"}})
	r = c.recv()
	sotwAck(c, r, "r")
	h.waitWatches(1, cds, eds, rdsURL)

	h.apply(store.Change{TypeURL: rdsURL, Deletes: []string{"r"}},
		store.Change{TypeURL: eds, Deletes: []string{"V"}},
		store.Change{TypeURL: cds, Deletes: []string{"V"}})
	// Envoy drops the listener, unsubscribes r and V's assignment.
	c.send(&discovery.DiscoveryRequest{TypeUrl: rdsURL, VersionInfo: r.VersionInfo, ResponseNonce: r.Nonce})
	c.send(&discovery.DiscoveryRequest{TypeUrl: eds, ResourceNames: []string{"A"}})
	deadline := time.After(3 * time.Second)
	for {
		got := make(chan *discovery.DiscoveryResponse, 1)
		go func() { got <- c.recv() }()
		select {
		case r = <-got:
			t.Logf("got %s %v", shortTypeName(r.TypeUrl), sotwNames(t, r))
			if r.TypeUrl == cds {
				names := sotwNames(t, r)
				if len(names) == 1 && names[0] == "A" {
					return
				}
				sotwAck(c, r)
			}
		case <-deadline:
			t.Fatalf("V, deleted from the bridge, still in the stream's CDS after 3s (the stream no longer subscribes any route)")
		}
	}
}

// After one interim was NACKed (and the real version ACKed), does a later
// change adding a cluster get an interim again?
func TestMakeBeforeBreakInterimAfterNackedInterim(t *testing.T) {
	h := newHarness(t, true, xds.WithMakeBeforeBreak(true, 20*time.Millisecond))
	c := grpcGoSotwClient(t, h)
	h.apply(store.Change{TypeURL: cds, Upserts: []store.Resource{rcl("W", 0)}},
		store.Change{TypeURL: eds, Upserts: []store.Resource{rla("W", 0)}},
		store.Change{TypeURL: rdsURL, Upserts: []store.Resource{routeTo("A", "W")}})
	im := c.recv()
	eq(t, "interim to W", []string{"A", "+W"}, routeClusterNames(t, im))
	c.send(&discovery.DiscoveryRequest{TypeUrl: rdsURL, VersionInfo: "x", ResponseNonce: im.Nonce,
		ResourceNames: []string{"r"}, ErrorDetail: &statuspb.Status{Message: "refused for the test"}})
	real := c.recv()
	eq(t, "real version after the NACK", []string{"A,W"}, routeClusterNames(t, real))
	sotwAck(c, real, "r")
	c.send(&discovery.DiscoveryRequest{TypeUrl: cds, ResourceNames: []string{"A", "W"}})
	r := c.recv()
	sotwAck(c, r, "A", "W")
	c.send(&discovery.DiscoveryRequest{TypeUrl: eds, ResourceNames: []string{"A", "W"}})
	r = c.recv()
	sotwAck(c, r, "A", "W")
	h.waitWatches(1, cds, eds, rdsURL)

	h.apply(store.Change{TypeURL: cds, Upserts: []store.Resource{rcl("X", 0)}},
		store.Change{TypeURL: eds, Upserts: []store.Resource{rla("X", 0)}},
		store.Change{TypeURL: rdsURL, Upserts: []store.Resource{routeTo("A", "W", "X")}})
	r = c.recv()
	eq(t, "a later change adding X: interim again", []string{"A,W", "+X"}, routeClusterNames(t, r))
}

// An Envoy-like delta client reconnects while the bridge is not ready
// (CDS wildcard, EDS A, RDS r). Route r names C, new to it. At
// MarkReady the routes are held for C's assignment; the client never
// asks for it (e.g. it rejected C). WithRouteHold should bound the hold.
func TestRouteHoldAtMarkReadyBounded(t *testing.T) {
	h := newHarness(t, false, xds.WithRouteHold(500*time.Millisecond))
	h.apply(store.Change{TypeURL: cds, Upserts: []store.Resource{rcl("A", 0), rcl("C", 0)}},
		store.Change{TypeURL: eds, Upserts: []store.Resource{rla("A", 0), rla("C", 0)}},
		store.Change{TypeURL: rdsURL, Upserts: []store.Resource{routeTo("A", "C")}})
	c := h.delta("n")
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: cds})
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: []string{"A"}})
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: rdsURL, ResourceNamesSubscribe: []string{"r"}})
	h.waitWatches(1, cds, eds, rdsURL)
	h.cache.MarkReady()
	start := time.Now()
	for i := 0; i < 3; i++ {
		r := c.recv() // fails the test after its own timeout
		ty := shortTypeName(r.TypeUrl)
		t.Logf("got %s after %v", ty, time.Since(start))
		if ty == "rds" {
			if d := time.Since(start); d > 2*time.Second {
				t.Fatalf("RDS %v after MarkReady (WithRouteHold 500ms)", d)
			}
			return
		}
	}
	st := h.cache.Stats()
	t.Fatalf("no RDS response after MarkReady (WithRouteHold 500ms); holds %d timeouts %d", st.RouteHolds, st.RouteHoldTimeouts)
}

// Non-ADS Envoy: routes V→A and V deleted. CDS stream drops V at once;
// the routes-only stream gets the real routes at once (no interim still
// naming V, no hold: it carries no clusters to order against).
func TestMakeBeforeBreakRoutesOnlyStreamClusterDeleted(t *testing.T) {
	h := newHarness(t, true)
	h.apply(store.Change{TypeURL: cds, Upserts: []store.Resource{rcl("A", 0), rcl("V", 0)}},
		store.Change{TypeURL: eds, Upserts: []store.Resource{rla("A", 0), rla("V", 0)}},
		store.Change{TypeURL: rdsURL, Upserts: []store.Resource{routeTo("V")}})
	c := clustersOnlyClient(t, h, "A", "V")
	var r *discovery.DiscoveryResponse
	rs := routesOnlyStream(h)
	rs.send(&discovery.DiscoveryRequest{TypeUrl: rdsURL, ResourceNames: []string{"r"}})
	r = rs.recv()
	sotwAck(rs, r, "r")
	h.waitWatches(1, cds, eds, rdsURL)

	h.apply(store.Change{TypeURL: rdsURL, Upserts: []store.Resource{routeTo("A")}},
		store.Change{TypeURL: eds, Deletes: []string{"V"}},
		store.Change{TypeURL: cds, Deletes: []string{"V"}})
	r = c.recv()
	goneAt := time.Now()
	eq(t, "CDS drops V at once", []string{"A"}, sotwNames(t, r))
	got := rs.recv()
	d := time.Since(goneAt)
	eq(t, "a routes-only stream gets the real routes, no interim naming V", []string{"A"}, routeClusterNames(t, got))
	if d > 500*time.Millisecond {
		t.Fatalf("routes naming V (deleted from CDS) stayed the client's newest for %v", d)
	}
}

// clustersOnlyClient is a sotw ADS client that has ACKed every cluster (CDS
// wildcard) and the assignments of names.
func clustersOnlyClient(t *testing.T, h *harness, names ...string) *sotwClient {
	t.Helper()
	c := h.sotw()
	c.send(&discovery.DiscoveryRequest{TypeUrl: cds})
	sotwAck(c, c.recv())
	c.send(&discovery.DiscoveryRequest{TypeUrl: eds, ResourceNames: names})
	sotwAck(c, c.recv(), names...)
	return c
}

// routesOnlyStream is a sotw client on a RouteDiscoveryService stream of its
// own (an Envoy without ADS).
func routesOnlyStream(h *harness) *sotwClient {
	return &sotwClient{openStream(h, func(ctx context.Context) (grpcStream[*discovery.DiscoveryRequest, *discovery.DiscoveryResponse], error) {
		return routeservice.NewRouteDiscoveryServiceClient(h.conn).StreamRoutes(ctx)
	}, func(r *discovery.DiscoveryResponse) string { return fmt.Sprintf("rds %s", r.VersionInfo) })}
}
