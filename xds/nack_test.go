package xds_test

import (
	"fmt"
	"maps"
	"math/bits"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"

	"github.com/xdsbridge/xdsbridge/translate"
	"github.com/xdsbridge/xdsbridge/xds"
)

// TestDeltaResubscribedDeletedNameIsRemoved: a client that re-subscribes a
// name it holds, after that resource was deleted, is told it is removed
// (it used to get nothing about it, ever).
func TestDeltaResubscribedDeletedNameIsRemoved(t *testing.T) {
	t.Run("named EDS", func(t *testing.T) {
		h := newHarness(t, true)
		h.publish([]translate.Resources{svc("a", 1001), svc("b", 1002), svc("c", 1003)})
		c := h.delta("n1")
		c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: []string{"a", "b"}})
		r := c.recv()
		eq(t, "first", []string{"a", "b"}, names(r))
		h.publish(nil, "a") // before the client's ACK
		c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResponseNonce: r.Nonce, ResourceNamesSubscribe: []string{"a", "c"}})
		r = c.recv()
		eq(t, "sent", []string{"c"}, names(r))
		eq(t, "removed", []string{"a"}, r.RemovedResources)
		c.ack(r)
		c.none()
	})
	t.Run("wildcard CDS re-listing held names", func(t *testing.T) {
		h := newHarness(t, true)
		h.publish([]translate.Resources{svc("a", 1001), svc("b", 1002)})
		c := h.delta("n1")
		c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: cds})
		r := c.recv()
		eq(t, "first", []string{"a", "b"}, names(r))
		h.publish(nil, "a")
		// On-demand CDS over the same stream names clusters the wildcard
		// already brought.
		c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: cds, ResponseNonce: r.Nonce, ResourceNamesSubscribe: []string{"a", "b"}})
		r = c.recv()
		eq(t, "resent (the protocol asks for re-subscribed names)", []string{"b"}, names(r))
		eq(t, "removed", []string{"a"}, r.RemovedResources)
	})
	t.Run("a first request naming a name that does not exist", func(t *testing.T) {
		h := newHarness(t, true)
		h.publish([]translate.Resources{svc("a", 1001)})
		c := h.delta("n1")
		c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: []string{"a", "nope"}})
		r := c.recv()
		eq(t, "sent", []string{"a"}, names(r))
		eq(t, "answered at once as removed", []string{"nope"}, r.RemovedResources)
	})
	t.Run("a subscribed name that does not exist", func(t *testing.T) {
		h := newHarness(t, true)
		h.publish([]translate.Resources{svc("a", 1001)})
		c := h.delta("n1")
		c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: cds, ResourceNamesSubscribe: []string{"a"}})
		c.ack(c.recv())
		c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: cds, ResourceNamesSubscribe: []string{"nope"}})
		r := c.recv()
		eq(t, "answered at once as removed", []string{"nope"}, r.RemovedResources)
	})
}

// TestReadyAnswersClustersFirst: clients held until the cache is ready
// get their clusters before their endpoints, whatever order they asked in
// (held watches were answered in map order: EDS before CDS about 1 start
// in 10).
func TestReadyAnswersClustersFirst(t *testing.T) {
	for i := range 20 {
		h := newHarness(t, false)
		h.publish([]translate.Resources{svc("a", 1001)})
		c := h.delta(fmt.Sprint("n", i))
		c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: []string{"a"}})
		c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: xds.ListenerType, ResourceNamesSubscribe: []string{"a"}})
		c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: cds})
		h.waitWatches(1, cds, eds, xds.ListenerType)
		h.cache.MarkReady()
		var order []string
		for range 3 {
			order = append(order, c.recv().TypeUrl)
		}
		eq(t, "order", []string{cds, eds, xds.ListenerType}, order)
	}
}

// poisonClient plays a client that rejects a whole response when it
// carries one resource at one version (as Envoy does with an assignment it
// cannot unpack), and counts what it is sent.
type poisonClient struct {
	name, version string
	held          map[string]string
	nacks         int
	sentAt        map[string]int // name@version → times sent
}

func (p *poisonClient) rejects(res map[string]string) bool {
	v, ok := res[p.name]
	return ok && v == p.version
}

// TestDeltaNACKIsolatesTheBadResource: one poison assignment among 40 in
// one response costs only itself: the client gets the other 39 after a few
// halving steps, the poison version is not sent again, and a good version
// of it goes through.
func TestDeltaNACKIsolatesTheBadResource(t *testing.T) {
	h := newHarness(t, true)
	all, subscribe := services(40)
	h.publish(all)
	cur := func() map[string]string { return current(h.cache, eds) }
	p := &poisonClient{name: "s17", version: cur()["s17"], held: map[string]string{}, sentAt: map[string]int{}}
	c := h.delta("n1")
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: subscribe})
	drain := func() {
		t.Helper()
		untilQuiet(t, c, func(r *discovery.DeltaDiscoveryResponse) {
			res := versions(r)
			for n, v := range res {
				p.sentAt[n+"@"+v]++
			}
			if p.rejects(res) {
				p.nacks++
				c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResponseNonce: r.Nonce, ErrorDetail: &status.Status{Code: 3, Message: "Unable to unpack"}})
				return
			}
			for n, v := range res {
				p.held[n] = v
			}
			for _, n := range r.RemovedResources {
				delete(p.held, n)
			}
			c.ack(r)
		})
	}
	drain()
	want := cur()
	delete(want, "s17")
	eq(t, "held: everything but the poison", want, p.held)
	if max := bits.Len(40) + 1; p.nacks > max {
		t.Fatalf("%d NACKs to isolate one resource among 40; want at most %d", p.nacks, max)
	}
	if n := p.sentAt["s17@"+p.version]; n != p.nacks {
		t.Fatalf("poison sent %d times, NACKed %d: sent again after it was isolated", n, p.nacks)
	}
	if h.srv.NACKs() != uint64(p.nacks) {
		t.Fatalf("server counted %d NACKs, client sent %d", h.srv.NACKs(), p.nacks)
	}
	t.Logf("isolated with %d NACKs", p.nacks)

	// A good version of the bad resource goes through; so does a later change
	// of the others.
	h.publish([]translate.Resources{svc("s17", 2017), svc("s03", 2003)})
	drain()
	eq(t, "held after the fix", cur(), p.held)
}

// TestSotwNACKIsolatesTheBadResource: the same with a sotw client of
// named assignments (Envoy rejects such a response whole).
func TestSotwNACKIsolatesTheBadResource(t *testing.T) {
	h := newHarness(t, true)
	all, subscribe := services(20)
	h.publish(all)
	cur := func() map[string]string { return current(h.cache, eds) }
	poison := "s05"
	pv := cur()[poison]
	held := map[string]string{} // what the responses after the NACKs sent
	nacks, poisonSent := 0, 0
	c := h.sotw()
	c.send(&discovery.DiscoveryRequest{TypeUrl: eds, ResourceNames: subscribe})
	version := ""
	drain := func() {
		t.Helper()
		for {
			var r *discovery.DiscoveryResponse
			select {
			case r = <-c.resp:
			case <-timeAfter():
				return
			}
			got := map[string]string{}
			for _, n := range sotwNames(t, r) {
				got[n] = cur()[n] // content is current: the cache sends only current versions
			}
			if _, ok := got[poison]; ok && cur()[poison] == pv {
				nacks++
				poisonSent++
				c.send(&discovery.DiscoveryRequest{TypeUrl: eds, ResourceNames: subscribe, VersionInfo: version, ResponseNonce: r.Nonce,
					ErrorDetail: &status.Status{Code: 3, Message: "Unable to unpack"}})
				continue
			}
			for n, v := range got {
				held[n] = v
			}
			version = r.VersionInfo
			c.send(&discovery.DiscoveryRequest{TypeUrl: eds, ResourceNames: subscribe, VersionInfo: version, ResponseNonce: r.Nonce})
		}
	}
	drain()
	want := cur()
	delete(want, poison)
	eq(t, "held: everything but the poison", want, held)
	if max := bits.Len(20) + 1; nacks > max {
		t.Fatalf("%d NACKs to isolate one resource among 20; want at most %d", nacks, max)
	}
	h.publish([]translate.Resources{svc(poison, 2005)})
	drain()
	eq(t, "held after the fix", cur(), held)
}

// timeAfter is how long a drain waits for one more response.
func timeAfter() <-chan time.Time { return time.After(300 * time.Millisecond) }

// TestDeltaNACKOfAVersionThatCameBack: a resource rejected alone is not
// sent again when, between the response and its NACK, it changed and came
// back to the version rejected (its endpoints, or its cluster, went A → B
// → A): it is the same content, which the client would reject again. A
// new version still goes through.
func TestDeltaNACKOfAVersionThatCameBack(t *testing.T) {
	h := newHarness(t, true)
	h.publish([]translate.Resources{svc("a", 1001)})
	c := h.delta("n1")
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: []string{"a"}})
	r := c.recv()
	poison := versions(r)["a"]
	h.publish([]translate.Resources{svc("a", 2001)})
	h.publish([]translate.Resources{svc("a", 1001)})
	if v := current(h.cache, eds)["a"]; v != poison {
		t.Fatalf("version after coming back: %s, want the one sent, %s", v, poison)
	}
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResponseNonce: r.Nonce, ErrorDetail: &status.Status{Code: 3, Message: "Unable to unpack"}})
	r = c.recv() // the answer that installs the state recording the rejection
	eq(t, "sent after the NACK", []string(nil), names(r))
	c.ack(r)
	c.none()

	h.publish([]translate.Resources{svc("a", 3001)})
	r = c.recv()
	eq(t, "a new version", []string{"a"}, names(r))
	if versions(r)["a"] == poison {
		t.Fatalf("a new version was published, the rejected one %s sent", poison)
	}
}

// TestDeltaNACKLeavesToALaterResponseWhatItCarriesAgain: a NACK gives back
// what the rejected response carried, but for the names a response sent
// after it, not answered yet, carries again: that response's answer tells
// whether the client holds them. Here a client that re-subscribes to an
// assignment gets it again while the response carrying its rejected
// version is unanswered, and rejects both (as a client answers pipelined
// responses, in order): the poison is sent twice, once per response that
// carried it, not a third time by the first NACK's halving, and the other
// assignment of the first response is sent again.
func TestDeltaNACKLeavesToALaterResponseWhatItCarriesAgain(t *testing.T) {
	h := newHarness(t, true)
	h.publish([]translate.Resources{svc("b", 1001), svc("c", 1002)})
	c := h.delta("n1")
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: []string{"b", "c"}})
	r := c.recv()
	eq(t, "first", []string{"b", "c"}, names(r))
	c.ack(r)
	h.waitWatches(1, eds)

	h.publish([]translate.Resources{svc("b", 2001), svc("c", 2002)})
	r2 := c.recv()
	eq(t, "the change", []string{"b", "c"}, names(r2))
	poison := versions(r2)["b"]
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: []string{"b"}})
	r3 := c.recv()
	eq(t, "the re-subscription's answer", map[string]string{"b": poison}, versions(r3))

	nack := func(r *discovery.DeltaDiscoveryResponse) {
		c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResponseNonce: r.Nonce, ErrorDetail: &status.Status{Code: 3, Message: "Unable to unpack"}})
	}
	nack(r2)
	nack(r3)
	held := map[string]string{} // what the responses after the NACKs sent
	ackUntilQuiet(t, c, held, "b", poison)
	eq(t, "sent again: the other assignment, not the poison", map[string]string{"c": versions(r2)["c"]}, held)
}

// TestDeltaNACKChainOfPipelinedResponses: three pipelined responses carry
// the poison, each later one re-carrying names of the earlier; every one
// is rejected. The good assignments still end up held at their current
// versions, and the poison is not sent again once the responses that
// carried it were rejected.
func TestDeltaNACKChainOfPipelinedResponses(t *testing.T) {
	h := newHarness(t, true)
	h.publish([]translate.Resources{svc("b", 1001), svc("c", 1002), svc("d", 1003)})
	c := h.delta("n1")
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: []string{"b", "c", "d"}})
	r := c.recv()
	held := versions(r)
	c.ack(r)
	h.waitWatches(1, eds)

	h.publish([]translate.Resources{svc("b", 2001), svc("c", 2002), svc("d", 2003)})
	r2 := c.recv()
	eq(t, "the change", []string{"b", "c", "d"}, names(r2))
	want := versions(r2)
	poison := want["c"]
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: []string{"b", "c"}})
	r3 := c.recv()
	eq(t, "r3", []string{"b", "c"}, names(r3))
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: []string{"c"}})
	r4 := c.recv()
	eq(t, "r4", []string{"c"}, names(r4))

	for _, r := range []*discovery.DeltaDiscoveryResponse{r2, r3, r4} {
		c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResponseNonce: r.Nonce, ErrorDetail: &status.Status{Code: 3, Message: "bad"}})
	}
	ackUntilQuiet(t, c, held, "c", poison)
	delete(want, "c")
	delete(held, "c")
	eq(t, "held at the end", want, held)
}

// ackUntilQuiet ACKs each response c receives until none comes for a
// while, adding what it sent to held; one that sends name at version
// poison, after the responses that carried it were rejected, fails the
// test.
func ackUntilQuiet(t *testing.T, c *deltaClient, held map[string]string, name, poison string) {
	t.Helper()
	untilQuiet(t, c, func(r *discovery.DeltaDiscoveryResponse) {
		res := versions(r)
		if res[name] == poison {
			t.Fatalf("poison %s sent again, in %v, after the responses that carried it were rejected", name, names(r))
		}
		maps.Copy(held, res)
		c.ack(r)
	})
}

// untilQuiet hands fn each response c receives, until none comes for a
// while (timeAfter); the stream ending fails the test.
func untilQuiet(t *testing.T, c *deltaClient, fn func(r *discovery.DeltaDiscoveryResponse)) {
	t.Helper()
	for {
		select {
		case r := <-c.resp:
			fn(r)
		case <-c.ended:
			t.Fatalf("stream ended: %v", c.err)
		case <-timeAfter():
			return
		}
	}
}
