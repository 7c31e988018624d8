package xds

import (
	"sync/atomic"
	"time"
)

// The resume gate: how many delta requests carrying
// initial_resource_versions are decoded and not yet taken by the cache.
//
// A reconnecting Envoy sends its versions of every cluster and assignment
// it holds: two maps of 5,000 entries, ~430 kB each once decoded. In a
// reconnect storm every stream decodes its requests at once, while the
// cache takes them one at a time (under its lock), so 1,600 decoded maps
// were live together: 700 MB of a 1 GB heap, and the storm's peak RSS was
// 2 GB. A request is decoded once its stream holds a place for it (the
// bytes are gRPC's already), and the place goes back when the cache has
// made the request's watch, or when the stream ends (streamAcct.release).
//
// A request waits for a place as long as places come back: the cache is
// taking requests (in a storm, one every few milliseconds). When none has
// come back for resumeWait, the places are held by streams that do not
// progress (a client that stopped reading: its stream keeps its decoded
// request until the client reads again) and the request is decoded
// without one; such clients delay others' resumes by resumeWait, never
// stop them.
type resumeGate struct {
	places chan struct{}
	wait   time.Duration
	left   atomic.Int64 // when a place last came back (UnixNano)
}

// resumeWait bounds the wait for a place while none comes back.
const resumeWait = time.Second

func newResumeGate(n int, wait time.Duration) *resumeGate {
	return &resumeGate{places: make(chan struct{}, max(n, 1)), wait: wait}
}

// tryEnter takes a place if one is free.
func (g *resumeGate) tryEnter() bool {
	select {
	case g.places <- struct{}{}:
		return true
	default:
		return false
	}
}

// enter waits for a place and reports whether it took one.
func (g *resumeGate) enter() bool {
	if g.tryEnter() {
		return true
	}
	t := time.NewTimer(g.wait)
	defer t.Stop()
	for {
		select {
		case g.places <- struct{}{}:
			return true
		case <-t.C:
			idle := time.Duration(time.Now().UnixNano() - g.left.Load())
			if idle >= g.wait {
				return false
			}
			t.Reset(g.wait - idle)
		}
	}
}

// leave gives a place back.
func (g *resumeGate) leave() {
	g.left.Store(time.Now().UnixNano())
	<-g.places
}

// tookResume records a place taken for a request of the stream (one
// taken after the stream ended goes back at once).
func (a *streamAcct) tookResume() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.released {
		a.g.resumes.leave()
		return
	}
	a.resumeHeld++
}

// leaveResume gives back a place the stream holds, once the cache took a
// request of it.
func (a *streamAcct) leaveResume() {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.resumeHeld > 0 {
		a.resumeHeld--
		a.g.resumes.leave()
	}
}
