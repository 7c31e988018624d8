package xds

import (
	"context"
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
// every stream has a part of its state (a response of 32 KiB, or more for
// a sotw client listing many names) in flight; when
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
// to the pool (the writer copied it out), or when the response's stream
// ends: gRPC then puts the buffer back, or writes it after the stream's
// last message, or drops it with its connection (closed with the message
// queued) and never puts it back. Responses below gRPC's
// pooling threshold (1 KiB: most responses carrying a change) are not
// counted. Delta and sotw responses share the budget. A response's bytes
// count for unwrittenWait at most: those of a response its client does
// not read (its flow-control window is full) stop counting then, so such
// clients delay others by that much, never stop them; what they hold is
// bounded per stream by gRPC's flow control and the stream limits.
type unwrittenBudget struct {
	limit int64
	wait  time.Duration
	inUse prometheus.Gauge
	// waitedRoom, waitedExpired and waitedEnded count the responses that
	// waited, by outcome ("room", "expired", "ended").
	waitedRoom, waitedExpired, waitedEnded prometheus.Counter

	mu    sync.Mutex
	used  int64
	queue []*unwrittenCharge // the waiting, in arrival order
	held  chargeList         // the charges counted, oldest first
	// expiry expires the held bytes when the oldest are due while
	// responses wait (expireWaiting): one timer for all the waiters.
	// expiryAt is when it fires; zero: not armed.
	expiry   *time.Timer
	expiryAt time.Time
}

// unwrittenWait is how long a response's bytes count: those of a response
// not written out by then (its client is not reading) stop counting.
const unwrittenWait = time.Second

func newUnwrittenBudget(limit int64, wait time.Duration, m *guardMetrics) *unwrittenBudget {
	v := m.responsesWaited
	return &unwrittenBudget{limit: limit, wait: wait, inUse: m.unwrittenBytes, held: chargeList{counted: true},
		waitedRoom: v.WithLabelValues("room"), waitedExpired: v.WithLabelValues("expired"), waitedEnded: v.WithLabelValues("ended")}
}

func (b *unwrittenBudget) fits(n int64) bool { return b.used == 0 || b.used+n <= b.limit }

// count counts c's bytes (under mu).
func (b *unwrittenBudget) count(c *unwrittenCharge) {
	c.at = time.Now()
	b.held.push(c)
	b.used += c.n
	b.inUse.Set(float64(b.used))
}

// uncount stops counting c's bytes, once (under mu).
func (b *unwrittenBudget) uncount(c *unwrittenCharge) {
	if !c.done.CompareAndSwap(false, true) {
		return
	}
	b.held.remove(c)
	b.used -= c.n
	b.inUse.Set(float64(b.used))
}

// expire stops counting the bytes counted for wait or longer, and
// returns when the oldest left will be (under mu).
func (b *unwrittenBudget) expire(now time.Time) (next time.Time) {
	for c := b.held.first; c != nil; c = b.held.first {
		if now.Sub(c.at) < b.wait {
			return c.at.Add(b.wait)
		}
		b.uncount(c)
	}
	return now.Add(b.wait)
}

// expireGrant expires what is due, and lets the waiting responses that
// then fit go: those go as "expired". While responses still wait, the
// expiry timer is armed for when the next bytes are due (under mu).
func (b *unwrittenBudget) expireGrant() {
	before, now := b.used, time.Now()
	next := b.expire(now)
	if b.used < before {
		b.grant(true)
	}
	if len(b.queue) == 0 || (!b.expiryAt.IsZero() && !b.expiryAt.After(next)) {
		return
	}
	d := max(next.Sub(now), time.Millisecond)
	b.expiryAt = now.Add(d)
	if b.expiry == nil {
		b.expiry = time.AfterFunc(d, b.expireWaiting)
	} else {
		b.expiry.Reset(d)
	}
}

// expireWaiting runs when the expiry timer fires.
func (b *unwrittenBudget) expireWaiting() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.expiryAt = time.Time{}
	if len(b.queue) > 0 {
		b.expireGrant()
	}
}

// grant lets the waiting responses at the head of the queue go while they
// fit, counted "expired" if expired, else "room" (under mu).
func (b *unwrittenBudget) grant(expired bool) {
	for len(b.queue) > 0 && b.fits(b.queue[0].n) {
		c := b.queue[0]
		b.queue[0] = nil
		b.queue = b.queue[1:]
		b.count(c)
		c.granted, c.expired = true, expired
		close(c.ready)
	}
}

// remove takes c out of the queue (under mu).
func (b *unwrittenBudget) remove(c *unwrittenCharge) {
	for i, q := range b.queue {
		if q == c {
			b.queue = append(b.queue[:i:i], b.queue[i+1:]...)
			return
		}
	}
}

// take counts n bytes for a response about to be encoded, waiting for
// room as above; it fails only when ctx ends first.
func (b *unwrittenBudget) take(ctx context.Context, n int) (*unwrittenCharge, error) {
	c := &unwrittenCharge{b: b, n: int64(n)}
	b.mu.Lock()
	if len(b.queue) == 0 && b.fits(c.n) {
		b.count(c)
		b.mu.Unlock()
		return c, nil
	}
	c.ready = make(chan struct{})
	b.queue = append(b.queue, c)
	b.expireGrant()
	b.mu.Unlock()
	select {
	case <-c.ready:
		if c.expired {
			b.waitedExpired.Inc()
		} else {
			b.waitedRoom.Inc()
		}
		return c, nil
	case <-ctx.Done():
		b.mu.Lock()
		if c.granted {
			b.uncount(c)
		} else {
			b.remove(c)
		}
		b.grant(false) // the next may fit
		b.mu.Unlock()
		b.waitedEnded.Inc()
		return nil, ctx.Err()
	}
}

// unwrittenCharge is one response's bytes in the budget, counted from at
// until given back (or expired), once. It is the only allocation the
// budget makes for a response that does not wait: the lists it is on
// (the budget's held, its stream's) link through it, and it is the pool
// its buffer goes back to (pool).
type unwrittenCharge struct {
	// ready is closed when the charge, which waited its turn, is granted
	// (counted); granted and expired (bytes expired to let it go: the
	// wait counted "expired" rather than "room") are set then (under mu).
	ready            chan struct{}
	granted, expired bool

	b  *unwrittenBudget
	n  int64
	at time.Time
	// held: its links in b.held while counted (under b.mu).
	held chargeLinks
	done atomic.Bool
	// encoded: into a buffer that gives the charge back (pool); cp: that
	// buffer's pool.
	encoded bool
	cp      chargedPool
	// of: the stream's charges, which give it back when the stream ends
	// (nil: not among them); open: its links in of's list while there
	// (under of.mu).
	of   *streamCharges
	open chargeLinks
}

// chargeLinks are a charge's links in one list: in, and its neighbours.
type chargeLinks struct {
	in         bool
	prev, next *unwrittenCharge
}

// chargeList is a doubly linked list of charges, oldest first, through
// their links: it allocates nothing. The zero value is an empty list of a
// stream's charges (through open); the budget's (through held) is made
// with counted. Guarded by its owner's lock.
type chargeList struct {
	first, last *unwrittenCharge
	counted     bool
}

func (l *chargeList) of(c *unwrittenCharge) *chargeLinks {
	if l.counted {
		return &c.held
	}
	return &c.open
}

// push appends c, which is not in l.
func (l *chargeList) push(c *unwrittenCharge) {
	k := l.of(c)
	k.in, k.prev, k.next = true, l.last, nil
	if l.last != nil {
		l.of(l.last).next = c
	} else {
		l.first = c
	}
	l.last = c
}

// remove takes c out of l, if it is in it.
func (l *chargeList) remove(c *unwrittenCharge) {
	k := l.of(c)
	if !k.in {
		return
	}
	if k.prev != nil {
		l.of(k.prev).next = k.next
	} else {
		l.first = k.next
	}
	if k.next != nil {
		l.of(k.next).prev = k.prev
	} else {
		l.last = k.prev
	}
	*k = chargeLinks{}
}

// give gives the bytes back (once; none if they expired).
func (c *unwrittenCharge) give() {
	if c.of != nil {
		c.of.remove(c)
	}
	c.ended()
}

// streamCharges are a stream's charges not given back yet, which its end
// gives back (end): one registration with the stream's end for all of them
// (streamAcct.end), not one per response with its context. The zero value
// is a stream's, open.
type streamCharges struct {
	mu    sync.Mutex
	open  chargeList
	ended bool
}

// add makes c one of the stream's charges; false if the stream ended.
func (sc *streamCharges) add(c *unwrittenCharge) bool {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.ended {
		return false
	}
	sc.open.push(c)
	c.of = sc
	return true
}

func (sc *streamCharges) remove(c *unwrittenCharge) {
	sc.mu.Lock()
	sc.open.remove(c)
	sc.mu.Unlock()
}

// end gives back the charges of the stream, which ended, and those it
// adds later at once.
func (sc *streamCharges) end() {
	sc.mu.Lock()
	sc.ended = true
	var open []*unwrittenCharge
	for c := sc.open.first; c != nil; c = sc.open.first {
		sc.open.remove(c)
		open = append(open, c)
	}
	sc.mu.Unlock()
	for _, c := range open {
		c.ended()
	}
}

// ended gives the bytes back when the response's stream ended (see
// unwrittenBudget).
func (c *unwrittenCharge) ended() {
	if c.done.Load() {
		return
	}
	b := c.b
	b.mu.Lock()
	b.uncount(c)
	b.grant(false)
	b.mu.Unlock()
}

// pool returns the pool to give the response's buffer back to: to of,
// and the charge back with it. A buffer gRPC drops without putting it
// back (with its connection) is given back by its stream's end, which
// comes with the connection's; and its bytes stop counting after
// unwrittenWait in any case.
func (c *unwrittenCharge) pool(of mem.BufferPool) mem.BufferPool {
	c.encoded = true
	c.cp = chargedPool{BufferPool: of, c: c}
	return &c.cp
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
	if !s.a.charges.add(c) {
		c.ended() // the stream ended: nothing to wait for
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
