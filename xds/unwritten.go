package xds

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// The unwritten budget: the bytes of responses encoded and not yet
// written out to their connection, over every stream
// (xds.limits.max_unwritten_response_bytes).
//
// gRPC encodes a message whole when the stream sends it, and holds the
// encoding until the connection's writer has copied it out, however long
// the writer or the peer's flow-control window takes. In a first sync
// every stream has a part of its state (a 32 KiB response) in flight; when
// the parts are encoded faster than the writers drain them, nearly every
// stream's part waits encoded at once: at 2,000 clients those buffers were
// 100 MB of a 217 MB live heap at the peak, which the collector's goal
// doubles in RSS. Under the budget, a response waits before it is encoded
// until its bytes fit, so at most the budget of encodings wait for the
// writers, and the other streams' responses wait as their state, not yet
// encoded.
//
// A response goes when its bytes fit under the budget, or when none are
// in use (a response larger than the budget goes alone). Waiting
// responses go in the order they came: a large one is not passed over by
// smaller ones. Bytes come back when gRPC gives the encoding's buffer back
// to the pool (the writer copied it out, or the stream ended), or, for a
// buffer gRPC drops without giving it back (its connection closed with the
// message queued), when the collector frees it. Responses below gRPC's
// pooling threshold (1 KiB: most responses carrying a change) are not
// counted. Delta and sotw responses share the budget. As in the
// resume gate, a response waits as long as bytes come back: after
// unwrittenWait in which none came back (the budget is held by streams
// whose clients stopped reading), it goes over the budget; such clients
// delay others, never stop them.
type unwrittenBudget struct {
	limit int64
	wait  time.Duration
	inUse prometheus.Gauge
	// waited counts the responses that waited, by outcome ("room",
	// "over", "ended").
	waited *prometheus.CounterVec

	mu    sync.Mutex
	used  int64
	queue []*unwrittenWaiter // in arrival order
	left  time.Time          // when bytes last came back
}

// unwrittenWait bounds a response's wait for room while no bytes come
// back.
const unwrittenWait = time.Second

type unwrittenWaiter struct {
	n       int64
	granted bool
	ready   chan struct{} // closed when granted
}

func newUnwrittenBudget(limit int64, wait time.Duration, m *guardMetrics) *unwrittenBudget {
	return &unwrittenBudget{limit: limit, wait: wait, inUse: m.unwrittenBytes, waited: m.responsesWaited, left: time.Now()}
}

func (b *unwrittenBudget) fits(n int64) bool { return b.used == 0 || b.used+n <= b.limit }

// charge adds n bytes in use (under mu).
func (b *unwrittenBudget) charge(n int64) {
	b.used += n
	b.inUse.Set(float64(b.used))
}

// grant lets the waiting responses at the head of the queue go while they
// fit (under mu).
func (b *unwrittenBudget) grant() {
	for len(b.queue) > 0 && b.fits(b.queue[0].n) {
		w := b.queue[0]
		b.queue[0] = nil
		b.queue = b.queue[1:]
		b.charge(w.n)
		w.granted = true
		close(w.ready)
	}
}

// remove takes w out of the queue (under mu).
func (b *unwrittenBudget) remove(w *unwrittenWaiter) {
	for i, q := range b.queue {
		if q == w {
			b.queue = append(b.queue[:i:i], b.queue[i+1:]...)
			return
		}
	}
}

// take charges n bytes to a response about to be encoded, waiting for
// room as above; it fails only when ctx ends first.
func (b *unwrittenBudget) take(ctx context.Context, n int) (*unwrittenCharge, error) {
	c := &unwrittenCharge{b: b, n: int64(n)}
	b.mu.Lock()
	if len(b.queue) == 0 && b.fits(c.n) {
		b.charge(c.n)
		b.mu.Unlock()
		return c, nil
	}
	w := &unwrittenWaiter{n: c.n, ready: make(chan struct{})}
	b.queue = append(b.queue, w)
	b.mu.Unlock()
	t := time.NewTimer(b.wait)
	defer t.Stop()
	for {
		select {
		case <-w.ready:
			b.waited.WithLabelValues("room").Inc()
			return c, nil
		case <-ctx.Done():
			b.mu.Lock()
			if w.granted {
				b.mu.Unlock()
				c.give()
			} else {
				b.remove(w)
				b.grant() // the next may fit
				b.mu.Unlock()
			}
			b.waited.WithLabelValues("ended").Inc()
			return nil, ctx.Err()
		case <-t.C:
			b.mu.Lock()
			idle := time.Since(b.left)
			if !w.granted && idle >= b.wait {
				b.remove(w)
				b.charge(c.n)
				w.granted = true
				b.grant()
				b.mu.Unlock()
				b.waited.WithLabelValues("over").Inc()
				return c, nil
			}
			b.mu.Unlock()
			t.Reset(max(b.wait-idle, time.Millisecond))
		}
	}
}

// unwrittenCharge is one response's bytes in the budget, given back once.
type unwrittenCharge struct {
	b       *unwrittenBudget
	n       int64
	done    atomic.Bool
	encoded bool // into a buffer that gives the charge back (pool)
}

// give gives the bytes back (once).
func (c *unwrittenCharge) give() {
	if !c.done.CompareAndSwap(false, true) {
		return
	}
	b := c.b
	b.mu.Lock()
	b.used -= c.n
	b.inUse.Set(float64(b.used))
	b.left = time.Now()
	b.grant()
	b.mu.Unlock()
}

// pool returns the pool to give the response's buffer back to: to of,
// and the charge back with it, or when the collector frees a buffer gRPC
// dropped.
func (c *unwrittenCharge) pool(of mem.BufferPool) mem.BufferPool {
	c.encoded = true
	p := &chargedPool{BufferPool: of, c: c}
	runtime.AddCleanup(p, (*unwrittenCharge).give, c)
	return p
}

// chargedPool is the pool of one buffer whose bytes are charged.
type chargedPool struct {
	mem.BufferPool
	c *unwrittenCharge
}

func (p *chargedPool) Put(buf *[]byte) {
	p.BufferPool.Put(buf)
	p.c.give()
}

// sizedMsg is a sotw response as a guarded stream sends it: with its
// encoded size, which proto.Size cached in it, and its charge (nil: under
// the pooling threshold).
type sizedMsg struct {
	proto.Message
	size   int
	charge *unwrittenCharge
}

// SendMsg sends a response under the unwritten budget: it waits for room,
// and its encoding carries the charge (codec.go), given back when gRPC is
// done with the buffer.
func (s *guardedStream) SendMsg(m any) error {
	size, ok := 0, false
	switch r := m.(type) {
	case *wiredDelta:
		size, ok = r.size()
		r.sized = size
	case *discovery.DiscoveryResponse:
		size, ok = proto.Size(r), true
		m = &sizedMsg{Message: r, size: size}
	}
	b := s.a.g.unwritten
	if !ok || b == nil || mem.IsBelowBufferPoolingThreshold(size) {
		return s.ServerStream.SendMsg(m)
	}
	c, err := b.take(s.ctx, size)
	if err != nil {
		return err
	}
	switch r := m.(type) {
	case *wiredDelta:
		r.charge = c
		defer func() { r.charge = nil }()
	case *sizedMsg:
		r.charge = c
	}
	err = s.ServerStream.SendMsg(m)
	if !c.encoded {
		// Not encoded into a buffer of the pool (sending failed before
		// encoding).
		c.give()
	}
	return err
}
