package xds

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/xdsbridge/xdsbridge/xds/store"
)

// TestDeltaWildcardAfterUnsubscribeWithResponseOnItsWay: a delta client
// subscribed to assignment "a" by name unsubscribes it and subscribes to
// the wildcard while a response carrying "a" is not answered: if it
// arrives after the wildcard subscription the client keeps "a"; if it
// arrived before the unsubscription (a client need not answer a response
// before its next request) the client dropped "a". The answer to the
// wildcard subscription reports "a" removed if it was deleted since,
// sends it if it is current (the client may not hold it), does not report
// it removed again if a later response on its way did, and sends it if
// the client had answered the response (it then dropped "a" on the
// unsubscription), or, deleted after the unsubscription, does not report
// it removed, also when a later request names an older response.
func TestDeltaWildcardAfterUnsubscribeWithResponseOnItsWay(t *testing.T) {
	for _, tc := range []struct {
		name string
		// between: after "a" changed (the response carrying it on its
		// way), before the unsubscription.
		between func(t *testing.T, c *Cache, h *deltaHandler)
		// unsubscribed: after the unsubscription, before "*" (nil:
		// nothing).
		unsubscribed func(t *testing.T, c *Cache)
		sent, rm     []string // what the answer to "*" carries
	}{
		{name: "deleted", between: func(t *testing.T, c *Cache, _ *deltaHandler) {
			deleteAssignment(t, c, "a")
		}, rm: []string{"a"}},
		{name: "current", between: func(*testing.T, *Cache, *deltaHandler) {}, sent: []string{"a"}},
		{name: "removed-on-its-way", between: func(t *testing.T, c *Cache, h *deltaHandler) {
			deleteAssignment(t, c, "a")
			h.send(&discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResourceNamesUnsubscribe: []string{"b"}})
			if r := h.sent(3)[2]; !slices.Equal(r.GetRemovedResources(), []string{"a"}) {
				t.Fatalf("response #3 removed %v, want [a]", r.GetRemovedResources())
			}
		}, sent: []string{"b"}},
		{name: "answered", between: func(_ *testing.T, _ *Cache, h *deltaHandler) {
			h.send(&discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResponseNonce: "2"})
		}, sent: []string{"a"}},
		{name: "answered-deleted", between: func(_ *testing.T, _ *Cache, h *deltaHandler) {
			h.send(&discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResponseNonce: "2"})
		}, unsubscribed: func(t *testing.T, c *Cache) {
			deleteAssignment(t, c, "a")
		}},
		{name: "answered-then-an-older-nonce-deleted", between: func(_ *testing.T, _ *Cache, h *deltaHandler) {
			// A late request naming an older response does not make
			// the one answered since be on its way again.
			h.send(&discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResponseNonce: "2"})
			h.send(&discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResponseNonce: "1"})
		}, unsubscribed: func(t *testing.T, c *Cache) {
			deleteAssignment(t, c, "a")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewCache(WithTypes(EndpointType))
			c.MarkReady()
			setAssignment(t, c, "a", 1)
			setAssignment(t, c, "b", 1)
			h := startDeltaHandler(t, c)
			h.send(&discovery.DeltaDiscoveryRequest{Node: &core.Node{Id: "n1"}, TypeUrl: EndpointType, ResourceNamesSubscribe: []string{"a", "b"}})
			h.sent(1)
			h.send(&discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResponseNonce: "1"})
			setAssignment(t, c, "a", 2)
			if r := h.sent(2)[1]; len(r.GetResources()) != 1 || r.GetResources()[0].GetName() != "a" {
				t.Fatalf("response #2 carried %v, want a", r.GetResources())
			}
			tc.between(t, c, h)
			before := len(h.sent(0))
			unsub := &discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResourceNamesUnsubscribe: []string{"a"}}
			if tc.unsubscribed != nil {
				// Also "c", which does not exist: the answer (c
				// removed) tells that the unsubscription was handled.
				unsub.ResourceNamesSubscribe = []string{"c"}
				h.send(unsub)
				before = len(h.sent(before + 1))
				tc.unsubscribed(t, c)
			} else {
				h.send(unsub)
			}
			h.send(&discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResourceNamesSubscribe: []string{"*"}})
			got := h.sent(before + 1)
			var sent, rm []string
			for _, r := range got[before:] {
				for _, res := range r.GetResources() {
					sent = append(sent, res.GetName())
				}
				rm = append(rm, r.GetRemovedResources()...)
			}
			slices.Sort(sent)
			if !slices.Equal(sent, tc.sent) {
				t.Errorf("the answer to * sent %v, want %v", sent, tc.sent)
			}
			if !slices.Equal(rm, tc.rm) {
				t.Errorf("the answer to * removed %v, want %v", rm, tc.rm)
			}
		})
	}
}

// deltaHandler is a delta stream handler serving a cache to a client that
// answers nothing unless told to.
type deltaHandler struct {
	t   *testing.T
	str *fakeDeltaStream
}

func startDeltaHandler(t *testing.T, c *Cache) *deltaHandler {
	ctx, cancel := context.WithCancel(context.Background())
	s := newDeltaServer(ctx, c, nil)
	str := &fakeDeltaStream{ctx: ctx, reqs: make(chan *discovery.DeltaDiscoveryRequest)}
	done := make(chan error, 1)
	go func() { done <- s.DeltaStreamHandler(str, "") }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return &deltaHandler{t: t, str: str}
}

// send hands the handler a request; it has handled the one before.
func (h *deltaHandler) send(r *discovery.DeltaDiscoveryRequest) {
	h.t.Helper()
	select {
	case h.str.reqs <- r:
	case <-time.After(5 * time.Second):
		h.t.Fatal("request not taken")
	}
}

// sent waits for n responses and returns those sent.
func (h *deltaHandler) sent(n int) []*discovery.DeltaDiscoveryResponse {
	h.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		h.str.mu.Lock()
		got := slices.Clone(h.str.sent)
		h.str.mu.Unlock()
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("%d responses sent, waiting for %d", len(got), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// setAssignment commits assignment name of cluster name "name-v".
func setAssignment(t *testing.T, c *Cache, name string, v int) {
	t.Helper()
	if err := c.Apply(store.Change{TypeURL: EndpointType, Upserts: []store.Resource{{Name: name, Msg: &endpoint.ClusterLoadAssignment{ClusterName: name + "-" + strconv.Itoa(v)}}}}); err != nil {
		t.Fatal(err)
	}
}

// deleteAssignment deletes assignment name.
func deleteAssignment(t *testing.T, c *Cache, name string) {
	t.Helper()
	if err := c.Apply(store.Change{TypeURL: EndpointType, Deletes: []string{name}}); err != nil {
		t.Fatal(err)
	}
}
