package xds

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
)

// Delta client state. The returned-resources map the cache hands the
// go-control-plane server for a delta stream is compact: genKey → G says
// that the client holds, of every resource it was interested in at
// generation G, the version current at G (and knows that the others do not
// exist), except the names of the rest (restKey). Any other entry is an
// explicit version (initial_resource_versions of a reconnecting client,
// before its first response, or "" where the server asks for a resend).
// Keeping G instead of 5,000 name → version entries per Envoy is what
// keeps a fleet of Envoys subscribed to every assignment within memory;
// the versions at G are recovered from each resource's commit generation
// (entry.gen) and the deletion generations (deletedAt).
//
// The state also records what each response not yet answered carried
// (sentPrefix + nonce). A response counts as held once it is sent, and
// stops counting if the client rejects it (NACK): what it carried joins the
// rest, to be sent again in two halves (limitKey holds the plan: the
// sizes of the next responses), a rejected half halved again, until the
// resource the client refuses is alone: log2(n)+1 rejections for one bad
// resource among n, and the search goes on where it was for the next one.
// That resource, at that version, is then remembered (rejectedKey) and not
// sent again; a bad resource costs only itself, and a new version of it is
// sent as usual. Everything lives in the stream's own map, so it goes with
// the stream.

// nameSeq is a sorted list of names to look at: a slice, or names joined by
// sep (a kept rest, read without copying).
type nameSeq struct {
	list   []string
	joined string
}

// deltaState is a delta client's state as read when its watch is created.
type deltaState struct {
	// complete: the state is compact, at generation gen; wildOn: the
	// client subscribed to the wildcard since gen, so of the names it does
	// not subscribe by name it held none; stale: gen is older than the
	// change log.
	complete, wildOn, stale bool
	wildChanged, changed    bool
	gen                     uint64
	// newSub: names the request subscribes to. The client may hold them or
	// not; the protocol asks to send them (or report them removed) either way.
	newSub   map[string]struct{}
	rest     []string // sorted: names the client may hold older versions of
	allRest  bool     // every name looked at is of the rest (the ACK of a part)
	plan     plan     // sizes of the next responses, while a rejected one is halved
	limit    int      // plan[0]: resources in the next response; 0: no limit
	rejected map[string]string
	carry    []string // sentPrefix keys of responses this request does not answer
	// pred: the response queued before this watch, whose state it starts
	// from (see Cache.cancel); its record joins this watch's state.
	pred *deltaResponse

	seq  nameSeq // the names to look at
	full bool    // look at everything of interest instead
}

// readDeltaState reads a delta client's state for a new watch and decides
// the names to look at: those changed since the client's generation, of
// the rest, of a rejected response, or subscribed or unsubscribed by this
// request. It looks at everything of interest when the state is explicit
// (a new stream), the client subscribed to the wildcard, or the
// generation is older than the change log. A wildcard client older than
// the change log is reset (the error ends the stream; it reconnects with
// its versions): the names deleted in the forgotten generations are not
// known any more.
func (c *Cache) readDeltaState(w *watch) error {
	ts, ds := w.ts, &w.ds
	w.known = w.sub.ReturnedResources()
	var heldBack []string
	if st := w.stream; st != nil {
		if p := st.inflight[ts.url]; p != nil {
			// The previous watch's response is queued but not installed
			// (contract 6): it will be, before this watch's response. A
			// copy: the server adds the response's record to its map when
			// it installs it, while this watch may be read by a commit;
			// and the request's unsubscriptions, which the server applied
			// to the state it had, apply to this one.
			//
			// The server marks an unsubscribed name to be answered again
			// (version "") only if it was subscribed by name under a
			// wildcard (Subscription.UpdateResourceSubscriptions); the
			// mark is in the map it handed this watch, and is carried
			// over as is. A name held through the wildcard only (a
			// phantom unsubscription, which the protocol says the server
			// "can simply ignore") is not marked: marking it resent it
			// at the version held, and reported a name that does not
			// exist removed.
			delete(st.inflight, ts.url)
			marked := w.known
			w.known, ds.pred = maps.Clone(p.NextVersionMap), p
			for _, n := range w.dreq.GetResourceNamesUnsubscribe() {
				if v, ok := marked[n]; ok && v == "" {
					w.known[n] = ""
				} else {
					delete(w.known, n)
				}
			}
		}
		heldBack = st.held[ts.url]
		delete(st.held, ts.url)
	}
	known := w.known
	g, ok := known[genKey]
	if !ok {
		// Explicit: a new stream or type. Keys a client may have sent
		// in initial_resource_versions that read as state are dropped.
		for k := range known {
			if isStateKey(k) {
				w.known = maps.Clone(known)
				maps.DeleteFunc(w.known, func(k, _ string) bool { return isStateKey(k) })
				break
			}
		}
		ds.full = true
		return nil
	}
	g, wasWild := strings.CutSuffix(g, wildMark)
	gen, err := strconv.ParseUint(g, 10, 64)
	if err != nil || gen > ts.gen {
		ds.full = true
		return nil
	}
	ds.complete, ds.gen = true, gen
	// A wildcard subscribed since G widens the interest; one unsubscribed
	// narrows it (the client drops what it no longer wants), and a "*"
	// that changes nothing (legacy wildcard) is no change.
	ds.wildOn = !wasWild && w.sub.IsWildcard()
	// A change of the wildcard is answered, even with nothing, so that
	// the state records it: a client that drops the wildcard drops what it
	// held through it, and must get it all again if it takes it back.
	ds.wildChanged = wasWild != w.sub.IsWildcard()
	ds.plan = parsePlan(known[limitKey])
	if r := known[rejectedKey]; r != "" {
		ds.rejected = map[string]string{}
		pairs(r, func(n, v string) { ds.rejected[n] = v })
	}
	// The responses this request answers, and the one it rejects.
	var nacked []string
	var isolated string // rejected alone
	nonce, nack := w.dreq.GetResponseNonce(), w.dreq.GetErrorDetail() != nil
	for k, v := range known {
		sentNonce, ok := strings.CutPrefix(k, sentPrefix)
		switch {
		case !ok:
		case nonce == "" || nonceBefore(nonce, sentNonce):
			ds.carry = append(ds.carry, k)
		case sentNonce == nonce && nack:
			nacked, isolated = ds.rejectResponse(ts, v)
		case sentNonce == nonce:
			ds.accepted(v)
		}
	}
	if len(ds.plan) > 0 {
		ds.limit = ds.plan[0]
	}
	subs, unsubs := w.dreq.GetResourceNamesSubscribe(), w.dreq.GetResourceNamesUnsubscribe()
	if gen < ts.floor {
		if w.sub.IsWildcard() {
			return fmt.Errorf("xds cache: %s state of generation %d is older than the change log (from %d); reconnect", ts.url, gen, ts.floor)
		}
		ds.stale = true
	}
	if len(subs) > 0 {
		ds.newSub = make(map[string]struct{}, len(subs))
		for _, n := range subs {
			ds.newSub[n] = struct{}{}
		}
	}
	rest := known[restKey]
	nacked = append(nacked, heldBack...)
	// A request whose answer changes the state (what a rejection brings
	// back, a resource found bad) is answered even with nothing to send,
	// so that the state is installed.
	ds.changed = len(nacked) > len(heldBack) || isolated != ""
	quiet := len(nacked) == 0 && isolated == "" && !ds.wildOn && !ds.stale && len(subs) == 0 && len(unsubs) == 0
	var since []string
	if quiet {
		if since = ts.sinceLog(gen); len(since) == 0 {
			// The ACK of one part of a split response: the rest, as kept
			// (not copied: a new Envoy goes through ~20 of them).
			ds.allRest, ds.seq = true, nameSeq{joined: rest}
			return nil
		}
	}
	if rest != "" {
		ds.rest = strings.Split(rest, sep)
	}
	if len(nacked) > 0 {
		ds.rest = append(ds.rest, nacked...)
		slices.Sort(ds.rest)
		ds.rest = slices.Compact(ds.rest)
	}
	if isolated != "" {
		// Also out of the rest, where an earlier rejection put it.
		ds.rest = slices.DeleteFunc(ds.rest, func(n string) bool { return n == isolated })
	}
	if ds.wildOn || ds.stale {
		ds.full = true
		return nil
	}
	if !quiet {
		since = ts.sinceLog(gen)
	}
	names := append(since, ds.rest...)
	names = append(names, subs...)
	names = append(names, unsubs...)
	slices.Sort(names)
	ds.seq = nameSeq{list: slices.Compact(names)}
	return nil
}

// rejectResponse takes what a rejected response carried back from the
// client's state: its names are sent again, in responses of at most half
// its resources; a resource rejected alone is remembered, at the version it
// was sent at if that is still the current one (a newer one is sent as
// usual).
func (ds *deltaState) rejectResponse(ts *typeState, sent string) (names []string, isolated string) {
	g, sent, _ := strings.Cut(sent, sep)
	k, sent, _ := strings.Cut(sent, sep)
	gen, _ := strconv.ParseUint(g, 10, 64)
	count, _ := strconv.Atoi(k)
	names = strings.Split(sent, sep)
	switch {
	case count == 1:
		if e, ok := ts.resources[names[0]]; ok && e.gen <= gen {
			if ds.rejected == nil {
				ds.rejected = map[string]string{}
			}
			ds.rejected[e.name] = e.version
			names, isolated = names[1:], e.name // not to be sent again
		}
		ds.plan.took(1)
	case count > 1:
		// The two halves, then what the plan had after the rejected part.
		ds.plan.took(count)
		ds.plan = append(plan{(count + 1) / 2, count / 2}, ds.plan...)
	}
	return names, isolated
}

// accepted notes the ACK of a response: its resources are done with.
func (ds *deltaState) accepted(sent string) {
	if len(ds.plan) == 0 {
		return
	}
	_, sent, _ = strings.Cut(sent, sep)
	k, _, _ := strings.Cut(sent, sep)
	count, _ := strconv.Atoi(k)
	ds.plan.took(count)
}

// plan is the sizes of the next responses while a rejected response is
// halved: the halves of each rejected part, in order.
type plan []int

// took takes n resources off the plan.
func (p *plan) took(n int) {
	for n > 0 && len(*p) > 0 {
		m := min(n, (*p)[0])
		n -= m
		if (*p)[0] -= m; (*p)[0] == 0 {
			*p = (*p)[1:]
		}
	}
}

func parsePlan(s string) plan {
	var p plan
	for s != "" {
		var f string
		f, s, _ = strings.Cut(s, ",")
		if n, err := strconv.Atoi(f); err == nil && n > 0 {
			p = append(p, n)
		}
	}
	return p
}

func (p plan) String() string {
	var b strings.Builder
	for i, n := range p {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(n))
	}
	return b.String()
}

// respondDelta computes and sends the response for a delta watch, looking
// only at seq unless full. It reports whether a response was sent.
func (c *Cache) respondDelta(w *watch, seq nameSeq, full, evenIfEmpty bool) bool {
	p := &deltaPass{
		c: c, w: w, ts: w.ts, ds: &w.ds, known: w.known,
		subscribed: w.sub.SubscribedResources(), wild: w.sub.IsWildcard(),
		seq: seq, full: full, hold: c.holder(w),
	}
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
	res := make([]*discovery.Resource, 0, len(changed))
	for _, n := range changed {
		res = append(res, ts.resources[n].delta)
	}
	// The type's generation counts every change, hidden ones too: a
	// restricted client is not told it (system_version_info is for
	// debugging only).
	sysVersion := strconv.FormatUint(ts.gen, 10)
	if w.vis() != nil {
		sysVersion = ""
	}
	w.done = true
	w.resp = &deltaResponse{
		w:    w,
		pred: w.ds.pred,
		DeltaPassthroughResponse: cache.DeltaPassthroughResponse{
			DeltaRequest:   w.dreq,
			NextVersionMap: next,
			DeltaDiscoveryResponse: &discovery.DeltaDiscoveryResponse{
				TypeUrl:           ts.url,
				Resources:         res,
				RemovedResources:  removed,
				SystemVersionInfo: sysVersion,
			},
		},
		sent: sent,
	}
	c.handed(w, w.resp.DeltaDiscoveryResponse, ts.newestGen(changed, removed))
	// Sent under c.mu: this does not block (contract 5).
	w.dch <- w.resp
	switch ts.url {
	case ClusterType:
		c.sentCDS(w, rest, nil)
	case EndpointType:
		c.sentEDS(w, changed, removed, nil)
	}
	return true
}

// deltaPass is one computation of a delta watch's response: the names it
// looks at (seq, or everything of interest if full) and what the
// response carries. It lives for one call of respondDelta, under c.mu.
type deltaPass struct {
	c          *Cache
	w          *watch
	ts         *typeState
	ds         *deltaState
	known      map[string]string
	subscribed map[string]struct{}
	wild       bool
	seq        nameSeq
	full       bool
	hold       func(*entry) bool // c.holder(w)

	// changed: names to send (size: their bytes); removed: to report
	// removed; later: held back by hold.
	changed, removed, later []string
	size                    int
}

// held reports the version the client holds of n, if known (held), or
// whether it may hold another one (maybe).
func (p *deltaPass) held(n string) (version string, held, maybe bool) {
	ts, ds, w, known := p.ts, p.ds, p.w, p.known
	// Subscribed by this request, or still to be sent (of the rest),
	// it is sent, or reported removed; a resource rejected alone is
	// not, while it is at the version rejected.
	if _, ok := ds.newSub[n]; ok && ds.complete {
		return "", false, true
	}
	if w.hidden(n) {
		// Not to be read by this client: it does not exist. A client
		// claiming to hold it is told it is removed, a request
		// naming it that it does not exist (also from the rest, where
		// a split response left it: only such names are kept there);
		// a change to it is nothing.
		if v, ok := known[n]; ok {
			return v, true, false
		}
		// (allRest holds for the names of the rest as read, not for
		// those of a commit waking the watch.)
		if _, ok := slices.BinarySearch(ds.rest, n); ok || (ds.allRest && p.seq.list == nil && !p.full) {
			return "", false, true
		}
		_, isSub := p.subscribed[n]
		return "", false, isSub && !ds.complete
	}
	if _, ok := slices.BinarySearch(ds.rest, n); ok || ds.allRest {
		return "", false, true
	}
	e, exists := ts.resources[n]
	if v, ok := ds.rejected[n]; ok && exists && e.version == v {
		return v, true, false
	}
	if v, ok := known[n]; ok {
		return v, true, false
	}
	if _, isSub := p.subscribed[n]; !ds.complete {
		return "", false, isSub && !exists // a first request is told what does not exist
	}
	if _, isSub := p.subscribed[n]; ds.wildOn && !isSub {
		return "", false, false // not of interest at G
	}
	if (exists && e.gen > ds.gen) || ts.deletedAt[n] > ds.gen || (ds.stale && !exists) {
		return "", false, true
	}
	if !exists {
		return "", false, false
	}
	return e.version, true, false
}

// consider looks at name n: to send, to report removed, or nothing. Each
// name is considered once (names are unique; a full check dedupes). State
// keys and "*" are not names: a client naming a resource with one is
// ignored.
func (p *deltaPass) consider(n string) {
	if isStateKey(n) || n == "*" {
		return
	}
	e, exists := p.w.lookup(n)
	_, isSub := p.subscribed[n]
	switch {
	case exists && (p.wild || isSub):
		if v, h, _ := p.held(n); !h || v != e.version {
			if p.hold != nil && p.hold(e) {
				p.later = append(p.later, n)
				return
			}
			p.changed = append(p.changed, n)
			p.size += e.deltaSize
		}
	case p.wild || isSub:
		if _, h, maybe := p.held(n); h || maybe {
			p.removed = append(p.removed, n)
		}
	default:
		if _, ok := p.known[n]; ok {
			p.removed = append(p.removed, n)
		}
	}
}

// over reports whether a response of count resources of size bytes is
// above the size bound, or above the limit while a rejected response is
// halved: it then carries a first part (a resource larger than the bound
// goes alone); the rest is kept in the state, and follows the ACK.
func (p *deltaPass) over(count, size int) bool {
	maxBytes := p.c.maxBytes
	return count > 1 && ((maxBytes > 0 && size > maxBytes-envelope(p.ts.url)) || (p.ds.limit > 0 && count > p.ds.limit))
}

// collect considers the names of the pass and returns the rest: the
// sorted names, joined by sep, not sent for the bound.
func (p *deltaPass) collect() (rest string) {
	switch {
	case p.full:
		return p.collectFull()
	case p.seq.list != nil:
		// Sorted: stop at the bound, the names not looked at are the
		// rest. (Each of them that exists and is of interest would be
		// sent: it changed since G, is of the rest or newly subscribed.)
		for i, n := range p.seq.list {
			p.consider(n)
			if p.over(len(p.changed), p.size) {
				p.changed = p.changed[:len(p.changed)-1]
				tail := p.seq.list[i:]
				if p.w.vis() != nil {
					// Of the hidden names, only those the client is
					// to be told of: a change to another is nothing.
					tail = slices.DeleteFunc(slices.Clone(tail), func(n string) bool {
						_, h, maybe := p.held(n)
						return p.w.hidden(n) && !h && !maybe
					})
				}
				return p.ts.allNames().suffix(tail)
			}
		}
	default:
		for s := p.seq.joined; s != ""; {
			n, tail, _ := strings.Cut(s, sep)
			p.consider(n)
			if p.over(len(p.changed), p.size) {
				p.changed = p.changed[:len(p.changed)-1]
				return s
			}
			s = tail
		}
	}
	return ""
}

// collectFull considers everything of interest, then what else may be
// held: explicit names, and of a compact state the names changed since G
// (deleted ones among them) and the rest; each once.
func (p *deltaPass) collectFull() (rest string) {
	ts, ds, known := p.ts, p.ds, p.known
	p.changed = make([]string, 0, len(ts.resources))
	covered := p.w.fullCheck(known, p.consider)
	if ds.complete {
		var extra []string
		if !ds.stale {
			extra = ts.sinceLog(ds.gen)
		}
		extra = append(extra, ds.rest...)
		slices.Sort(extra)
		for _, n := range slices.Compact(extra) {
			if _, isKnown := known[n]; !isKnown && !covered(n) {
				p.consider(n)
			}
		}
	}
	sort.Strings(p.changed)
	total := 0
	for i, n := range p.changed {
		total += ts.resources[n].deltaSize
		if p.over(i+1, total) {
			rest = ts.allNames().suffix(p.changed[i:])
			p.changed = p.changed[:i]
			return rest
		}
	}
	return ""
}

// record returns what the client holds once it has the response, in the
// compact form: everything of interest as of now, but the rest; and what
// the response carries (sent), until the client answers. The map is new:
// the server installs it only when it sends the response.
func (p *deltaPass) record(rest string) (next map[string]string, sent string) {
	ts, ds, known := p.ts, p.ds, p.known
	gen := strconv.FormatUint(ts.gen, 10)
	g := gen
	if p.wild {
		g += wildMark
	}
	next = map[string]string{genKey: g}
	if rest != "" {
		next[restKey] = rest
	}
	if len(ds.plan) > 0 {
		next[limitKey] = ds.plan.String()
	}
	if rej := ds.stillRejected(ts); rej != "" {
		next[rejectedKey] = rej
	}
	for _, k := range ds.carry {
		next[k] = known[k]
	}
	if len(p.changed)+len(p.removed) == 0 {
		return next, ""
	}
	var b strings.Builder
	n := len(gen) + 24
	for _, s := range p.changed {
		n += len(s) + 1
	}
	for _, s := range p.removed {
		n += len(s) + 1
	}
	b.Grow(n)
	b.WriteString(gen)
	b.WriteString(sep)
	b.WriteString(strconv.Itoa(len(p.changed)))
	for _, s := range p.changed {
		b.WriteString(sep)
		b.WriteString(s)
	}
	for _, s := range p.removed {
		b.WriteString(sep)
		b.WriteString(s)
	}
	return next, b.String()
}

// stillRejected encodes the rejected resources that are still served at
// the version the client rejected; a new version or a deletion ends the
// record.
func (ds *deltaState) stillRejected(ts *typeState) string {
	var b strings.Builder
	for n, v := range ds.rejected {
		if e, ok := ts.resources[n]; ok && e.version == v {
			b.WriteString(n + sep + v + sep)
		}
	}
	return b.String()
}
