package xds

import (
	"strconv"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
)

// SotwPartBytes is the bound of a sotw response's part for a client
// listing names of listedBytes (sotwPartBytes).
func SotwPartBytes(maxBytes, listedBytes int) int { return sotwPartBytes(maxBytes, listedBytes) }

// ResumePlacesHeld is the number of places taken in the server's resume
// gate (resumegate.go), for tests of package xds_test.
func (s *Server) ResumePlacesHeld() int { return len(s.guard.resumes.places) }

// DeltaDriver drives the cache for one delta stream as the delta stream
// handler does (deltaserver.go: the subscription of the first request,
// updated by the next ones; a response given the stream's next nonce and
// its state installed), without gRPC, for tests of the cache.
type DeltaDriver struct {
	c       *Cache
	sub     deltaSub
	started bool
	ch      chan *deltaResponse
	nonce   int
}

// NewDeltaDriver returns a driver whose response channel holds buffer
// responses.
func NewDeltaDriver(c *Cache, buffer int) *DeltaDriver {
	return &DeltaDriver{c: c, ch: make(chan *deltaResponse, buffer)}
}

// Watch creates the watch of req; the caller cancels the previous one
// first, as the handler does.
func (d *DeltaDriver) Watch(req *discovery.DeltaDiscoveryRequest) (cancel func(), err error) {
	if !d.started {
		d.sub, d.started = newDeltaSub(req.GetResourceNamesSubscribe(), req.GetResourceNamesUnsubscribe(), req.GetInitialResourceVersions(), nil), true
	} else {
		d.sub.update(req.GetResourceNamesSubscribe(), req.GetResourceNamesUnsubscribe())
	}
	return d.c.watchDelta(req, d.sub, deltaQueue{ch: d.ch})
}

// Take sends the response queued, if any: it gives it the next nonce
// ("1", "2", ...), installs its state and returns it; nil if none is queued.
func (d *DeltaDriver) Take() *discovery.DeltaDiscoveryResponse {
	select {
	case r := <-d.ch:
		d.nonce++
		r.resp.Nonce = strconv.Itoa(d.nonce)
		d.sub.held = r.install(r.resp.Nonce)
		return r.resp
	default:
		return nil
	}
}

// StateEntries counts the parts of the state the stream holds: its
// generation (once a response installed it), each explicit version, the
// rest, the plan of a halving, the rejected resources, and each response
// in flight.
func (d *DeltaDriver) StateEntries() int {
	h := d.sub.held
	n := len(h.versions) + len(h.inflight)
	for _, part := range []bool{h.compact, len(h.rest) > 0, len(h.plan) > 0, len(h.rejected) > 0} {
		if part {
			n++
		}
	}
	return n
}

// SotwDriver drives the cache for one sotw stream as the sotw stream
// handler does (sotwserver.go: the subscription of the first request, set
// by the next ones; a response's state installed when it is taken),
// without gRPC, for tests of the cache.
type SotwDriver struct {
	c       *Cache
	sub     sotwSub
	started bool
	ch      chan *sotwResponse
	nonce   int
}

// NewSotwDriver returns a driver whose response channel holds buffer
// responses.
func NewSotwDriver(c *Cache, buffer int) *SotwDriver {
	return &SotwDriver{c: c, ch: make(chan *sotwResponse, buffer)}
}

// Watch creates the watch of req; the caller cancels the previous one
// first, as the handler does.
func (d *SotwDriver) Watch(req *discovery.DiscoveryRequest) (cancel func(), err error) {
	if !d.started {
		d.sub, d.started = newSotwSub(req.GetResourceNames()), true
	} else {
		d.sub.set(req.GetResourceNames())
	}
	return d.c.watchSotw(req, d.sub, sotwQueue{ch: d.ch})
}

// Take sends the response queued, if any: it gives it the next nonce
// ("1", "2", ...), installs its state and returns it; nil if none is queued.
func (d *SotwDriver) Take() *discovery.DiscoveryResponse {
	select {
	case r := <-d.ch:
		d.nonce++
		r.resp.Nonce = strconv.Itoa(d.nonce)
		d.sub.held = r.next
		return r.resp
	default:
		return nil
	}
}

// WithMinCursor makes delta passes find the resources of n sorted names or
// more with a store.Cursor (0: every pass), for tests of the cursor.
func WithMinCursor(n int) Option { return func(c *Cache) { c.minCursor = n } }

// WithNarrowNames makes commits wake sotw assignment watches of n names
// or fewer by name only (-1: every watch is offered every commit), for
// tests of the index (interest.go).
func WithNarrowNames(n int) Option { return func(c *Cache) { c.maxNarrow = n } }

// LockClients holds the server's lock over its clients (Server.mu) until
// the returned function is called.
func (s *Server) LockClients() (unlock func()) {
	s.mu.Lock()
	return s.mu.Unlock
}
