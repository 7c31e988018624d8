package xds

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
)

// fakeSotwStream is a sotw stream whose sends take no time (but now and
// then a few microseconds), noting each response's type and the latest
// nonce of each type, and whether two sends overlapped.
type fakeSotwStream struct {
	grpc.ServerStream
	ctx  context.Context
	reqs chan *discovery.DiscoveryRequest

	mu      sync.Mutex
	sending bool
	overlap bool
	sent    []string          // type URLs, in order
	nonces  map[string]string // type URL → the latest response's nonce
	onSend  func(typ string)
}

func (s *fakeSotwStream) Context() context.Context { return s.ctx }

func (s *fakeSotwStream) Send(r *discovery.DiscoveryResponse) error {
	s.mu.Lock()
	if s.sending {
		s.overlap = true
	}
	s.sending = true
	s.mu.Unlock()
	if rand.IntN(4) == 0 {
		time.Sleep(time.Duration(rand.IntN(50)) * time.Microsecond)
	}
	s.mu.Lock()
	s.sending = false
	s.sent = append(s.sent, r.GetTypeUrl())
	if s.nonces == nil {
		s.nonces = map[string]string{}
	}
	s.nonces[r.GetTypeUrl()] = r.GetNonce()
	f := s.onSend
	s.mu.Unlock()
	if f != nil {
		f(r.GetTypeUrl())
	}
	return nil
}

func (s *fakeSotwStream) Recv() (*discovery.DiscoveryRequest, error) {
	select {
	case r := <-s.reqs:
		return r, nil
	case <-s.ctx.Done():
		return nil, s.ctx.Err()
	}
}

// sentTypes returns the types of the responses sent, in order.
func (s *fakeSotwStream) sentTypes() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.sent...)
}

// ack is the request that answers typ's latest response (the request of
// a client that re-arms its watch).
func (s *fakeSotwStream) ack(typ string) *discovery.DiscoveryRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return &discovery.DiscoveryRequest{TypeUrl: typ, ResponseNonce: s.nonces[typ]}
}

// hookSotwWatcher answers a sotw watch with what its hook puts on the
// stream's queue, called as the watch is created (under the stream's
// lock, in the goroutine that handles the request).
type hookSotwWatcher struct {
	hook func(req *discovery.DiscoveryRequest, q sotwQueue)
}

func (w *hookSotwWatcher) watchSotw(req *discovery.DiscoveryRequest, sub sotwSub, q sotwQueue) (func(), error) {
	w.hook(req, q)
	return func() {}, nil
}

// sotwAnswerOf is a sotw response of type typ that installs an empty
// state.
func sotwAnswerOf(typ string) *sotwResponse {
	return &sotwResponse{req: &discovery.DiscoveryRequest{TypeUrl: typ},
		resp: &discovery.DiscoveryResponse{TypeUrl: typ}, next: &sotwHeld{}}
}

// sendSotwRequest hands r to the stream's Recv, failing t if it is not
// read.
func sendSotwRequest(t *testing.T, str *fakeSotwStream, r *discovery.DiscoveryRequest) {
	t.Helper()
	select {
	case str.reqs <- r:
	case <-time.After(5 * time.Second):
		t.Fatal("request not read")
	}
}

// TestSotwStreamQueuedResponsesSentInOrderWithRequest: a response queued
// (the CDS watch's, as a commit answers it) while a request is handled is
// sent before the one the request's watch queues after it, even with the
// handler goroutine woken for it: no response leaves the stream's queue
// outside its lock.
func TestSotwStreamQueuedResponsesSentInOrderWithRequest(t *testing.T) {
	w := &hookSotwWatcher{hook: func(req *discovery.DiscoveryRequest, q sotwQueue) {
		if req.GetTypeUrl() != EndpointType {
			return // the CDS watch waits
		}
		q.put(sotwAnswerOf(ClusterType))
		q.signal() // as a put that found the queue idle would
		// Give the woken handler goroutine the time to take it: it must
		// not, while this request is handled.
		for deadline := time.Now().Add(50 * time.Millisecond); len(q.ch) > 0 && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		q.put(sotwAnswerOf(EndpointType))
	}}
	s := newSotwServer(context.Background(), w, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	str := &fakeSotwStream{ctx: ctx, reqs: make(chan *discovery.DiscoveryRequest)}
	done := make(chan error, 1)
	go func() { done <- s.StreamHandler(str, resource.AnyType) }()
	sendSotwRequest(t, str, &discovery.DiscoveryRequest{TypeUrl: ClusterType})
	sendSotwRequest(t, str, &discovery.DiscoveryRequest{TypeUrl: EndpointType, ResourceNames: []string{"a"}})
	var sent []string
	for deadline := time.Now().Add(5 * time.Second); len(sent) < 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d responses sent, want 2", len(sent))
		}
		sent = str.sentTypes()
	}
	if sent[0] != ClusterType || sent[1] != EndpointType {
		t.Fatalf("sent %s, then %s; want the CDS response queued first sent first", sent[0], sent[1])
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestSotwStreamClosedWhileRequestHandled: the server ends a stream while
// its receive goroutine handles a request (its watch answers it late):
// the response goes out before the handler returns, and a request read
// after that is not handled (nothing sent, no watch made, nothing put on
// the closed response channel) and ends the receive goroutine.
func TestSotwStreamClosedWhileRequestHandled(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var watches atomic.Int32
	w := &hookSotwWatcher{hook: func(req *discovery.DiscoveryRequest, q sotwQueue) {
		watches.Add(1)
		if req.GetTypeUrl() == ClusterType {
			close(entered)
			<-release
		}
		q.put(sotwAnswerOf(req.GetTypeUrl()))
	}}
	sctx, scancel := context.WithCancel(context.Background())
	defer scancel()
	s := newSotwServer(sctx, w, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	str := &fakeSotwStream{ctx: ctx, reqs: make(chan *discovery.DiscoveryRequest)}
	var returned atomic.Bool
	var late atomic.Int32
	str.onSend = func(string) {
		if returned.Load() {
			late.Add(1)
		}
	}
	done := make(chan error, 1)
	go func() {
		err := s.StreamHandler(str, resource.AnyType)
		returned.Store(true)
		done <- err
	}()
	sendSotwRequest(t, str, &discovery.DiscoveryRequest{TypeUrl: EndpointType, ResourceNames: []string{"a"}})
	sendSotwRequest(t, str, &discovery.DiscoveryRequest{TypeUrl: ClusterType})
	<-entered
	scancel() // the stream ends: the handler closes it, once the request is handled
	time.Sleep(5 * time.Millisecond)
	close(release)
	if err := handlerReturned(t, done); err != nil {
		t.Fatal(err)
	}
	// The stream's context is still live, so Recv reads another request:
	// the receive goroutine must see the stream closed and stop.
	sendSotwRequest(t, str, &discovery.DiscoveryRequest{TypeUrl: ListenerType})
	select {
	case str.reqs <- &discovery.DiscoveryRequest{TypeUrl: RouteType}:
		t.Fatal("the receive goroutine read a request after its stream was closed")
	case <-time.After(50 * time.Millisecond):
	}
	if n := late.Load(); n > 0 {
		t.Fatalf("%d responses sent after the handler returned", n)
	}
	if n := watches.Load(); n != 2 {
		t.Fatalf("%d watches made, want 2 (none for the request read after the stream closed)", n)
	}
	if n := len(str.sentTypes()); n != 2 {
		t.Fatalf("%d responses sent, want 2 (EDS's, and CDS's before the handler returned)", n)
	}
}

// lockedSotwWatcher is a cache in miniature for sotw streams
// (lockedQueues).
type lockedSotwWatcher struct{ lockedQueues[*sotwResponse] }

func (w *lockedSotwWatcher) watchSotw(req *discovery.DiscoveryRequest, sub sotwSub, q sotwQueue) (func(), error) {
	return w.add(req.GetTypeUrl(), q), nil
}

// commit answers the live watches of typ.
func (w *lockedSotwWatcher) commit(typ string) { w.answer(typ, sotwAnswerOf) }

// TestSotwStreamRequestErrorEndsStream: a request the receive goroutine
// fails to handle (ADS without a type URL) ends the stream with its
// error, even while commits keep waking the handler goroutine.
func TestSotwStreamRequestErrorEndsStream(t *testing.T) {
	for range 300 {
		w := &lockedSotwWatcher{}
		s := newSotwServer(context.Background(), w, nil)
		ctx, cancel := context.WithCancel(context.Background())
		str := &fakeSotwStream{ctx: ctx, reqs: make(chan *discovery.DiscoveryRequest, 1)}
		done := make(chan error, 1)
		go func() { done <- s.StreamHandler(str, resource.AnyType) }()
		str.reqs <- &discovery.DiscoveryRequest{TypeUrl: ClusterType}
		ack := func() *discovery.DiscoveryRequest { return str.ack(ClusterType) }
		endsOnBadRequest(t, str.reqs, func() { w.commit(ClusterType) }, ack, &discovery.DiscoveryRequest{}, done, cancel)
	}
}

// TestSotwStreamShutdownUnderLoad: the server ends a stream at a random
// point while commits answer its watches and its client answers the
// responses (re-arming the watches): the handler returns, nothing is
// sent after it did, and no put meets the closed response channel.
func TestSotwStreamShutdownUnderLoad(t *testing.T) {
	for range 300 {
		w := &lockedSotwWatcher{}
		sctx, scancel := context.WithCancel(context.Background())
		s := newSotwServer(sctx, w, nil)
		ctx, cancel := context.WithCancel(context.Background())
		str := &fakeSotwStream{ctx: ctx, reqs: make(chan *discovery.DiscoveryRequest)}
		var returned atomic.Bool
		var late atomic.Int64
		str.onSend = func(string) {
			if returned.Load() {
				late.Add(1)
			}
		}
		done := make(chan error, 1)
		go func() {
			err := s.StreamHandler(str, resource.AnyType)
			returned.Store(true)
			done <- err
		}()
		shutsDownUnderLoad(t, str.reqs, w.commit, str.ack, scancel, done)
		cancel()
		if n := late.Load(); n > 0 {
			t.Fatalf("%d responses sent after the handler returned", n)
		}
		str.mu.Lock()
		overlap := str.overlap
		str.mu.Unlock()
		if overlap {
			t.Fatal("two sends overlapped")
		}
	}
}
