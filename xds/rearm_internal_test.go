package xds

import (
	"strconv"
	"testing"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/xdsbridge/xdsbridge/xds/store"
)

// TestRearmDeltaWatchWithQueuedResponse: an ACK that arrives while the
// response a commit computed for the watch is queued and not installed
// (the commit came after the handler sent what was queued) gets a new
// watch, which starts from that response's state; the re-armed one would
// be marked installed by that response, and the next watch would then
// start from the state before it and send its resource again.
func TestRearmDeltaWatchWithQueuedResponse(t *testing.T) {
	c := NewCache(WithTypes(EndpointType))
	c.MarkReady()
	set := func(v int) {
		t.Helper()
		err := c.Apply(store.Change{TypeURL: EndpointType, Upserts: []store.Resource{{Name: "a", Msg: &endpoint.ClusterLoadAssignment{ClusterName: "a-" + strconv.Itoa(v)}}}})
		if err != nil {
			t.Fatal(err)
		}
	}
	set(1)
	key, ch := streamKey{true, 1}, make(chan *deltaResponse, 4)
	sub := newDeltaSub([]string{"a"}, nil, nil, nil)
	nonce := 0
	install := func() {
		t.Helper()
		select {
		case r := <-ch:
			nonce++
			r.resp.Nonce = strconv.Itoa(nonce)
			sub.held = r.install(r.resp.Nonce)
		default:
			t.Fatal("no response queued")
		}
	}
	ack := func(w *watch, n string) *watch {
		t.Helper()
		req := &discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResponseNonce: n}
		w, _, err := c.rearmDelta(w, req, sub)
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	first := &discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResourceNamesSubscribe: []string{"a"}}
	w, _, err := c.newDeltaWatch(key, first, sub, ch)
	if err != nil {
		t.Fatal(err)
	}
	install()       // 1: a-1
	w = ack(w, "1") // open
	set(2)          // answers w: 2 queued
	w = ack(w, "1") // before 2 is installed
	install()       // 2: a-2
	set(3)          // answers w: 3 queued
	w = ack(w, "2") // before 3 is installed
	install()       // 3: a-3
	select {
	case r := <-ch:
		t.Fatalf("a response after the one queued, sending %v again", r.resp.GetResources())
	default:
	}
}
