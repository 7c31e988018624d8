package xds

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"google.golang.org/grpc"
)

// fakeDeltaStream is a delta stream fed by a channel; Recv fails once the
// stream's context ends (as grpc's does).
type fakeDeltaStream struct {
	grpc.ServerStream
	ctx  context.Context
	reqs chan *discovery.DeltaDiscoveryRequest

	mu      sync.Mutex
	sending bool
	sent    []*discovery.DeltaDiscoveryResponse
	overlap bool
}

func (s *fakeDeltaStream) Context() context.Context { return s.ctx }

func (s *fakeDeltaStream) Send(r *discovery.DeltaDiscoveryResponse) error {
	s.mu.Lock()
	if s.sending {
		s.overlap = true
	}
	s.sending = true
	s.mu.Unlock()
	time.Sleep(time.Millisecond)
	s.mu.Lock()
	s.sending = false
	s.sent = append(s.sent, r)
	s.mu.Unlock()
	return nil
}

func (s *fakeDeltaStream) Recv() (*discovery.DeltaDiscoveryRequest, error) {
	select {
	case r := <-s.reqs:
		return r, nil
	case <-s.ctx.Done():
		return nil, s.ctx.Err()
	}
}

// recordingWatcher answers every delta watch at once, and logs creations and cancellations.
type recordingWatcher struct {
	cache.ConfigWatcher
	log *watchLog
	wg  sync.WaitGroup
}

type watchLog struct {
	mu sync.Mutex
	ev []string
}

func (l *watchLog) add(f string, a ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ev = append(l.ev, fmt.Sprintf(f, a...))
}

func (l *watchLog) events() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.ev)
}

func (w *recordingWatcher) watchDelta(req *discovery.DeltaDiscoveryRequest, sub deltaSub, q deltaQueue) (func(), error) {
	w.log.add("watch %s %v", req.GetTypeUrl(), sub.IsWildcard())
	resp := &deltaResponse{req: req, resp: &discovery.DeltaDiscoveryResponse{TypeUrl: req.GetTypeUrl()}, w: &watch{}, next: &deltaHeld{compact: true}}
	q.put(resp) // answered at once, as the cache does under its lock (the buffer has room)
	var once sync.Once
	return func() { once.Do(func() { w.log.add("cancel %s", req.GetTypeUrl()) }) }, nil
}

type recordingCallbacks struct {
	log     *watchLog
	failReq int // the request that fails (1-based); 0: none
	n       int
}

func (c *recordingCallbacks) OnDeltaStreamOpen(_ context.Context, id int64, typ string) error {
	c.log.add("open")
	return nil
}

func (c *recordingCallbacks) OnDeltaStreamClosed(id int64, n *core.Node) {
	c.log.add("closed %s", n.GetId())
}

func (c *recordingCallbacks) OnStreamDeltaRequest(id int64, r *discovery.DeltaDiscoveryRequest) error {
	c.n++
	c.log.add("request %d", c.n)
	if c.n == c.failReq {
		return errors.New("refused")
	}
	return nil
}

func (c *recordingCallbacks) OnStreamDeltaResponse(id int64, req *discovery.DeltaDiscoveryRequest, r *discovery.DeltaDiscoveryResponse) {
	c.log.add("response %s", r.GetNonce())
}

// TestDeltaServerStreamLife: the stream's callbacks come in
// go-control-plane's order, a type's watch is cancelled before the next
// one, a callback's error ends the stream after every watch is cancelled
// and OnDeltaStreamClosed is told the node of the first request, Sends
// never overlap, and no goroutine outlives the stream (a server context
// ending, or the stream's).
func TestDeltaServerStreamLife(t *testing.T) {
	before := runtime.NumGoroutine()
	for _, how := range []string{"callback error", "stream ends", "server ends"} {
		t.Run(how, func(t *testing.T) {
			log := &watchLog{}
			w := &recordingWatcher{log: log}
			cb := &recordingCallbacks{log: log}
			if how == "callback error" {
				cb.failReq = 3
			}
			sctx, scancel := context.WithCancel(context.Background())
			defer scancel()
			s := newDeltaServer(sctx, w, cb)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			str := &fakeDeltaStream{ctx: ctx, reqs: make(chan *discovery.DeltaDiscoveryRequest)}
			done := make(chan error, 1)
			go func() { done <- s.DeltaStreamHandler(str, "") }()
			send := func(r *discovery.DeltaDiscoveryRequest) {
				select {
				case str.reqs <- r:
				case <-time.After(5 * time.Second):
					t.Fatal("request not taken")
				}
			}
			send(&discovery.DeltaDiscoveryRequest{Node: &core.Node{Id: "n1"}, TypeUrl: EndpointType, ResourceNamesSubscribe: []string{"a"}})
			send(&discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResourceNamesSubscribe: []string{"b"}})
			switch how {
			case "callback error":
				send(&discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType})
			case "stream ends":
				time.Sleep(20 * time.Millisecond)
				cancel()
			case "server ends":
				time.Sleep(20 * time.Millisecond)
				scancel()
			}
			err := handlerReturned(t, done)
			if (err != nil) != (how == "callback error") {
				t.Fatalf("handler returned %v", err)
			}
			cancel() // grpc ends the stream's context when the handler returns
			w.wg.Wait()
			ev := log.events()
			if ev[0] != "open" || ev[len(ev)-1] != "closed n1" {
				t.Fatalf("events %q", ev)
			}
			// Every watch is cancelled before the next of its type, and all
			// before the stream is closed.
			open := map[string]bool{}
			for _, e := range ev {
				var typ string
				var wild bool
				if _, err := fmt.Sscanf(e, "watch %s %t", &typ, &wild); err == nil {
					if open[typ] {
						t.Fatalf("a watch of %s created before the previous was cancelled: %q", typ, ev)
					}
					open[typ] = true
				} else if _, err := fmt.Sscanf(e, "cancel %s", &typ); err == nil {
					open[typ] = false
				}
			}
			for typ, o := range open {
				if o {
					t.Fatalf("the watch of %s was never cancelled: %q", typ, ev)
				}
			}
			if how == "callback error" && slices.Contains(ev, "watch "+ClusterType+" true") {
				t.Fatalf("a request refused by its callback made a watch: %q", ev)
			}
			str.mu.Lock()
			overlap := str.overlap
			str.mu.Unlock()
			if overlap {
				t.Fatal("Sends overlapped")
			}
		})
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// SendMsg is how the stream sends a response with its resources'
// encodings (wiredDelta).
func (s *fakeDeltaStream) SendMsg(m any) error {
	if d, ok := m.(*wiredDelta); ok {
		return s.Send(d.DeltaDiscoveryResponse)
	}
	return s.Send(m.(*discovery.DeltaDiscoveryResponse))
}
