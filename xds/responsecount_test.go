package xds_test

import (
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/xdsbridge/xdsbridge/translate"
)

// TestDeltaResponseCountTakesNoServerLock: a delta stream counts the
// responses it sends (the client's Responses, the push counters) without
// the server's lock, which the status page holds while it reads every
// client, and the count is exact, as is a sotw stream's.
func TestDeltaResponseCountTakesNoServerLock(t *testing.T) {
	h := newHarness(t, true)
	h.publish([]translate.Resources{svc("a", 1001)})
	c := h.delta("n1")
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: cds})
	c.ack(c.recv())
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: []string{"a"}})
	c.ack(c.recv())
	h.waitWatches(1, eds)

	unlock := h.srv.LockClients()
	locked := true
	defer func() {
		if locked {
			unlock()
		}
	}()
	h.publish([]translate.Resources{svc("a", 1001, 1002)})
	r := c.recv() // sent while the server's lock is held
	locked = false
	unlock()
	eq(t, "EDS a after change", []string{"a"}, names(r))
	c.ack(r)
	h.waitWatches(1, eds)

	// A sotw stream's, which the server counts.
	sc := h.sotw()
	sc.send(&discovery.DiscoveryRequest{TypeUrl: cds})
	sc.recv()

	got := map[string]uint64{}
	for _, cs := range h.srv.ClientStatuses() {
		got[cs.Mode] += cs.Responses
	}
	eq(t, "responses counted", map[string]uint64{"delta": 3, "sotw": 1}, got)
}
