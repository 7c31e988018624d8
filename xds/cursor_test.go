package xds_test

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/xdsbridge/xdsbridge/translate"
)

// held is what a delta client holds of one type: name → version.
type held map[string]string

// apply applies response r to state and ACKs it.
func (c *deltaClient) apply(state map[string]held, r *discovery.DeltaDiscoveryResponse) {
	h := state[r.TypeUrl]
	for _, res := range r.Resources {
		h[res.Name] = res.Version
	}
	for _, n := range r.RemovedResources {
		delete(h, n)
	}
	c.ack(r)
}

// drain applies and ACKs every response until none comes for a while.
func (c *deltaClient) drain(state map[string]held) {
	c.t.Helper()
	for {
		select {
		case r := <-c.resp:
			c.apply(state, r)
		case <-time.After(300 * time.Millisecond):
			return
		}
	}
}

// applyUntilRemoved applies and ACKs every response until one reports
// name removed.
func (c *deltaClient) applyUntilRemoved(state map[string]held, name string) {
	c.t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case r := <-c.resp:
			c.apply(state, r)
			if slices.Contains(r.RemovedResources, name) {
				return
			}
		case <-deadline:
			c.t.Fatalf("no response reported %s removed", name)
		}
	}
}

func rangeNames(prefix string, from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("%s%03d", prefix, i))
	}
	return out
}

func svcs(names []string, port uint32) []translate.Resources {
	var out []translate.Resources
	for _, n := range names {
		out = append(out, svc(n, port))
	}
	return out
}

// TestDeltaManyNamesAcrossRemovalAndReAdd: a delta client subscribing to
// many assignments at once (the server finds them in order among the
// type's sorted names), some absent, some removed and added again between
// its requests, some unsubscribed, and a wildcard subscription to the
// clusters, holds exactly what is served of what it subscribes to after
// each step, at the served versions.
func TestDeltaManyNamesAcrossRemovalAndReAdd(t *testing.T) {
	h := newHarness(t, true)
	h.publish(svcs(rangeNames("s", 0, 120), 1000))
	c := h.delta("n1")
	state := map[string]held{cds: {}, eds: {}}
	subscribed := map[string]bool{}
	check := func(what string) {
		t.Helper()
		c.drain(state)
		wantCDS, wantEDS := held{}, held{}
		for _, e := range h.cache.List(cds) {
			wantCDS[e.Name] = e.Version
		}
		for _, e := range h.cache.List(eds) {
			if subscribed[e.Name] {
				wantEDS[e.Name] = e.Version
			}
		}
		eq(t, what+": clusters", wantCDS, state[cds])
		eq(t, what+": assignments", wantEDS, state[eds])
	}
	subscribe := func(subs, unsubs []string) {
		for _, n := range subs {
			subscribed[n] = true
		}
		for _, n := range unsubs {
			delete(subscribed, n)
			delete(state[eds], n) // the client drops what it unsubscribes
		}
		c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: subs, ResourceNamesUnsubscribe: unsubs})
	}

	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: cds})
	subscribe(slices.Concat(rangeNames("s", 0, 70), rangeNames("x", 0, 10)), nil)
	check("first requests")

	h.publish(nil, rangeNames("s", 10, 50)...)
	h.publish(svcs(slices.Concat(rangeNames("s", 20, 30), rangeNames("s", 200, 240)), 2000))
	check("after removing 40 and adding 10 of them again and 40 new")

	subscribe(slices.Concat(rangeNames("s", 30, 50), rangeNames("s", 195, 240)), nil)
	check("after subscribing to removed, absent and new names")

	// With the unsubscription, a name that does not exist: the server
	// reports it removed once it has read the request, and only then is
	// the change made (made before, it was rightly sent to the client,
	// still subscribed as far as the server knew).
	subscribe([]string{"x100"}, rangeNames("s", 0, 40))
	c.applyUntilRemoved(state, "x100")
	h.publish(svcs(slices.Concat(rangeNames("s", 0, 10), rangeNames("s", 50, 90)), 3000))
	check("after unsubscribing and changing subscribed and unsubscribed names")
	if got := slices.Sorted(maps.Keys(state[eds])); len(got) == 0 || got[0] != "s050" {
		t.Fatalf("assignments held: %v", got)
	}
}
