package xds

// What the delta and sotw stream handlers (deltaserver.go, sotwserver.go)
// share: the queue the cache puts a stream's responses on, and the two
// goroutines that serve a stream. A stream's requests are read and
// handled in one, its receive goroutine (receiveRequests), so an ACK
// wakes that goroutine alone; the responses queued for it otherwise are
// sent in the other, its handler's (streamLoop.serve), when the queue
// wakes it, or by the goroutine that committed the change (handOff), when
// the stream can send one without waiting. Every goroutine touches the
// stream's state, sends, and takes responses off its channel under the
// stream's lock (streamLoop.mu) only.

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// respQueue is where a stream's responses are put: its response channel,
// its wake channel (capacity 1), on which the stream's handler goroutine
// takes them off, and whether the receive goroutine is draining the
// channel (drain; nil: never), which a response put then needs no wake-up
// for.
type respQueue[R any] struct {
	ch    chan<- R
	wake  chan<- struct{}
	drain *atomic.Int32
	loop  *streamLoop // the stream's, for putHanded (nil: none)
}

// deltaQueue and sotwQueue are the queues of delta and sotw streams.
type (
	deltaQueue = respQueue[*deltaResponse]
	sotwQueue  = respQueue[*sotwResponse]
)

// The states of respQueue.drain.
const (
	queueIdle     int32 = iota // a response put wakes the handler goroutine
	queueDraining              // the receive goroutine drains the channel before it lets the stream's lock go
	queueRefilled              // and a response was put since it last looked (streamLoop.sendQueued)
)

// put queues r and wakes the stream. It blocks only if the channel is
// full, which the cache's puts never find (each stream's channel holds
// what its watches may put at once).
func (q respQueue[R]) put(r R) {
	q.ch <- r
	q.queued()
}

// queued tells the stream a response was put on its channel: the receive
// goroutine, if it is draining it (it looks again), else the handler
// goroutine (signal).
func (q respQueue[R]) queued() {
	if !q.refilled() {
		q.signal()
	}
}

// refilled tells the receive goroutine, if it is draining the channel,
// that a response was put (it looks again), and reports whether it was.
func (q respQueue[R]) refilled() bool {
	for q.drain != nil {
		s := q.drain.Load()
		if s == queueIdle {
			return false
		}
		// Written even when already refilled, so that the receive
		// goroutine's next look (a Swap) reads this put's write.
		if q.drain.CompareAndSwap(s, queueRefilled) {
			return true
		}
	}
	return false
}

// putHanded queues r as put does, but leaves the wake-up to the caller:
// it returns the stream's loop, which the caller must hand the response
// to (handOff) once it holds no lock, or nil if nothing is left to do
// (the receive goroutine drains the channel, or the stream sends nothing
// inline and was woken).
func (q respQueue[R]) putHanded(r R) *streamLoop {
	q.ch <- r
	switch {
	case q.refilled():
		return nil
	case q.loop == nil || q.loop.inline == nil:
		q.signal()
		return nil
	}
	return q.loop
}

// signal wakes the stream's handler goroutine, if it is not woken yet.
func (q respQueue[R]) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// handOff hands each stream its commit's responses (streamLoop.handOff),
// in the calling goroutine and, for a long list, in as many more as the
// process has cores, each with a share of the streams: the sends a commit
// makes are spread over the cores as the handler goroutines' would be,
// without a wake-up per stream. It returns once the calling goroutine's
// share is handed.
func handOff(loops []*streamLoop) {
	if len(loops) == 0 {
		return
	}
	parts := min(runtime.GOMAXPROCS(0), (len(loops)+handOffShare-1)/handOffShare)
	for i := 1; i < parts; i++ {
		go handOffPart(loops, i, parts)
	}
	handOffPart(loops, 0, parts)
}

// handOffShare is the fewest streams handOff gives a goroutine of its own.
const handOffShare = 64

func handOffPart(loops []*streamLoop, i, parts int) {
	for j := i; j < len(loops); j += parts {
		loops[j].handOff()
	}
}

// streamLoop is a stream's lock and what its two goroutines (and a
// committing goroutine handing it a response, handOff) share besides its
// state: the wake channel of its queue, the queue's drain state, whether
// the stream is closing, and how it sends a commit's response inline.
type streamLoop struct {
	mu sync.Mutex
	// closed: the handler is closing the stream (close); the receive
	// goroutine handles no more requests.
	closed bool
	wake   chan struct{}
	drain  atomic.Int32
	// inline sends what is queued if it can without waiting (handOff),
	// and reports whether it sent it all; nil: the stream sends nothing
	// inline. Set before the stream's queue is used; called under mu.
	inline func() (bool, error)
	// failed: the error of a send made inline, which ends the stream
	// (serve returns it). Under mu.
	failed error
}

// queueOf makes l's wake channel and returns the queue of ch, woken and
// drained by l.
func queueOf[R any](l *streamLoop, ch chan<- R) respQueue[R] {
	l.wake = make(chan struct{}, 1)
	return respQueue[R]{ch: ch, wake: l.wake, drain: &l.drain, loop: l}
}

// signal wakes the handler goroutine, if it is not woken yet.
func (l *streamLoop) signal() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// handOff sends the response a commit queued (putHanded) from the
// committing goroutine, when the stream can (inline): a response that
// goes out with no goroutine of the stream's woken for it. Otherwise it
// wakes the handler goroutine, as put does: when another goroutine holds
// the stream's lock, or the stream would wait to send (inline says what
// it left). It never blocks: the lock is tried, not waited for, and
// inline does not wait. A stream closing is left alone; a send that
// fails ends the stream, by the handler goroutine (failed).
func (l *streamLoop) handOff() {
	if !l.mu.TryLock() {
		l.signal()
		return
	}
	defer l.mu.Unlock()
	if l.closed || l.failed != nil {
		return
	}
	all, err := l.inline()
	if err != nil {
		l.failed = err
	}
	if !all || err != nil {
		l.signal()
	}
}

// serve is the handler goroutine's loop: it sends the responses queued
// (sendAll, under l.mu) whenever the queue wakes it, until done is closed
// (nil), the receive goroutine ends (its word on ended), or sendAll fails
// (its error). Returning ends the stream.
func (l *streamLoop) serve(done <-chan struct{}, ended <-chan error, sendAll func() error) error {
	for {
		select {
		case <-done:
			return nil
		case err := <-ended:
			return err
		case <-l.wake:
			// Taken off the channel under the lock only: a response taken
			// while a request is handled would be sent after those the
			// request's watch queued.
			l.mu.Lock()
			err := l.failed
			if err == nil {
				err = sendAll()
			}
			l.mu.Unlock()
			if err != nil {
				return err
			}
		}
	}
}

// close marks the stream closing: from here the receive goroutine handles
// no request, so the stream's state is the handler goroutine's, and
// nothing is sent once it cancels the watches.
func (l *streamLoop) close() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
}

// receiveRequests is a stream's receive goroutine: it reads the requests
// (recv) and handles each under l.mu (handle), then sends the responses
// its watch answered at once and any other put meanwhile (sendAll, through
// sendQueued), which wake no other goroutine. It ends, telling ended (nil:
// the stream ended), when reading or handling a request fails, and
// without a word once the handler is closing the stream (l.closed).
func receiveRequests[Req any](l *streamLoop, recv func() (Req, error), handle func(Req) error, sendAll func() error, ended chan<- error) {
	for {
		req, err := recv()
		if err != nil {
			ended <- nil
			return
		}
		l.mu.Lock()
		if l.closed || l.failed != nil {
			// (A failed send made inline woke the handler goroutine,
			// which ends the stream with its error.)
			l.mu.Unlock()
			return
		}
		l.drain.Store(queueDraining)
		err = handle(req)
		if err == nil {
			err = l.sendQueued(sendAll)
		}
		l.drain.Store(queueIdle)
		l.mu.Unlock()
		if err != nil {
			ended <- err
			return
		}
	}
}

// sendQueued sends the responses queued (sendAll) until none was put
// since it last looked, and leaves the queue idle: a response put after
// that wakes the handler goroutine. Under l.mu, the queue draining.
func (l *streamLoop) sendQueued(sendAll func() error) error {
	for {
		// A Swap, not a Store: it reads the write of the puts that
		// refilled the queue, so the look that follows sees them.
		l.drain.Swap(queueDraining)
		if err := sendAll(); err != nil {
			return err
		}
		if l.drain.CompareAndSwap(queueDraining, queueIdle) {
			return nil
		}
	}
}
