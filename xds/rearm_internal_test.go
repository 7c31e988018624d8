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

// TestRearmDeltaWatchWithQueuedResponse: an ACK that arrives while the
// response a commit computed for the watch is queued and not installed
// (the commit came after the handler sent what was queued) gets a new
// watch, which starts from that response's state; the re-armed one would
// be marked installed by that response, and the next watch would then
// start from the state before it and send its resource again.
func TestRearmDeltaWatchWithQueuedResponse(t *testing.T) {
	c := NewCache(WithTypes(EndpointType))
	c.MarkReady()
	set := func(v int) { setAssignmentA(t, c, v) }
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
	w, _, err := c.newDeltaWatch(key, first, sub, deltaQueue{ch: ch})
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

// commitCallbacks runs commit before the stream handler takes request n
// (1-based): after the responses queued were sent, before the request's
// watch is re-armed or replaced.
type commitCallbacks struct {
	n      int
	commit map[int]func()
}

func (c *commitCallbacks) OnDeltaStreamOpen(context.Context, int64, string) error { return nil }
func (c *commitCallbacks) OnDeltaStreamClosed(int64, *core.Node)                  {}
func (c *commitCallbacks) OnStreamDeltaResponse(int64, *discovery.DeltaDiscoveryRequest, *discovery.DeltaDiscoveryResponse) {
}

func (c *commitCallbacks) OnStreamDeltaRequest(int64, *discovery.DeltaDiscoveryRequest) error {
	c.n++
	if f := c.commit[c.n]; f != nil {
		f()
	}
	return nil
}

// TestDeltaStreamACKAfterCommitBeforeRearm: through the stream handler,
// an ACK whose watch a commit answers after the handler sent what was
// queued and before the ACK re-arms it (the window TestModel's clients do
// not hit) gets each version once, in order, and nothing more.
func TestDeltaStreamACKAfterCommitBeforeRearm(t *testing.T) {
	c := NewCache(WithTypes(EndpointType, ClusterType))
	c.MarkReady()
	set := func(v int) { setAssignmentA(t, c, v) }
	set(1)
	cb := &commitCallbacks{commit: map[int]func(){3: func() { set(2) }, 4: func() { set(3) }}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := newDeltaServer(ctx, c, cb)
	str := &fakeDeltaStream{ctx: ctx, reqs: make(chan *discovery.DeltaDiscoveryRequest)}
	done := make(chan error, 1)
	go func() { done <- s.DeltaStreamHandler(str, "") }()
	defer func() {
		cancel()
		<-done
	}()
	sent := func(n int) []*discovery.DeltaDiscoveryResponse {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			str.mu.Lock()
			got := slices.Clone(str.sent)
			str.mu.Unlock()
			if len(got) >= n {
				return got
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d responses sent, waiting for %d", len(got), n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	send := func(r *discovery.DeltaDiscoveryRequest) {
		t.Helper()
		select {
		case str.reqs <- r:
		case <-time.After(5 * time.Second):
			t.Fatal("request not taken")
		}
	}
	ack := func(nonce string) {
		send(&discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResponseNonce: nonce})
	}
	send(&discovery.DeltaDiscoveryRequest{Node: &core.Node{Id: "n1"}, TypeUrl: EndpointType, ResourceNamesSubscribe: []string{"a"}})
	sent(1)  // 1: a-1
	ack("1") // 2: the watch is left open
	ack("1") // 3: a-2 committed first, answering the open watch
	sent(2)  // 2: a-2
	ack("2") // 4: a-3 committed first
	sent(3)  // 3: a-3
	ack("3")
	// A request of another type: the responses queued before it are sent first.
	send(&discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType, ResourceNamesSubscribe: []string{"x"}})
	var eds []string
	for _, r := range sent(4) {
		if r.GetTypeUrl() != EndpointType {
			break
		}
		for _, res := range r.GetResources() {
			var cla endpoint.ClusterLoadAssignment
			if err := res.GetResource().UnmarshalTo(&cla); err != nil {
				t.Fatal(err)
			}
			eds = append(eds, cla.GetClusterName())
		}
	}
	if want := []string{"a-1", "a-2", "a-3"}; !slices.Equal(eds, want) {
		t.Fatalf("EDS responses carried %v, want %v", eds, want)
	}
}

// setAssignmentA commits assignment "a" of cluster name "a-v" (t.Error,
// not t.Fatal: a stream's callback calls it too).
func setAssignmentA(t *testing.T, c *Cache, v int) {
	t.Helper()
	err := c.Apply(store.Change{TypeURL: EndpointType, Upserts: []store.Resource{{Name: "a", Msg: &endpoint.ClusterLoadAssignment{ClusterName: "a-" + strconv.Itoa(v)}}}})
	if err != nil {
		t.Error(err)
	}
}

// TestRearmDeltaIdleACKAllocatesNothing: the ACK of a response with
// nothing changed since re-arms the same watch and looks at nothing: no
// delta pass, no response, no allocation (an Envoy ACKs every response;
// under 1,000 of them this is the common request).
func TestRearmDeltaIdleACKAllocatesNothing(t *testing.T) {
	c, ch, w, sub, ack := answeredWatchA(t)
	rearm := func() {
		next, _, err := c.rearmDelta(w, ack, sub)
		if err != nil || next != w {
			t.Fatalf("re-armed as %p (the watch %p), %v", next, w, err)
		}
	}
	rearm()
	if a := testing.AllocsPerRun(100, rearm); a != 0 {
		t.Errorf("an idle ACK's re-arm: %v allocations, want 0", a)
	}
	select {
	case r := <-ch:
		t.Fatalf("an idle ACK answered with %v", r.resp.GetResources())
	default:
	}
}

// answeredWatchA makes a cache of assignment "a" and stream 1's delta
// watch of it, answered on ch and its response installed (nonce "1"),
// and returns them, the watch's subscription and the ACK of the response.
func answeredWatchA(t *testing.T) (*Cache, chan *deltaResponse, *watch, deltaSub, *discovery.DeltaDiscoveryRequest) {
	t.Helper()
	c := NewCache(WithTypes(EndpointType))
	c.MarkReady()
	setAssignmentA(t, c, 1)
	ch := make(chan *deltaResponse, 4)
	w, sub, r := watchAssignmentA(t, c, ch)
	r.resp.Nonce = "1"
	sub.held = r.install("1")
	return c, ch, w, sub, &discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResponseNonce: "1"}
}

// watchAssignmentA arms stream 1's delta watch of assignment "a" on c,
// answering on ch, and returns it, its subscription and the response it
// was answered with (not installed yet).
func watchAssignmentA(t *testing.T, c *Cache, ch chan *deltaResponse) (*watch, deltaSub, *deltaResponse) {
	t.Helper()
	sub := newDeltaSub([]string{"a"}, nil, nil, nil)
	first := &discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResourceNamesSubscribe: []string{"a"}}
	w, _, err := c.newDeltaWatch(streamKey{true, 1}, first, sub, deltaQueue{ch: ch})
	if err != nil {
		t.Fatal(err)
	}
	return w, sub, <-ch
}

// TestCommitPassesServerPathsQueuedInTheLane: a commit does not queue
// with the server's paths (Cache.lane): with the lane held, as by the
// ACKs of a fleet waiting their turn, a commit is applied and answers the
// open watch it wakes.
func TestCommitPassesServerPathsQueuedInTheLane(t *testing.T) {
	c, ch, w, sub, ack := answeredWatchA(t)
	if _, _, err := c.rearmDelta(w, ack, sub); err != nil {
		t.Fatal(err)
	}
	c.lane.Lock()
	committed := make(chan struct{})
	go func() {
		defer close(committed)
		setAssignmentA(t, c, 2)
	}()
	select {
	case <-committed:
	case <-time.After(time.Minute):
		c.lane.Unlock()
		t.Fatal("a commit waited for the server's lane")
	}
	c.lane.Unlock()
	select {
	case r := <-ch:
		if got := r.resp.GetResources(); len(got) != 1 || got[0].GetName() != "a" {
			t.Fatalf("the commit answered with %v, want a", got)
		}
	default:
		t.Fatal("the commit did not answer the open watch")
	}
}
