package xds

import (
	"slices"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/xdsbridge/xdsbridge/xds/store"
)

// Clusters before their assignments, per stream.
//
// Each type of an ADS stream has its own watch, and a type waits for the
// ACK of its last response before it gets the next (xDS flow control). A
// cluster change can therefore find the stream's CDS watch waiting for an
// ACK while its EDS watch is open; the assignment, re-versioned with its
// cluster, would reach the client before the cluster, and a cluster that
// warms after it waits for an assignment it already has. So the cache
// follows, per stream, which cluster versions it has sent, and holds back
// an assignment whose cluster it has not sent yet; it goes with the first
// EDS response after that cluster's CDS response.
//
// The stream of a watch is known from the request: the delta stream
// handler names its stream with each watch (Cache.newDeltaWatch; a
// re-armed watch keeps it), Server's callbacks note each sotw request's
// stream before the stream handler creates its watch, and both tell the
// cache when a stream ends. A cache served otherwise (tests driving it
// directly) does no holding back.

// streamState is what the cache follows of one stream across its types,
// for ordering (clusters, assignments, held routes and interims) and sync
// status; what the client holds of each type is its handler's (deltaHeld,
// sotwHeld). Guarded by Cache.mu; dropped when the stream ends.
type streamState struct {
	key streamKey
	// vis: what the stream's client may read (xds.authorization
	// resources); nil: everything. Set when the stream opens, before its
	// first request, and never changed.
	vis *visibility
	// cds: the clusters sent on the stream (nil: none yet, so nothing is
	// held back unless a CDS response is pending).
	cds *sentClusters
	// eds: the stream's open EDS watch, to wake with what it held back
	// when the clusters are sent.
	eds *watch
	// A sotw CDS response handed to the server, until it is sent.
	pendingCDS  *sentClusters
	pendingResp *discovery.DiscoveryResponse
	// types: per type, the stream's record of it (streamType).
	types byType[*streamType]
	// Routes after their clusters' assignments (routehold.go): the
	// assignments sent on the stream (by name), those of sotw responses
	// handed to the server and not sent yet, whether the stream ever
	// asked for assignments, and its open RDS watch.
	edsSent    sentAssignments
	pendingEDS map[*discovery.DiscoveryResponse][]string
	edsSeen    bool
	rds        *watch
	// routes: per RouteConfiguration, the versions a sotw stream holds
	// and was last sent, for make before break (mbb.go).
	routes map[string]map[string]*sentRoute
	cdsw   *watch // the open sotw CDS watch (mbb.go)
}

// streamType is what the cache follows of one stream's type, in one
// record: an ACK (rearmDelta: cancelLocked, then createLocked) reads and
// writes it through its watch (watch.st), with no lookup by type URL.
// Owned by the stream's state (streamState.types) and guarded by
// Cache.mu, as it is. A record is made when the stream's type is first
// noted (noteRequest) or watched (createLocked), and never dropped: a
// stream has a few types, and its records go with it. A field's zero
// value is "none", as a missing entry of the maps it replaces was.
type streamType struct {
	// last: the latest watch (until cancelled), whose state the sync
	// status reads (syncstatus.go).
	last *watch
	// inflight: a delta response queued but not installed when the server
	// replaced its watch; held: what a delta watch the server replaced had
	// held back (see Cache.cancel). Both taken by the next watch
	// (takeQueued).
	inflight *deltaResponse
	held     []string
	// noted: the sotw request noted and not yet taken by a watch (a delta
	// stream's watches name their stream themselves).
	noted any
	// sync: what was sent and answered, for the sync status; a record
	// only once sync.made (rec): a type only noted has none. Inline (one
	// miss less per ACK); the record is never dropped or moved, so &sync
	// stays valid with it, though no reader keeps it past c.mu.
	sync syncRec
}

// typ returns the stream's record of type url, made if it has none.
// Under c.mu.
func (st *streamState) typ(url string) *streamType {
	if t := st.types.at(url); t != nil {
		return t
	}
	t := &streamType{}
	st.types.set(url, t)
	return t
}

// sentClusters says which cluster versions a stream was sent: every
// cluster of interest current at generation gen, except those of rest
// (delta; a sotw response carries every cluster).
type sentClusters struct {
	gen   uint64
	rest  []string            // sorted
	wild  bool                // interest: every cluster
	names map[string]struct{} // interest, when not wild (copied)
}

// noteRequest records the stream of a request; the watch the stream
// handler creates for it next takes it. A request the server ignores (a sotw
// request with a stale nonce) is replaced by the next of its type, and
// all go with the stream. A request of a stream not registered while
// streams are (streamOf) is not noted: its watch is refused.
func (c *Cache) noteRequest(req any, key streamKey, typeURL string) {
	c.lock()
	defer c.unlock()
	st := c.streamOf(key)
	if st == nil {
		return
	}
	t := st.typ(typeURL)
	if t.noted != nil {
		delete(c.requests, t.noted)
	}
	t.noted = req
	c.requests[req] = st
}

// streamOf returns the state of stream key, made if it has none yet,
// unless the server registers its streams (c.registered): then only a
// registered stream has one, and streamOf returns nil for any other.
// Under c.mu.
func (c *Cache) streamOf(key streamKey) *streamState {
	st := c.streams[key]
	if st == nil {
		if c.registered {
			return nil
		}
		st = newStreamState(key, nil)
		c.streams[key] = st
	}
	return st
}

// openStream registers a stream before its first request (the server's
// stream-open callback, when it authorizes its clients): vis is what its
// client may read, nil for everything. Once streams are registered, a
// stream that was not has no state and gets nothing (streamOf).
func (c *Cache) openStream(key streamKey, vis *visibility) {
	c.lock()
	defer c.unlock()
	c.streams[key] = newStreamState(key, vis)
	c.registered = true
}

// newStreamState is the state of a stream whose client may read what vis
// sees (nil: everything), before its first watch.
func newStreamState(key streamKey, vis *visibility) *streamState {
	return &streamState{key: key, vis: vis}
}

// streamClosed forgets a stream.
func (c *Cache) streamClosed(key streamKey) {
	c.lock()
	defer c.unlock()
	if st := c.streams[key]; st != nil {
		for _, t := range st.types.all() {
			if t.noted != nil {
				delete(c.requests, t.noted)
			}
		}
		delete(c.streams, key)
	}
}

// stream returns the state of the stream of w's request, if noted.
func (c *Cache) stream(w *watch) *streamState {
	var req any = w.sreq
	if w.delta {
		req = w.dreq
	}
	st, ok := c.requests[req]
	if !ok {
		return nil
	}
	delete(c.requests, req)
	for _, t := range st.types.all() {
		if t.noted == req {
			t.noted = nil // (then leaves the loop: a request is noted once)
			break
		}
	}
	return st
}

// sentCDS records a CDS response to w: on a delta stream it is as good as
// sent (the delta server sends every response it is handed, in order), so
// the stream's EDS watch may be woken at once. The sotw server drops a
// queued response when a request of its type comes first: there the
// response counts once the server tells it sent it (sotwSent).
func (c *Cache) sentCDS(w *watch, rest []string, resp *discovery.DiscoveryResponse) {
	st := w.stream
	if st == nil {
		return
	}
	sc := &sentClusters{gen: w.ts.Gen, rest: rest}
	sc.interest(w)
	if !w.delta {
		st.pendingCDS, st.pendingResp = sc, resp
		return
	}
	st.cds = sc
	c.wakeEDS(st)
}

// cdsCurrent notes that w, a CDS watch left open, has nothing to send:
// its stream holds every cluster of interest as of now.
func (c *Cache) cdsCurrent(w *watch) {
	st := w.stream
	if st == nil || w.done || !c.ready || (!w.delta && st.pendingCDS != nil) {
		return
	}
	sc := &sentClusters{gen: w.ts.Gen}
	sc.interest(w)
	st.cds = sc
	c.wakeEDS(st)
}

// sotwSent is told by the server of each sotw response it sends.
func (c *Cache) sotwSent(key streamKey, resp *discovery.DiscoveryResponse) {
	switch resp.GetTypeUrl() {
	case ClusterType:
	case EndpointType:
		c.sotwSentEDS(key, resp)
		return
	default:
		return
	}
	c.lock()
	defer c.unlock()
	st := c.streams[key]
	if st == nil || st.pendingResp != resp {
		return
	}
	st.cds, st.pendingCDS, st.pendingResp = st.pendingCDS, nil, nil
	c.wakeEDS(st)
}

// cdsInterest notes the CDS interest of w's stream as of w's request:
// assignments held back for clusters it no longer wants may go.
func (c *Cache) cdsInterest(w *watch) {
	if st := w.stream; st != nil && st.cds != nil {
		st.cds.interest(w)
		c.wakeEDS(st)
	}
}

func (sc *sentClusters) interest(w *watch) {
	sc.wild, sc.names = w.sub.IsWildcard(), nil
	if !sc.wild {
		sc.names = make(map[string]struct{}, len(w.sub.SubscribedResources()))
		for n := range w.sub.SubscribedResources() {
			sc.names[n] = struct{}{}
		}
	}
}

// wakeEDS answers the stream's open EDS watch if it held assignments back.
func (c *Cache) wakeEDS(st *streamState) {
	if e := st.eds; e != nil && len(e.heldBack) > 0 {
		c.tryRespond(e, e.heldBack)
	}
	c.wakeRDS(st)
}

// clusterHolder returns what an EDS watch w's response must hold back:
// the assignments whose cluster its stream has not been sent; the zero
// value when nothing is held back.
func (c *Cache) clusterHolder(w *watch, inOrder int) clusterHold {
	st := w.stream
	clusters := c.types[ClusterType]
	if st == nil || (st.cds == nil && st.pendingCDS == nil) || clusters == nil {
		return clusterHold{}
	}
	return clusterHold{c: c, st: st, clusters: clusters, inOrder: inOrder}
}

// clusterHold is an EDS response's hold (clusterHolder): a value, not a
// closure, so that a pass allocates nothing for it. Zero: holds nothing.
type clusterHold struct {
	c        *Cache
	st       *streamState
	clusters *typeState
	// The entries come in the order of their names, and an assignment is
	// named after its cluster, mostly: their clusters are found with a
	// cursor (finder) from the first in a pass of inOrder sorted names
	// (as many as make a cursor worth it), else past the first few.
	inOrder, calls int
	find           resourceFinder
}

func (h *clusterHold) holds(e *store.Entry) bool {
	if e.Dep == nil || e.Dep.TypeURL != ClusterType {
		return false
	}
	if h.calls++; h.calls == 1 || h.calls == h.c.minCursor {
		h.find = h.c.finder(h.clusters, max(h.calls, h.inOrder))
	}
	// A sotw CDS response still queued is sent before this one, or
	// dropped (then the client keeps what it was sent): the cluster
	// must be in both.
	st := h.st
	cl, _ := h.find.find(e.Dep.Name)
	return cl != nil && st.vis.sees(cl.Name) && ((st.cds != nil && !st.cds.sent(cl)) || (st.pendingCDS != nil && !st.pendingCDS.sent(cl)))
}

// sent reports whether the stream was sent cluster e at its version, or
// does not want it.
func (sc *sentClusters) sent(e *store.Entry) bool {
	if !sc.wild {
		if _, ok := sc.names[e.Name]; !ok {
			return true
		}
	}
	if e.Gen > sc.gen {
		return false
	}
	// (A new client's rest is the end of the type's names, and the
	// clusters it was sent come before it.)
	if len(sc.rest) == 0 || e.Name < sc.rest[0] {
		return true
	}
	_, inRest := slices.BinarySearch(sc.rest, e.Name)
	return !inRest
}

// withRest adds names to a rest (sorted names), in a new slice.
func withRest(rest, names []string) []string {
	if len(names) == 0 {
		return rest
	}
	all := slices.Concat(rest, names)
	slices.Sort(all)
	return slices.Compact(all)
}
