package xds_test

import (
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"

	"github.com/xdsbridge/xdsbridge/translate"
)

// TestDeltaACKRearmsWatch: an ACK re-arms its stream's watch
// (Cache.rearmDelta); the watch answers as a new one would, and a request
// that carries more than an ACK's nonce (a subscription, an
// unsubscription, an error) is answered for what it carries.
func TestDeltaACKRearmsWatch(t *testing.T) {
	start := func(t *testing.T, subscribe ...string) (*harness, *deltaClient, *discovery.DeltaDiscoveryResponse) {
		h := newHarness(t, true)
		h.publish([]translate.Resources{svc("a", 1001), svc("b", 1002), svc("c", 1003)})
		c := h.delta("n1")
		c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: subscribe})
		r := c.recv()
		eq(t, "first", subscribe, names(r))
		return h, c, r
	}
	t.Run("changes after each ACK", func(t *testing.T) {
		h, c, r := start(t, "a", "b")
		for i, name := range []string{"a", "b", "a"} {
			c.ack(r)
			h.waitWatches(1, eds)
			h.publish([]translate.Resources{svc(name, 2000+uint32(i))})
			r = c.recv()
			eq(t, "changed", []string{name}, names(r))
		}
		c.ack(r)
		c.none()
	})
	t.Run("a change published between the response and its ACK", func(t *testing.T) {
		h, c, r := start(t, "a", "b")
		h.publish([]translate.Resources{svc("a", 2001)}, "b")
		c.ack(r)
		r = c.recv()
		eq(t, "changed", []string{"a"}, names(r))
		eq(t, "removed", []string{"b"}, r.RemovedResources)
		c.ack(r)
		c.none()
	})
	t.Run("the nonce with a subscription", func(t *testing.T) {
		_, c, r := start(t, "a")
		c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResponseNonce: r.Nonce, ResourceNamesSubscribe: []string{"c"}})
		r = c.recv()
		eq(t, "subscribed", []string{"c"}, names(r))
		c.ack(r)
		c.none()
	})
	t.Run("the nonce with an unsubscription", func(t *testing.T) {
		h, c, r := start(t, "a", "b")
		c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResponseNonce: r.Nonce, ResourceNamesUnsubscribe: []string{"b"}})
		h.waitWatches(1, eds)
		h.publish([]translate.Resources{svc("a", 2001), svc("b", 2002)})
		r = c.recv()
		eq(t, "changed, of the names still subscribed", []string{"a"}, names(r))
		c.ack(r)
		c.none()
	})
	t.Run("a NACK", func(t *testing.T) {
		_, c, r := start(t, "a", "b")
		c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResponseNonce: r.Nonce, ErrorDetail: &status.Status{Message: "bad"}})
		r = c.recv()
		eq(t, "the first half again", []string{"a"}, names(r))
		c.ack(r)
		r = c.recv()
		eq(t, "the second half", []string{"b"}, names(r))
		c.ack(r)
		c.none()
	})
}
