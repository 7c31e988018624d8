package xds

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/xdsbridge/xdsbridge/xds/store"
)

// subscription is what a watch reads of its stream's subscription to its
// type (deltaSub, sotwSub).
type subscription interface {
	SubscribedResources() map[string]struct{}
	IsWildcard() bool
}

// watch is one request's wait for a response: the server creates one per
// request of a stream and type, and the cache answers it at most once.
// Guarded by Cache.mu, but installed, which the stream's handler sets
// under the stream's lock (deltaResponse.install) and only the handler
// reads, under it or once the stream is closing (Cache.cancel,
// rearmDelta).
type watch struct {
	id    uint64
	ts    *typeState
	delta bool
	sreq  *discovery.DiscoveryRequest
	dreq  *discovery.DeltaDiscoveryRequest
	sub   subscription
	dsub  deltaSub // a delta watch's subscription, which sub points to (armDelta)
	sch   sotwQueue
	dch   deltaQueue
	ds    deltaState // read from the delta client's state at creation
	ss    sotwState  // likewise for sotw
	// sheld: a sotw client's state as its stream handed it (sotw.go).
	sheld *sotwHeld
	done  bool

	// Delta: the client's state as read at creation, and whether the
	// server installed the one this watch's response carries.
	known     *deltaHeld
	installed bool
	resp      *deltaResponse // the response sent

	stream *streamState // nil: not known (see order.go)
	// st: the stream's record of the watch's type (nil when stream is),
	// set by createLocked and kept by a re-armed watch (rearmDelta).
	st       *streamType
	heldBack []string // sorted: assignments held back until their cluster is sent (routes: see routehold.go)
	// narrow: tracked under narrowNames, the names it lists, which alone
	// wake it (interest.go).
	narrow      bool
	narrowNames []string

	// An RDS watch holding routes back (routehold.go): the timer that
	// bounds the hold, and whether it fired.
	holdTimer   *time.Timer
	holdExpired bool
	wakeTimer   *time.Timer // wakes a hold to look again (mbb.go)
	created     time.Time   // of an RDS watch

	// cancelFn cancels the watch as tracked (Cache.cancel); forgetFn, as
	// answered when created. Each made once, and kept by a re-armed watch
	// (rearmDelta), whose ACKs then allocate nothing for them.
	cancelFn, forgetFn func()
}

// armDelta makes w the delta watch of req, for sub, on q: every field
// of w is set anew. The subscription is held in w (dsub), not in a value
// of its own.
func (w *watch) armDelta(ts *typeState, req *discovery.DeltaDiscoveryRequest, sub deltaSub, q deltaQueue) {
	*w = watch{ts: ts, delta: true, dreq: req, dsub: sub, known: sub.held, dch: q}
	w.sub = &w.dsub
}

func (c *Cache) create(w *watch) (func(), error) {
	c.lock()
	defer c.unlock()
	return c.createLocked(w)
}

// createLocked creates w, a new watch (or one re-armed: rearmDelta), and
// answers it if anything is to be sent. Its stream is the one of its
// request as noted (noteRequest), unless already known (w.stream: the
// delta stream handler's watches); its record of its type (w.st) is
// looked up once, and kept by a re-armed watch. Under c.mu.
func (c *Cache) createLocked(w *watch) (func(), error) {
	c.nextID++
	w.id = c.nextID
	if w.stream == nil {
		w.stream = c.stream(w)
	}
	if w.stream != nil && w.st == nil {
		w.st = w.stream.typ(w.ts.URL)
	}
	if w.stream == nil && c.registered {
		// Fail closed: the server registers every stream as it opens and
		// tells every request's stream with or before its watch
		// (order.go); a watch of no known stream could be one whose
		// client may not read everything.
		return nil, fmt.Errorf("xds cache: %s watch of a stream not registered while clients are authorized (xds.authorization)", w.ts.URL)
	}
	if w.delta {
		if err := c.readDeltaState(w); err != nil {
			return nil, err
		}
	} else {
		c.readSotwState(w)
	}
	c.noteAnswer(w)
	c.trackLast(w)
	if w.ts.URL == EndpointType && w.stream != nil {
		c.edsInterest(w)
	}
	if w.ts.URL == RouteType && !w.delta {
		w.created = time.Now()
		c.forgetRoutes(w)
	}
	if w.ts.URL == ClusterType && w.stream != nil {
		if !w.delta {
			// A sotw CDS response still queued was dropped by the server
			// for this request (sotwserver.go): it will not be sent.
			w.stream.pendingCDS, w.stream.pendingResp = nil, nil
		}
		if c.ready {
			c.cdsInterest(w)
		}
	}
	if c.ready && c.respond(w, false, mustAnswer(w)) {
		if w.forgetFn == nil {
			w.forgetFn = func() { c.lock(); c.forgetLast(w); c.unlock() }
		}
		return w.forgetFn, nil
	}
	w.ts.watches[w] = struct{}{}
	w.ts.interest.add(w, c.maxNarrow)
	if w.stream != nil {
		switch w.ts.URL {
		case EndpointType:
			w.stream.eds = w
		case ClusterType:
			w.stream.cdsw = w
			c.cdsCurrent(w)
		case RouteType:
			w.stream.rds = w
			c.routeHeld(w)
		}
	}
	if w.cancelFn == nil {
		w.cancelFn = func() { c.cancel(w) }
	}
	return w.cancelFn, nil
}

// cancel ends a tracked watch. The server cancels a watch right before it
// creates the next one of the stream and type, having first processed the
// responses queued until then (deltaserver.go). A delta watch answered after
// that (by a commit, from another goroutine) has its response queued but
// not installed: the next watch must start from the state that response
// installs, not from the one the server hands it, or what that response
// carried is forgotten (a removal of a resource it delivered is lost). And
// what a delta watch held back for its clusters, it hands to the next
// watch, as it installed no state that says so.
func (c *Cache) cancel(w *watch) {
	c.lock()
	defer c.unlock()
	c.cancelLocked(w)
}

// cancelLocked is cancel under c.mu.
func (c *Cache) cancelLocked(w *watch) {
	if !w.done {
		// An answered watch was untracked as it was answered (respond):
		// the ACK of every response cancels one.
		c.untrack(w)
	}
	c.forgetLast(w)
	t := w.st
	if !w.delta || t == nil {
		return
	}
	switch {
	case w.done && !w.installed:
		t.inflight = w.resp
	case !w.done && len(w.heldBack) > 0:
		t.held = append(t.held, w.heldBack...)
	}
}

// respond answers w if anything needs sending (or evenIfEmpty). A watch
// just created looks at what its state says may have changed; a watch
// woken by a commit looks at the changed names only (changed != nil).
func (c *Cache) respond(w *watch, woken bool, evenIfEmpty bool, changed ...string) bool {
	if w.done {
		return false
	}
	if woken && len(w.heldBack) > 0 {
		changed = append(slices.Clone(changed), w.heldBack...)
		slices.Sort(changed)
		changed = slices.Compact(changed)
	}
	var responded bool
	if w.delta {
		seq, rest, fromRest, full := w.ds.seq, w.ds.rest, w.ds.allRest, w.ds.full
		if woken {
			seq, rest, fromRest, full = changed, nil, false, false
		}
		responded = c.respondDelta(w, seq, rest, fromRest, full, evenIfEmpty)
	} else {
		names, full := w.ss.names, w.ss.full
		if woken {
			names, full = changed, false
		}
		responded = c.respondSotw(w, names, full, evenIfEmpty)
	}
	switch {
	case responded:
		c.untrack(w)
	case w.narrow && len(w.heldBack) > 0:
		w.ts.interest.widen(w)
	}
	if !responded && woken {
		c.routeHeld(w)
	}
	return responded
}

func (c *Cache) untrack(w *watch) {
	delete(w.ts.watches, w)
	w.ts.interest.remove(w)
	if w.stream != nil && w.stream.eds == w {
		w.stream.eds = nil
	}
	if w.stream != nil && w.stream.rds == w {
		w.stream.rds = nil
	}
	if w.stream != nil && w.stream.cdsw == w {
		w.stream.cdsw = nil
	}
	if w.holdTimer != nil {
		w.holdTimer.Stop()
	}
	if w.wakeTimer != nil {
		w.wakeTimer.Stop()
	}
}

// tryRespond answers a tracked watch if anything among the changed names
// needs sending.
func (c *Cache) tryRespond(w *watch, changed []string) {
	c.respond(w, true, false, changed...)
}

// watchOrder is the order of watches by creation (a comparison function
// for slices.SortFunc): responses leave in the order clients asked, and
// tests are repeatable.
func watchOrder(a, b *watch) int { return cmp.Compare(a.id, b.id) }

// MarkReady lets the cache answer clients: the store tells the cache
// (commitObserver.Readied), which answers the watches held until now.
func (c *Cache) MarkReady() { c.store.MarkReady() }

// Ready reports whether MarkReady was called.
func (c *Cache) Ready() bool { return c.store.Ready() }

// mustAnswer reports whether a new watch is answered even with nothing:
// the first request of a stream and type, and a delta request that
// changes the wildcard subscription or whose answer changes the state.
func mustAnswer(w *watch) bool {
	return firstRequest(w) || (w.delta && (w.ds.wildChanged || w.ds.changed))
}

func firstRequest(w *watch) bool {
	if w.delta {
		// The first request of a type on a stream is the one before the
		// cache's state is installed. (Not response_nonce == "": a delta
		// request that changes the subscription carries no nonce either.)
		// Envoy expects an answer to its first wildcard request to finish
		// initialising, even when there is nothing. A reconnecting client's
		// first request (initial_resource_versions) is answered too, even
		// if it holds everything: the answer replaces its explicit versions
		// (5,000 for an Envoy with 5,000 clusters) with the compact state.
		return !w.known.compact && (w.sub.IsWildcard() || len(w.known.versions) > 0 || w.known.resumed != nil)
	}
	// A sotw client's first request on a stream is answered even when empty.
	// (Not version_info == "": a NACK of the first response also carries an
	// empty version, and answering it would resend what was rejected.)
	return w.sreq.GetResponseNonce() == ""
}

// vis is what w's client may read (its stream's); nil: everything. (Not
// a field of the watch: one per request, it is kept small.)
func (w *watch) vis() *visibility {
	if w.stream == nil {
		return nil
	}
	return w.stream.vis
}

// lookup returns resource n as w's client sees it: a name its
// visibility does not match does not exist for it.
func (w *watch) lookup(n string) (*store.Entry, bool) {
	e, ok := w.ts.Resources[n]
	if ok && w.hidden(n) {
		return nil, false
	}
	return e, ok
}

// hidden reports whether name n is outside what w's client may read.
func (w *watch) hidden(n string) bool {
	v := w.vis()
	return v != nil && !v.sees(n)
}

// covered reports whether a full check of w's subscription looks at
// name n among the resources of interest (fullCheck).
func (w *watch) covered() func(n string) bool {
	subscribed, wild := w.sub.SubscribedResources(), w.sub.IsWildcard()
	return func(n string) bool {
		_, exists := w.lookup(n)
		_, isSub := subscribed[n]
		return (wild && exists) || (!wild && isSub)
	}
}

// fullCheck calls fn once for each name a full check of w's subscription
// looks at: every resource of interest (all of the type its client may
// read for a wildcard subscription, else the subscribed names), then each
// name the client is known to hold besides. It returns whether a name was
// among the first.
func (w *watch) fullCheck(known map[string]string, fn func(n string)) (covered func(n string) bool) {
	covered = w.checkInterest(fn)
	for n := range known {
		if !covered(n) {
			fn(n)
		}
	}
	return covered
}

// checkInterest is the first part of fullCheck: it calls fn for every
// resource of interest, and returns whether a name is among them.
func (w *watch) checkInterest(fn func(n string)) (covered func(n string) bool) {
	ts, sub, vis := w.ts, w.sub, w.vis()
	subscribed, wild := sub.SubscribedResources(), sub.IsWildcard()
	covered = w.covered()
	if wild {
		// In order: a pass finds the resources of names in order with
		// a cursor (finder).
		for _, n := range ts.AllNames().All() {
			if vis == nil || vis.sees(n) {
				fn(n)
			}
		}
	} else {
		for n := range subscribed {
			fn(n)
		}
	}
	return covered
}
