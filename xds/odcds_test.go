package xds_test

import (
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/xdsbridge/xdsbridge/translate"
)

// On-demand CDS (Envoy's on_demand filter with odcds over delta ADS):
// Envoy subscribes to one cluster by name when a request needs it, with
// no wildcard subscription or alongside one, then to its assignment. A
// name the server does not have is answered at once in removed_resources
// (xDS protocol, delta: "if the server does not have the resource ... it
// should send a response with the resource's name in removed_resources"),
// or the request waits out Envoy's odcds timeout.

// TestOnDemandDeltaNamedClusters follows an Envoy with on-demand CDS
// only: named subscriptions, one at a time, as requests need them.
func TestOnDemandDeltaNamedClusters(t *testing.T) {
	h := newHarness(t, true)
	all, _ := services(20)
	h.publish(all)
	c := h.delta("odcds")

	// The first CDS request of the stream names one cluster: that one.
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: cds, ResourceNamesSubscribe: []string{"s07"}})
	r := c.recv()
	eq(t, "first on-demand cluster", []string{"s07"}, names(r))
	eq(t, "removed", 0, len(r.RemovedResources))
	c.ack(r)
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: []string{"s07"}})
	e := c.recv()
	eq(t, "its assignment", []string{"s07"}, names(e))
	c.ack(e)
	c.none()

	// An unknown name: removed at once, nothing else.
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: cds, ResourceNamesSubscribe: []string{"nosuch"}})
	r = c.recv()
	eq(t, "unknown: resources", 0, len(r.Resources))
	eq(t, "unknown: removed", []string{"nosuch"}, r.RemovedResources)
	c.ack(r)
	c.none()
	// Asked again (another request needing it): answered again.
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: cds, ResourceNamesSubscribe: []string{"nosuch"}})
	r = c.recv()
	eq(t, "unknown again: removed", []string{"nosuch"}, r.RemovedResources)
	eq(t, "unknown again: resources", 0, len(r.Resources))
	c.ack(r)

	// A second name, with the ACK of the last response in the same
	// request: only that one.
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: cds, ResponseNonce: r.Nonce, ResourceNamesSubscribe: []string{"s12"}})
	r = c.recv()
	eq(t, "second on-demand cluster", []string{"s12"}, names(r))
	eq(t, "second: removed", 0, len(r.RemovedResources))
	c.ack(r)
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: []string{"s12"}})
	e = c.recv()
	eq(t, "second assignment", []string{"s12"}, names(e))
	c.ack(e)
	c.none()

	// A change to a cluster not asked for is nothing to this client.
	h.publish([]translate.Resources{svc("s03", 2003)})
	c.none()
	// A change to one asked for reaches it (the assignment: the cluster
	// did not change).
	h.publish([]translate.Resources{svc("s07", 2007)})
	e = c.recv()
	eq(t, "changed assignment", eds, e.TypeUrl)
	eq(t, "changed assignment names", []string{"s07"}, names(e))
	c.ack(e)
	c.none()

	// The unknown name, still subscribed, appears: it is sent.
	h.publish([]translate.Resources{svc("nosuch", 2100)})
	r = c.recv()
	eq(t, "appeared", cds, r.TypeUrl)
	eq(t, "appeared names", []string{"nosuch"}, names(r))
	c.ack(r)

	// A cluster asked for goes away: removed from CDS (and its
	// assignment from EDS).
	h.publish(nil, "s12")
	got := map[string][]string{}
	for range 2 {
		r := c.recv()
		got[r.TypeUrl] = r.RemovedResources
		eq(t, "resources with the removal", 0, len(r.Resources))
		c.ack(r)
	}
	eq(t, "removals", map[string][]string{cds: {"s12"}, eds: {"s12"}}, got)
	c.none()
}

// TestOnDemandDeltaUnknownFirstName: a stream whose first CDS request names only
// clusters the server does not have is answered at once, each name
// removed; so is a mix of known and unknown names.
func TestOnDemandDeltaUnknownFirstName(t *testing.T) {
	h := newHarness(t, true)
	h.publish([]translate.Resources{svc("a", 1001)})
	c := h.delta("odcds")
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: cds, ResourceNamesSubscribe: []string{"x"}})
	r := c.recv()
	eq(t, "resources", 0, len(r.Resources))
	eq(t, "removed", []string{"x"}, r.RemovedResources)
	c.ack(r)
	c.none()

	c2 := h.delta("odcds-2")
	c2.send(&discovery.DeltaDiscoveryRequest{TypeUrl: cds, ResourceNamesSubscribe: []string{"a", "y", "z"}})
	r = c2.recv()
	eq(t, "known sent", []string{"a"}, names(r))
	eq(t, "unknown removed", []string{"y", "z"}, r.RemovedResources)
}

// TestOnDemandDeltaNamedAlongsideWildcard: an Envoy with wildcard CDS and the
// on-demand filter on the same ADS stream subscribes names on top of its
// wildcard: a known one it holds already is sent again (the protocol's
// answer to a subscription), an unknown one is removed at once. The
// explicit "*" form of the wildcard behaves alike.
func TestOnDemandDeltaNamedAlongsideWildcard(t *testing.T) {
	for _, first := range [][]string{nil, {"*"}} {
		h := newHarness(t, true)
		h.publish([]translate.Resources{svc("a", 1001), svc("b", 1002)})
		c := h.delta("wild-odcds")
		c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: cds, ResourceNamesSubscribe: first})
		r := c.recv()
		eq(t, "wildcard", []string{"a", "b"}, names(r))
		c.ack(r)
		c.none()

		c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: cds, ResourceNamesSubscribe: []string{"nosuch"}})
		r = c.recv()
		eq(t, "unknown under wildcard: resources", 0, len(r.Resources))
		eq(t, "unknown under wildcard: removed", []string{"nosuch"}, r.RemovedResources)
		c.ack(r)
		c.none()

		c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: cds, ResourceNamesSubscribe: []string{"a"}})
		r = c.recv()
		eq(t, "known under wildcard", []string{"a"}, names(r))
		eq(t, "known under wildcard: removed", 0, len(r.RemovedResources))
		c.ack(r)
		c.none()

		// The wildcard still brings new clusters.
		h.publish([]translate.Resources{svc("c", 1003)})
		eq(t, "new under wildcard", []string{"c"}, names(c.recv()))
	}
}

// TestOnDemandDeltaNamedBeforeReady: named subscriptions that arrive before the
// cache is ready are answered when it is, the unknown ones as removed.
func TestOnDemandDeltaNamedBeforeReady(t *testing.T) {
	h := newHarness(t, false)
	h.publish([]translate.Resources{svc("a", 1001)})
	c := h.delta("odcds")
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: cds, ResourceNamesSubscribe: []string{"a", "x"}})
	h.waitWatches(1, cds)
	c.none()
	h.cache.MarkReady()
	r := c.recv()
	eq(t, "sent when ready", []string{"a"}, names(r))
	eq(t, "removed when ready", []string{"x"}, r.RemovedResources)
}
