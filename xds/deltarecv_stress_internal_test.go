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

// fastDeltaStream is a delta stream whose sends take no time, counting
// them by type.
type fastDeltaStream struct {
	grpc.ServerStream
	ctx  context.Context
	reqs chan *discovery.DeltaDiscoveryRequest

	mu      sync.Mutex
	sending bool
	overlap bool
	sent    []string // type URLs, in order
	onSend  func(typ string)
}

func (s *fastDeltaStream) Context() context.Context { return s.ctx }

func (s *fastDeltaStream) Send(r *discovery.DeltaDiscoveryResponse) error { return s.SendMsg(r) }

func (s *fastDeltaStream) SendMsg(m any) error {
	var typ string
	switch r := m.(type) {
	case *wiredDelta:
		typ = r.GetTypeUrl()
	case *discovery.DeltaDiscoveryResponse:
		typ = r.GetTypeUrl()
	}
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
	s.sent = append(s.sent, typ)
	f := s.onSend
	s.mu.Unlock()
	if f != nil {
		f(typ)
	}
	return nil
}

func (s *fastDeltaStream) Recv() (*discovery.DeltaDiscoveryRequest, error) {
	select {
	case r := <-s.reqs:
		return r, nil
	case <-s.ctx.Done():
		return nil, s.ctx.Err()
	}
}

// TestDeltaStreamQueueNoLostPut: a committer puts responses one at a time
// from its own goroutine (as a commit does, under the cache's lock), each
// after the previous one was sent, while the client's requests are handled
// in the receive goroutine, some of them answered at once by their own
// watch: every put must be sent (neither woken nor drained: the stream
// would sit on it).
func TestDeltaStreamQueueNoLostPut(t *testing.T) {
	var qmu sync.Mutex
	var queue deltaQueue
	hookPuts := atomic.Int64{}
	w := &hookWatcher{hook: func(req *discovery.DeltaDiscoveryRequest, q deltaQueue) {
		qmu.Lock()
		queue = q
		qmu.Unlock()
		if req.GetTypeUrl() == ListenerType && rand.IntN(2) == 0 {
			hookPuts.Add(1)
			q.put(answerOf(ListenerType))
		}
	}}
	s := newDeltaServer(context.Background(), w, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	str := &fastDeltaStream{ctx: ctx, reqs: make(chan *discovery.DeltaDiscoveryRequest)}
	clusterSent := make(chan struct{}, 1)
	str.onSend = func(typ string) {
		if typ == ClusterType {
			clusterSent <- struct{}{}
		}
	}
	done := make(chan error, 1)
	go func() { done <- s.DeltaStreamHandler(str, "") }()
	str.reqs <- &discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType}
	str.reqs <- &discovery.DeltaDiscoveryRequest{TypeUrl: ListenerType}

	// Against a drain loop that lets the queue go idle without looking
	// again (sendQueued without its CompareAndSwap), a put is left
	// unsent within some 20,000 puts.
	puts := 20000
	if testing.Short() {
		puts = 2000
	}
	for i := range puts {
		qmu.Lock()
		q := queue
		qmu.Unlock()
		// The put lands somewhere in the handling of the request sent
		// with it, or just after: no request follows until it is sent.
		spin := time.Duration(rand.IntN(100)) * time.Microsecond
		go func() {
			for t0 := time.Now(); time.Since(t0) < spin; {
			}
			q.put(answerOf(ClusterType))
		}()
		str.reqs <- &discovery.DeltaDiscoveryRequest{TypeUrl: ListenerType, ResponseNonce: "1"}
		select {
		case <-clusterSent:
		case <-time.After(5 * time.Second):
			t.Fatalf("put %d of a CDS response never sent (the stream was not woken and did not drain it)", i)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if str.overlap {
		t.Fatal("two sends overlapped")
	}
	t.Logf("%d puts by the request's own watch", hookPuts.Load())
}

// lockedWatcher is a cache in miniature for delta streams
// (lockedQueues).
type lockedWatcher struct{ lockedQueues[*deltaResponse] }

func (w *lockedWatcher) watchDelta(req *discovery.DeltaDiscoveryRequest, sub deltaSub, q deltaQueue) (func(), error) {
	return w.add(req.GetTypeUrl(), q), nil
}

// commit answers the live watches of typ.
func (w *lockedWatcher) commit(typ string) { w.answer(typ, answerOf) }

// untilStopped runs step in a goroutine of wg, again and again, until
// stop is closed or step returns false.
func untilStopped(wg *sync.WaitGroup, stop <-chan struct{}, step func() bool) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if !step() {
				return
			}
		}
	}()
}

// TestDeltaStreamRequestErrorEndsStream: a request the receive goroutine
// fails to handle (ADS without a type URL) ends the stream with its
// error, even while commits keep waking the handler goroutine.
func TestDeltaStreamRequestErrorEndsStream(t *testing.T) {
	for range 300 {
		w := &lockedWatcher{}
		s := newDeltaServer(context.Background(), w, nil)
		ctx, cancel := context.WithCancel(context.Background())
		str := &fastDeltaStream{ctx: ctx, reqs: make(chan *discovery.DeltaDiscoveryRequest, 1)}
		done := make(chan error, 1)
		go func() { done <- s.DeltaStreamHandler(str, resource.AnyType) }()
		str.reqs <- &discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType}
		ack := func() *discovery.DeltaDiscoveryRequest {
			return &discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType, ResponseNonce: "1"}
		}
		endsOnBadRequest(t, str.reqs, func() { w.commit(ClusterType) }, ack, &discovery.DeltaDiscoveryRequest{}, done, cancel)
	}
}

// TestDeltaStreamShutdownUnderLoad: the server ends a stream at a random
// point while commits answer its watches and its client re-arms them:
// the handler returns, nothing is sent after it did, and no put meets the
// closed response channel.
func TestDeltaStreamShutdownUnderLoad(t *testing.T) {
	for range 300 {
		w := &lockedWatcher{}
		sctx, scancel := context.WithCancel(context.Background())
		s := newDeltaServer(sctx, w, nil)
		ctx, cancel := context.WithCancel(context.Background())
		str := &fastDeltaStream{ctx: ctx, reqs: make(chan *discovery.DeltaDiscoveryRequest)}
		var returned atomic.Bool
		var late atomic.Int64
		str.onSend = func(string) {
			if returned.Load() {
				late.Add(1)
			}
		}
		done := make(chan error, 1)
		go func() {
			err := s.DeltaStreamHandler(str, "")
			returned.Store(true)
			done <- err
		}()
		ack := func(typ string) *discovery.DeltaDiscoveryRequest {
			return &discovery.DeltaDiscoveryRequest{TypeUrl: typ, ResponseNonce: "1"}
		}
		shutsDownUnderLoad(t, str.reqs, w.commit, ack, scancel, done)
		cancel()
		if n := late.Load(); n > 0 {
			t.Fatalf("%d responses sent after the handler returned", n)
		}
		if str.overlap {
			t.Fatal("two sends overlapped")
		}
	}
}
