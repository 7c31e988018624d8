package xds

import (
	"slices"
	"sort"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/xdsbridge/xdsbridge/xds/store"
)

// A delta watch's response: the names it looks at, what it sends and
// removes, and the state it installs (deltaPass).

// respondDelta computes and sends the response for a delta watch, looking
// only at seq and oldRest (the client's rest; each sorted, walked
// together in order) unless
// full. It reports whether a response was sent.
func (c *Cache) respondDelta(w *watch, seq, oldRest []string, fromRest, full, evenIfEmpty bool) bool {
	if len(seq)+len(oldRest) == 0 && !full && !evenIfEmpty {
		// Nothing to look at, nothing to send (the ACK of a response
		// with nothing changed since): no pass.
		w.heldBack = nil
		return false
	}
	p := &deltaPass{
		c: c, w: w, ts: w.ts, ds: &w.ds, known: w.known,
		subscribed: w.sub.SubscribedResources(), wild: w.sub.IsWildcard(),
		walk: newNameWalk(oldRest, seq), fromRest: fromRest, full: full,
		newSub: nameCursor{names: w.ds.newSub}, rest: nameCursor{names: w.ds.rest},
	}
	p.isSub = p.subscriptionHas()
	// The number of names the pass looks at in order.
	inOrder := p.walk.len()
	switch {
	case full && p.wild:
		inOrder = len(w.ts.Resources) // fullCheck
	case full:
		inOrder = 0
	}
	p.find = c.finder(w.ts, inOrder)
	p.hold = c.holder(w, inOrder)
	defer p.giveNames()
	rest := p.collect()
	slices.Sort(p.later)
	w.heldBack = p.later

	if len(p.changed) == 0 && len(p.removed) == 0 && !evenIfEmpty {
		return false
	}
	rest = withRest(rest, w.heldBack)
	sort.Strings(p.removed)
	changed, removed, ts := p.changed, p.removed, w.ts
	next, sent := p.record(rest)
	r := &deltaResponse{}
	res, wire := r.res[:0], r.wires[:0]
	if len(changed) > len(r.res) {
		res = make([]*discovery.Resource, 0, len(changed))
		wire = make([][]byte, 0, len(changed))
	}
	find := c.finder(ts, len(changed))
	newest := ts.newestGen(removed)
	for _, n := range changed {
		e, _ := find.find(n)
		res = append(res, e.Delta)
		if wire != nil && e.Wire != nil {
			wire = append(wire, e.Wire)
		} else {
			wire = nil
		}
		newest = max(newest, e.Gen)
	}
	// The type's generation counts every change, hidden ones too: a
	// restricted client is not told it (system_version_info is for
	// debugging only).
	sysVersion := ts.genVersion()
	if w.vis() != nil {
		sysVersion = ""
	}
	w.done = true
	r.req, r.wire, r.w, r.next, r.sent, r.pred = w.dreq, wire, w, next, sent, w.ds.pred
	r.msg = discovery.DeltaDiscoveryResponse{
		TypeUrl:           ts.URL,
		Resources:         res,
		RemovedResources:  removed,
		SystemVersionInfo: sysVersion,
	}
	r.resp = &r.msg
	w.resp = r
	c.handed(w, w.resp, newest)
	// Sent under c.mu: this does not block (the stream's channel holds
	// two responses per type, deltaserver.go). A commit's response is
	// handed to its stream after the commit (commitObserver.Applied).
	if !c.committing {
		w.dch.put(w.resp)
	} else if l := w.dch.putHanded(w.resp); l != nil {
		c.handOffs = append(c.handOffs, l)
	}
	switch ts.URL {
	case ClusterType:
		c.sentCDS(w, rest, nil)
	case EndpointType:
		c.sentEDS(w, changed, removed, nil)
	}
	return true
}

// deltaPass is one computation of a delta watch's response: the names it
// looks at (walk: the client's rest and seq, or everything of interest if
// full) and what the response carries. It lives for one call of respondDelta, under c.mu.
type deltaPass struct {
	c          *Cache
	w          *watch
	ts         *typeState
	ds         *deltaState
	known      *deltaHeld // the state: its explicit versions (version)
	subscribed map[string]struct{}
	wild       bool
	// isSub: whether a name considered is in subscribed (subscriptionHas).
	isSub subscribedCheck
	// walk: the names looked at unless full, in order (respondDelta's
	// rest and seq).
	walk     nameWalk
	fromRest bool // the names are the rest as read (deltaState.allRest)
	full     bool
	hold     entryHolder // c.holder(w, the names in order)
	// find: finds the resources of the names looked at (finder).
	find resourceFinder

	// changed: names to send (size: their bytes); removed: to report
	// removed; later: held back by hold.
	changed, removed, later []string
	size                    int
	collected               int // names changed held before the bound cut it
	// newSub and rest tell the names the request subscribes to
	// (ds.newSub) and those of the rest (ds.rest), asked mostly in order:
	// a name after the last one asked costs a comparison or a short
	// search from there, not a binary search of thousands.
	newSub, rest nameCursor
}

// lookup returns resource n as the client sees it (watch.lookup).
func (p *deltaPass) lookup(n string) (*store.Entry, bool) {
	e, ok := p.find.find(n)
	if ok && p.w.hidden(n) {
		return nil, false
	}
	return e, ok
}

// held reports the version the client holds of n, if known (held), or
// whether it may hold another one (maybe); e and exists are n's resource
// as the client sees it (lookup).
func (p *deltaPass) held(n string, e *store.Entry, exists bool) (version string, held, maybe bool) {
	ts, ds, w := p.ts, p.ds, p.w
	// Subscribed by this request, or still to be sent (of the rest),
	// it is sent, or reported removed; a resource rejected alone is
	// not, while it is at the version rejected.
	if ds.complete && p.newSub.has(n) {
		return "", false, true
	}
	if w.hidden(n) {
		// Not to be read by this client: it does not exist. A client
		// claiming to hold it is told it is removed, a request
		// naming it that it does not exist (also from the rest, where
		// a split response left it: only such names are kept there);
		// a change to it is nothing.
		if v, ok := p.known.version(ts, n); ok {
			return v, true, false
		}
		// (allRest holds for the names of the rest as read, not for
		// those of a commit waking the watch.)
		if p.fromRest || p.rest.has(n) {
			return "", false, true
		}
		_, isSub := p.subscribed[n]
		return "", false, isSub && !ds.complete
	}
	if ds.allRest || p.rest.has(n) {
		return "", false, true
	}
	// (Not hidden: e and exists are the type's.)
	if v, ok := ds.rejected[n]; ok && exists && e.Version == v {
		return v, true, false
	}
	if v, ok := p.known.version(ts, n); ok {
		return v, true, false
	}
	if !ds.complete {
		_, isSub := p.subscribed[n]
		return "", false, isSub && !exists // a first request is told what does not exist
	}
	if _, isSub := p.subscribed[n]; ds.wildOn && !isSub {
		// Not of interest at G, unless a response not answered sent it
		// (ds.carried): the client keeps it if that response arrives
		// after the wildcard subscription; if it arrived before the
		// unsubscription, the client dropped it then (the protocol does
		// not ask a client to answer a response before its next
		// request). Either way it is answered again: sent, or reported
		// removed.
		if sent, ok := ds.carried[n]; ok && sent {
			return "", false, true
		}
		return "", false, false
	}
	if (exists && e.Gen > ds.gen) || ts.DeletedAt[n] > ds.gen || (ds.stale && !exists) {
		return "", false, true
	}
	if !exists {
		return "", false, false
	}
	return e.Version, true, false
}

// consider looks at name n: to send, to report removed, or nothing. Each
// name is considered once (names are unique; a full check dedupes). "" and
// "*" are not names: a client naming a resource with one is ignored.
func (p *deltaPass) consider(n string) {
	e, send, remove := p.decide(n)
	switch {
	case send:
		if p.hold.holds(e) {
			p.later = append(p.later, n)
			return
		}
		p.changed = append(p.changed, n)
		p.size += e.DeltaSize
	case remove:
		p.removed = append(p.removed, n)
	}
}

// decide reports whether name n is to be sent (e: its resource) or
// reported removed.
func (p *deltaPass) decide(n string) (e *store.Entry, send, remove bool) {
	if n == "" || n == "*" {
		return nil, false, false
	}
	e, exists := p.lookup(n)
	isSub := false
	if !p.wild {
		isSub = p.isSub.has(n)
	}
	switch {
	case exists && (p.wild || isSub):
		v, h, _ := p.held(n, e, exists)
		return e, !h || v != e.Version, false
	case p.wild || isSub:
		_, h, maybe := p.held(n, e, exists)
		return e, false, h || maybe
	default:
		_, ok := p.known.version(p.ts, n)
		return e, false, ok
	}
}

// maxPreallocated bounds the room a pass makes for the names it sends.
const maxPreallocated = 256

// names returns room for n names to send: the cache's own, unless
// another pass holds it (a pass nested in the handing of another's
// response, as an RDS watch woken by the assignments sent, makes its
// own). The names a pass sends do not outlive it: its record and rest are
// runs of the type's names or copies, its response holds the resources,
// and the record of assignments sent copies them; so the room is reused,
// not made per pass (a first sync makes one pass per part, each with room
// for a part's names, or for every name of the type).
func (p *deltaPass) names(n int) []string {
	if b := p.c.passNames; cap(b) >= n {
		p.c.passNames = nil
		return b[:0]
	}
	p.c.passNames = nil
	return make([]string, 0, n)
}

// giveNames gives the room of the names sent back to the cache, cleared
// (it holds no name past the pass).
func (p *deltaPass) giveNames() {
	if p.changed != nil && p.c.passNames == nil {
		clear(p.changed[:max(len(p.changed), p.collected)])
		p.c.passNames = p.changed[:0]
	}
}

// over reports whether a response of count resources of size bytes is
// above the size bound, or above the limit while a rejected response is
// halved: it then carries a first part (a resource larger than the bound
// goes alone); the rest is kept in the state, and follows the ACK.
func (p *deltaPass) over(count, size int) bool {
	maxBytes := p.c.maxBytes
	return count > 1 && ((maxBytes > 0 && size > maxBytes-envelope(p.ts.URL)) || (p.ds.limit > 0 && count > p.ds.limit))
}

// collect considers the names of the pass and returns the rest: the
// sorted names not sent for the bound.
func (p *deltaPass) collect() (rest []string) {
	if p.full {
		return p.collectFull()
	}
	// Sorted: stop at the bound, the names not looked at are the rest.
	// (Each of them that exists and is of interest would be sent: it
	// changed since G, is of the rest or newly subscribed.) Room for a
	// part of a first sync's names (a response of the default size bound
	// holds a few hundred assignments), not for all of a long rest.
	p.changed = p.names(min(p.walk.len(), maxPreallocated))
	for {
		restTail, seqTail := p.walk.tails()
		n, ok := p.walk.next()
		if !ok {
			return nil
		}
		p.consider(n)
		if p.over(len(p.changed), p.size) {
			p.collected = len(p.changed)
			p.changed = p.changed[:len(p.changed)-1]
			if p.fromRest {
				return seqTail // of the rest as kept: not copied
			}
			unsubs := p.ds.unsub
			if len(unsubs) == 0 && p.w.vis() == nil {
				return p.restOf(restTail, seqTail)
			}
			tail := mergeNames(restTail, seqTail)
			if len(unsubs) > 0 {
				// A name the request unsubscribed is looked at, and
				// not sent for that: one still held through the
				// wildcard (a phantom unsubscription) stays held. Each
				// name of the rest is sent or reported removed: only
				// such a one goes there.
				tail = slices.DeleteFunc(slices.Clone(tail), func(n string) bool {
					if _, ok := slices.BinarySearch(unsubs, n); !ok {
						return false
					}
					_, send, remove := p.decide(n)
					return !send && !remove
				})
			}
			if p.w.vis() != nil {
				// Of the hidden names, only those the client is to be
				// told of: a change to another is nothing.
				tail = slices.DeleteFunc(slices.Clone(tail), func(n string) bool {
					e, exists := p.w.lookup(n)
					_, h, maybe := p.held(n, e, exists)
					return p.w.hidden(n) && !h && !maybe
				})
			}
			return p.ts.AllNames().Run(tail)
		}
	}
}

// restOf returns the rest a pass leaves when its response is cut by the
// bound: rest, of the rest the pass walked, and seq, of the other names,
// which it did not reach (each sorted). A run of the type's names is
// shared with them (Run): a rest kept as a run, with the names a request
// subscribes to when they follow it, costs a search and the request's
// names (Join), not the rest's; another (the client's own copy, after a
// rejection, or a run of the names before one came or went) costs a
// comparison of each name, and is a run of the type's names again when
// its names are, not a copy each client keeps.
func (p *deltaPass) restOf(rest, seq []string) []string {
	sn := p.ts.AllNames()
	if len(rest) > 0 {
		if run := sn.Join(rest, seq); run != nil {
			return run
		}
	}
	names := mergeNames(rest, seq)
	if len(rest) == 0 || len(seq) == 0 {
		return sn.Run(names) // rest or seq itself
	}
	if run := sn.Join(nil, names); run != nil {
		return run
	}
	return names // a new slice
}

// collectFull considers everything of interest, then what else may be
// held: explicit names, and of a compact state the names changed since G
// (deleted ones among them), the rest and what responses on their way
// carried; each once.
func (p *deltaPass) collectFull() (rest []string) {
	ts, ds := p.ts, p.ds
	var covered func(n string) bool
	// A full check of a wildcard walks the type's names in order: what it
	// sends is sorted unless names of another order follow (explicit
	// versions, a resume's, those of a compact state), and is not sorted
	// again (a comparison of each pair of a first sync's 20,000 names
	// reads every name's bytes, which the walk does not).
	sorted := false
	if r := p.known.resumed; r != nil {
		covered = p.resumedCheck(r)
	} else {
		p.changed = p.names(len(ts.Resources))
		covered = p.w.fullCheck(p.known.versions, p.consider)
		sorted = p.wild && len(p.known.versions) == 0
	}
	if ds.complete {
		var extra []string
		if !ds.stale {
			extra = ts.SinceLog(ds.gen)
		}
		extra = append(extra, ds.rest...)
		for n := range ds.carried {
			extra = append(extra, n)
		}
		slices.Sort(extra)
		inOrder := len(p.changed)
		for _, n := range slices.Compact(extra) {
			if _, isKnown := p.known.version(ts, n); !isKnown && !covered(n) {
				p.consider(n)
			}
		}
		sorted = sorted && len(p.changed) == inOrder
	}
	if !sorted {
		sort.Strings(p.changed)
	}
	total := 0
	find := p.c.finder(ts, len(p.changed))
	for i, n := range p.changed {
		e, _ := find.find(n)
		total += e.DeltaSize
		if p.over(i+1, total) {
			rest = ts.AllNames().Run(p.changed[i:])
			p.collected = len(p.changed)
			p.changed = p.changed[:i]
			return rest
		}
	}
	return nil
}

// record returns what the client holds once it has the response, in the
// compact form: everything of interest as of now, but the rest; and what
// the response carries (sent), until the client answers. The state is
// new: the stream handler installs it only when it sends the response.
func (p *deltaPass) record(rest []string) (next *deltaHeld, sent *deltaSent) {
	ts, ds := p.ts, p.ds
	rec := &deltaRecord{}
	next = &rec.held
	*next = deltaHeld{
		compact: true, wild: p.wild, gen: ts.Gen,
		rest: rest, plan: ds.plan, rejected: ds.stillRejected(ts),
		inflight: append(rec.inflight[:0], ds.carry...), // and sent, when installed
	}
	if len(p.changed)+len(p.removed) == 0 {
		return next, nil
	}
	// Copies, or runs of the type's sorted names: the record lives until
	// the client answers, and p.changed of a full check has room for every
	// name of the type. A part of a first sync is a run (one copy of its
	// names held by the fleet); below minCursor names, a copy costs less
	// than finding the run (and than sorting the type's names again, after
	// a name came or went).
	sr := &sentRecord{}
	var changed []string
	switch {
	case len(p.changed) >= minCursor:
		changed = ts.AllNames().Run(p.changed)
	case len(p.changed) == 1:
		sr.name[0] = p.changed[0]
		changed = sr.name[:]
	default:
		changed = slices.Clone(p.changed)
	}
	sent = &sr.sent
	*sent = deltaSent{changed: changed, removed: slices.Clone(p.removed)}
	if len(changed) == 1 {
		if e, ok := ts.Resources[changed[0]]; ok {
			sent.version = e.Version
		}
	}
	return next, sent
}

// deltaRecord is the state a response installs (deltaPass.record) in one
// allocation with room for the records of the common case: at most one
// other response unanswered when it is sent.
type deltaRecord struct {
	held     deltaHeld
	inflight [2]*deltaSent
}

// sentRecord is what a response carries, with room for the common
// response: of one resource. An allocation of its own, not the state's:
// the states installed while the response is unanswered keep its record,
// which would otherwise keep the state it installed, and through its
// records those before, as long as each response is sent before the one
// before it is answered.
type sentRecord struct {
	sent deltaSent
	name [1]string
}

// stillRejected returns the rejected resources that are still served at
// the version the client rejected; a new version or a deletion ends the
// record.
func (ds *deltaState) stillRejected(ts *typeState) map[string]string {
	var still map[string]string
	for n, v := range ds.rejected {
		if e, ok := ts.Resources[n]; ok && e.Version == v {
			if still == nil {
				still = map[string]string{}
			}
			still[n] = v
		}
	}
	return still
}
