package xds

import (
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/xdsbridge/xdsbridge/xds/store"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
)

// Per-client sync status (/debug/clients, xdsbridge status): for every
// stream and type, whether the client holds what the cache serves.
//
// The bookkeeping on the hot path is O(1) per request and response, under
// the cache lock the cache takes anyway: per stream and type, what the last
// response handed to the server was (its type generation, the newest
// commit among what it carried, when), its nonce once the server sends it,
// whether the client answered it (ACK or NACK, from the watch the answer
// creates) and a ring of change → ACK latencies. What the client holds is
// not copied: a status is computed on demand from the state the cache
// already keeps per stream (the compact delta state, the explicit sotw
// state) in the stream's latest watch, which costs, per stream and type,
// a lookup per resource of interest (every resource of the type for a
// wildcard subscription), under the cache lock (taken per stream).
//
// Versions (Current, Acked, Sent) are type generations: the cache counts
// the changes of each type, and a response is computed at the generation
// current then. A client can be SYNCED with Acked < Current: the changes
// since were to resources it does not subscribe to (or may not read).
// Per-resource versions are in ClientDetail.

// syncRec is what the cache follows of one stream's type for its status.
type syncRec struct {
	// pend: the latest response handed to the server and not sent yet
	// (its generation, the newest commit generation among what it
	// carries, when), until the server's response callback gives it a
	// nonce.
	pend     any
	pendGen  uint64
	pendMax  uint64
	everSent bool
	made     bool   // the record exists (streamType.rec): its type is shown
	lastGen  uint64 // of the latest response handed
	// The latest response sent: its nonce, generation, newest commit
	// generation, and whether the client answered it.
	nonce            string
	sentGen, sentMax uint64
	answered         bool
	outstandingSince time.Time
	// The last answer: an ACK (acked*) or a NACK (lastNACK, nack).
	hasAcked   bool
	ackedGen   uint64
	lastNACK   bool
	nack       *NACKStatus
	subscribed int
	wildcard   bool
	// A ring of change → ACK latencies, allocated at the first sample.
	lat           []time.Duration
	latNext, latN int
}

// outstanding: a response is handed or sent and not answered.
func (r *syncRec) outstanding() bool { return r.pend != nil || (r.nonce != "" && !r.answered) }

// settle records the pending response as sent if it is a delta response
// the stream handler has sent since (deltaResponse.sentOut): a delta
// response's send takes no lock of the cache, and what it sent is read
// here, under c.mu, before the record is. Each reader of the record
// settles it first.
func (r *syncRec) settle() {
	if d, ok := r.pend.(*deltaResponse); ok && d.sentOut.Load() {
		r.sent(d.resp.GetNonce())
	}
}

// sent records the pending response as sent with nonce.
func (r *syncRec) sent(nonce string) {
	r.nonce, r.sentGen, r.sentMax, r.answered, r.pend = nonce, r.pendGen, r.pendMax, false, nil
}

// rec returns the sync record of t, made if it has none.
func (t *streamType) rec() *syncRec {
	t.sync.made = true
	return &t.sync
}

// noteAnswer records, when w is created, what its request answers: the
// latest response sent on its stream and type (an ACK, or a NACK with its
// detail), or an older one (nothing). Under c.mu.
func (c *Cache) noteAnswer(w *watch) {
	if w.st == nil {
		return
	}
	r := w.st.rec()
	r.settle()
	r.subscribed, r.wildcard = len(w.sub.SubscribedResources()), w.sub.IsWildcard()
	if r.wildcard {
		r.subscribed = 0
	}
	var nonce string
	var detail *rpcstatus.Status
	if w.delta {
		nonce, detail = w.dreq.GetResponseNonce(), w.dreq.GetErrorDetail()
	} else {
		// A sotw response still queued was dropped by the server for
		// this request (sotwserver.go): it will not be sent.
		r.pend = nil
		nonce, detail = w.sreq.GetResponseNonce(), w.sreq.GetErrorDetail()
	}
	if r.answered || r.nonce == "" || nonce != r.nonce {
		return
	}
	now := time.Now()
	r.answered = true
	if detail != nil {
		msg, _ := bound(detail.GetMessage(), "", MaxNACKMessageBytes)
		r.lastNACK = true
		r.nack = &NACKStatus{Version: strconv.FormatUint(r.sentGen, 10), Detail: msg, At: now}
		return
	}
	// A change → ACK sample: the response carried a version committed
	// after the state the client acknowledged before (not a new client's
	// first state, nor a newly subscribed resource committed long ago).
	if r.hasAcked && r.sentMax > r.ackedGen {
		if at, ok := w.ts.commitTime(r.sentMax); ok {
			d := now.Sub(at)
			if r.lat == nil {
				r.lat = make([]time.Duration, SyncLatencySamples)
			}
			r.lat[r.latNext] = d
			r.latNext = (r.latNext + 1) % SyncLatencySamples
			r.latN = min(r.latN+1, SyncLatencySamples)
			if c.ackObserver != nil {
				c.ackObserver(w.ts.URL, d)
			}
		}
	}
	r.hasAcked, r.ackedGen, r.lastNACK = true, r.sentGen, false
}

// handed records a response handed to the server for w: resp identifies
// it when sent (a *deltaResponse marks itself sent, settle; a sotw
// response is told by the server's callback, responseSent); maxGen is the
// newest commit generation among what it carries. Under c.mu.
func (c *Cache) handed(w *watch, resp any, maxGen uint64) {
	if w.st == nil {
		return
	}
	r := w.st.rec()
	r.settle()
	if !r.outstanding() {
		r.outstandingSince = time.Now()
	}
	r.pend, r.pendGen, r.pendMax, r.lastGen, r.everSent = resp, w.ts.Gen, maxGen, w.ts.Gen, true
}

// responseSent records the nonce of a sotw response the server sends (its
// response callback, before the client can answer it).
func (c *Cache) responseSent(key streamKey, typeURL string, resp any, nonce string) {
	c.lock()
	defer c.unlock()
	st := c.streams[key]
	if st == nil {
		return
	}
	if t := st.types.at(typeURL); t != nil && t.sync.made && t.sync.pend == resp {
		t.sync.sent(nonce)
	}
}

// commitTime returns when generation gen was committed, if it is still in
// the change log.
func (ts *typeState) commitTime(gen uint64) (time.Time, bool) {
	i := sort.Search(len(ts.Log), func(i int) bool { return ts.Log[i].Gen >= gen })
	if i < len(ts.Log) && ts.Log[i].Gen == gen {
		return ts.Log[i].At, true
	}
	return time.Time{}, false
}

// newestGen is the newest commit generation among names (deletions
// included).
func (ts *typeState) newestGen(names ...[]string) uint64 {
	var g uint64
	for _, l := range names {
		for _, n := range l {
			if e, ok := ts.Resources[n]; ok {
				g = max(g, e.Gen)
			} else {
				g = max(g, ts.DeletedAt[n])
			}
		}
	}
	return g
}

// heldOf returns, for w (the stream's latest watch, its state as read),
// the version the client holds of existing resource e of interest ("" for
// none or unknown) and whether it is the rejected current one.
func (w *watch) heldOf(e *store.Entry) (held string, rejected bool) {
	n := e.Name
	if _, ok := slices.BinarySearch(w.heldBack, n); ok {
		return "", false
	}
	if !w.delta {
		ss := &w.ss
		if v, ok := ss.rejected[n]; ok && v == e.Version {
			return ss.held.at(n), true
		}
		return ss.held.at(n), false
	}
	ds := &w.ds
	rest := ds.rest
	if ds.allRest {
		rest = ds.seq
	}
	if _, ok := slices.BinarySearch(rest, n); ok {
		return "", false
	}
	if v, ok := ds.rejected[n]; ok && v == e.Version {
		return "", true
	}
	if ds.complete && ds.subscribes(n) {
		return "", false
	}
	if v, ok := w.known.version(w.ts, n); ok {
		return v, false
	}
	if !ds.complete || ds.stale {
		return "", false
	}
	if _, isSub := w.sub.SubscribedResources()[n]; ds.wildOn && !isSub {
		return "", false
	}
	if e.Gen > ds.gen {
		return "", false // an older version
	}
	return e.Version, false
}

// interest calls fn for each existing resource of interest to w's client.
func (w *watch) interest(fn func(e *store.Entry)) {
	if w.sub.IsWildcard() {
		for n, e := range w.ts.Resources {
			if !w.hidden(n) {
				fn(e)
			}
		}
		return
	}
	for n := range w.sub.SubscribedResources() {
		if e, ok := w.lookup(n); ok {
			fn(e)
		}
	}
}

// syncStatus computes the type statuses of the streams keyed, and with
// detail each one's resources. It takes c.mu once per stream, not across
// them: a stream's status costs a lookup per resource of interest, and
// commits and requests must not wait for every stream's (each stream's
// status is consistent on its own; no reader needs them at one instant).
func (c *Cache) syncStatus(keys []streamKey, detail bool) (map[streamKey][]TypeStatus, map[streamKey][]ResourceSync) {
	out := make(map[streamKey][]TypeStatus, len(keys))
	var res map[streamKey][]ResourceSync
	if detail {
		res = map[streamKey][]ResourceSync{}
	}
	for _, k := range keys {
		c.streamSyncStatus(k, detail, out, res)
	}
	return out, res
}

// streamSyncStatus adds stream k's statuses to out (and res, with detail).
func (c *Cache) streamSyncStatus(k streamKey, detail bool, out map[streamKey][]TypeStatus, res map[streamKey][]ResourceSync) {
	c.lock()
	defer c.unlock()
	st := c.streams[k]
	if st == nil {
		return
	}
	types := make([]*typeState, 0, st.types.len())
	for u, t := range st.types.all() {
		if ts := c.types[u]; ts != nil && t.sync.made {
			types = append(types, ts)
		}
	}
	slices.SortFunc(types, typeOrder)
	for _, ts := range types {
		t, rs := c.typeStatus(st, ts, detail)
		out[k] = append(out[k], t)
		if detail {
			res[k] = append(res[k], rs...)
		}
	}
}

func (c *Cache) typeStatus(st *streamState, ts *typeState, detail bool) (TypeStatus, []ResourceSync) {
	rec := st.types.at(ts.URL)
	r := &rec.sync
	r.settle()
	t := TypeStatus{Type: ShortType(ts.URL), TypeURL: ts.URL, Subscribed: r.subscribed, Wildcard: r.wildcard,
		Current: strconv.FormatUint(ts.Gen, 10)}
	if r.everSent {
		t.Sent = strconv.FormatUint(r.lastGen, 10)
	}
	if r.hasAcked {
		t.Acked = strconv.FormatUint(r.ackedGen, 10)
	}
	if r.latN > 0 {
		s := slices.Clone(r.lat[:r.latN])
		slices.Sort(s)
		t.LatencyLast = r.lat[(r.latNext+SyncLatencySamples-1)%SyncLatencySamples]
		t.LatencyP50 = s[(len(s)-1)*50/100]
		t.LatencyP99 = s[(len(s)-1)*99/100]
		t.Samples = r.latN
	}
	// What the client holds: the state of the stream's latest watch.
	var behind []string
	var rsync []ResourceSync
	var rejected bool
	oldest := uint64(0)
	w := rec.last
	if w != nil {
		w.interest(func(e *store.Entry) {
			held, rej := w.heldOf(e)
			ok := held == e.Version && !rej
			if !ok {
				behind = append(behind, e.Name)
				rejected = rejected || rej
				if oldest == 0 || e.Gen < oldest {
					oldest = e.Gen
				}
			}
			if detail {
				rsync = append(rsync, ResourceSync{Type: t.Type, Name: e.Name, Current: e.Version, Held: held, Synced: ok, Rejected: rej})
			}
		})
	}
	sort.Strings(behind)
	sort.Slice(rsync, func(i, j int) bool { return rsync[i].Name < rsync[j].Name })
	if len(behind) > MaxBehindNames {
		behind = behind[:MaxBehindNames]
	}
	t.Behind = behind
	switch {
	case !r.everSent:
		t.State = NotSent
	case r.lastNACK || (rejected && r.nack != nil && !r.outstanding()):
		t.State, t.NACK, t.Since = Nacked, r.nack, r.nack.At
	case r.outstanding() || !r.hasAcked:
		// (Not acknowledged: a response the server dropped for a newer
		// request, whose answer is still to come.)
		t.State, t.Since = Stale, r.outstandingSince
	case w == nil || w.done:
		t.State, t.Since = Stale, time.Now() // a request being processed
	case len(behind) > 0:
		t.State = Stale
		if at, ok := ts.commitTime(oldest); ok {
			t.Since = at
		}
	default:
		t.State = Synced
	}
	return t, rsync
}

// trackLast makes w its stream's latest watch of its type. Under c.mu.
func (c *Cache) trackLast(w *watch) {
	if w.st != nil {
		w.st.last = w
	}
}

// forgetLast: w is cancelled; the server changes its subscription state
// next (sotwserver.go, deltaserver.go), which the status must no longer
// read.
func (c *Cache) forgetLast(w *watch) {
	if w.st != nil && w.st.last == w {
		w.st.last = nil
	}
}
