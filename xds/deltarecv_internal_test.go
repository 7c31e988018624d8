package xds

import (
	"context"
	"sync"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
)

// hookWatcher answers a delta watch with what its hook puts on the
// stream's queue, called as the watch is created (under the stream's
// lock, in the goroutine that handles the request).
type hookWatcher struct {
	hook func(req *discovery.DeltaDiscoveryRequest, q deltaQueue)
}

func (w *hookWatcher) watchDelta(req *discovery.DeltaDiscoveryRequest, sub deltaSub, q deltaQueue) (func(), error) {
	w.hook(req, q)
	return func() {}, nil
}

// answerOf is a response to req, of type typ, that installs an empty
// state.
func answerOf(typ string) *deltaResponse {
	req := &discovery.DeltaDiscoveryRequest{TypeUrl: typ}
	return &deltaResponse{req: req, resp: &discovery.DeltaDiscoveryResponse{TypeUrl: typ}, w: &watch{}, next: &deltaHeld{compact: true}}
}

// sendRequest hands r to the stream's Recv, failing t if it is not read.
func sendRequest(t *testing.T, str *fakeDeltaStream, r *discovery.DeltaDiscoveryRequest) {
	t.Helper()
	select {
	case str.reqs <- r:
	case <-time.After(5 * time.Second):
		t.Fatal("request not read")
	}
}

// TestDeltaStreamQueuedResponsesSentInOrderWithRequest: a response queued
// (the CDS watch's, as a commit answers it) while a request is handled is
// sent before the one the request's watch queues after it, though the
// handler goroutine is woken for it at once: no response leaves the
// stream's queue outside its lock.
func TestDeltaStreamQueuedResponsesSentInOrderWithRequest(t *testing.T) {
	w := &hookWatcher{hook: func(req *discovery.DeltaDiscoveryRequest, q deltaQueue) {
		if req.GetTypeUrl() != EndpointType {
			return // the CDS watch waits
		}
		q.put(answerOf(ClusterType))
		// Give the woken handler goroutine the time to take it: it must
		// not, while this request is handled.
		for deadline := time.Now().Add(50 * time.Millisecond); len(q.ch) > 0 && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		q.put(answerOf(EndpointType))
	}}
	s := newDeltaServer(context.Background(), w, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	str := &fakeDeltaStream{ctx: ctx, reqs: make(chan *discovery.DeltaDiscoveryRequest)}
	done := make(chan error, 1)
	go func() { done <- s.DeltaStreamHandler(str, "") }()
	sendRequest(t, str, &discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType})
	sendRequest(t, str, &discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResourceNamesSubscribe: []string{"a"}})
	var sent []*discovery.DeltaDiscoveryResponse
	for deadline := time.Now().Add(5 * time.Second); len(sent) < 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d responses sent, want 2", len(sent))
		}
		str.mu.Lock()
		sent = append([]*discovery.DeltaDiscoveryResponse(nil), str.sent...)
		str.mu.Unlock()
	}
	if sent[0].GetTypeUrl() != ClusterType || sent[1].GetTypeUrl() != EndpointType {
		t.Fatalf("sent %s (nonce %s), then %s (nonce %s); want the CDS response queued first sent first",
			sent[0].GetTypeUrl(), sent[0].GetNonce(), sent[1].GetTypeUrl(), sent[1].GetNonce())
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// closingStream is a fakeDeltaStream that notes a response sent after its
// handler returned.
type closingStream struct {
	*fakeDeltaStream
	mu       sync.Mutex
	returned bool
	late     int
}

func (s *closingStream) SendMsg(m any) error {
	s.mu.Lock()
	if s.returned {
		s.late++
	}
	s.mu.Unlock()
	return s.fakeDeltaStream.SendMsg(m)
}

// TestDeltaStreamClosedWhileRequestHandled: the server ends a stream while
// its receive goroutine handles a request (its watch answers it late):
// the response goes out before the handler returns, and a request read
// after that is not handled (nothing sent, no response channel read or
// written after it is closed) and ends the receive goroutine.
func TestDeltaStreamClosedWhileRequestHandled(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	w := &hookWatcher{hook: func(req *discovery.DeltaDiscoveryRequest, q deltaQueue) {
		if req.GetTypeUrl() == ClusterType {
			close(entered)
			<-release
		}
		q.put(answerOf(req.GetTypeUrl()))
	}}
	sctx, scancel := context.WithCancel(context.Background())
	defer scancel()
	s := newDeltaServer(sctx, w, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	str := &closingStream{fakeDeltaStream: &fakeDeltaStream{ctx: ctx, reqs: make(chan *discovery.DeltaDiscoveryRequest)}}
	done := make(chan error, 1)
	go func() {
		err := s.DeltaStreamHandler(str, "")
		str.mu.Lock()
		str.returned = true
		str.mu.Unlock()
		done <- err
	}()
	sendRequest(t, str.fakeDeltaStream, &discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResourceNamesSubscribe: []string{"a"}})
	sendRequest(t, str.fakeDeltaStream, &discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType})
	<-entered
	scancel() // the stream ends: the handler closes it, once the request is handled
	time.Sleep(5 * time.Millisecond)
	close(release)
	if err := handlerReturned(t, done); err != nil {
		t.Fatal(err)
	}
	// The stream's context is still live, so Recv reads another request:
	// the receive goroutine must see the stream closed and stop.
	sendRequest(t, str.fakeDeltaStream, &discovery.DeltaDiscoveryRequest{TypeUrl: ListenerType})
	select {
	case str.reqs <- &discovery.DeltaDiscoveryRequest{TypeUrl: RouteType}:
		t.Fatal("the receive goroutine read a request after its stream was closed")
	case <-time.After(50 * time.Millisecond):
	}
	str.mu.Lock()
	late := str.late
	str.mu.Unlock()
	if late > 0 {
		t.Fatalf("%d responses sent after the handler returned", late)
	}
	str.fakeDeltaStream.mu.Lock()
	n := len(str.sent)
	str.fakeDeltaStream.mu.Unlock()
	if n != 2 {
		t.Fatalf("%d responses sent, want 2 (EDS's, and CDS's before the handler returned)", n)
	}
}
