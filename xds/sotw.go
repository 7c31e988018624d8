package xds

import (
	"slices"
	"sort"
	"strconv"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/xdsbridge/xdsbridge/xds/store"
	"google.golang.org/protobuf/types/known/anypb"
)

// Sotw client state is explicit (name → version): the server drops a
// response superseded by a request, and sotw clients subscribe by name to a
// few resources, or to every cluster, which a full-state response carries
// anyway. A state complete at generation G was computed at G, so an ACK
// looks only at what changed since, and at the names a response cut by
// the size bound left for the next ones (sotwHeld.rest, sotwparts.go).
//
// For the types whose responses need not carry every resource (EDS, RDS),
// a response's names are marked sent until the client answers: a NACK
// restores what it held before, and the next response carries at most half
// of what was rejected, until the resource the client refuses is alone;
// that one is marked rejected, at its version, and not sent again at that
// version. (Envoy rejects such a response whole when one resource cannot
// be decoded.) A full-state response (CDS, LDS) cannot leave a resource out
// without removing it; Envoy and grpc-go apply the valid clusters and
// listeners of one they NACK, so there a NACKed response counts as held and
// is not sent again.

// sotwHeld is what a sotw client holds of one type, as the response that
// computed it left it. The stream handler (sotwserver.go) owns it, under
// the stream's lock: it keeps the one its type's last response installed
// (sotwSub.held) and hands it to each watch. A request that lists names,
// and not "*", makes the handler keep only those names' entries, and one
// that asks for anything new makes it drop complete (sotwSub.set), so what
// must survive such a request (what to roll back on a NACK) is kept per
// name. The cache reads a state under its lock and never changes one it
// handed over; the handler changes one only between a watch's
// cancellation and the next watch.
type sotwHeld struct {
	// complete: at generation gen, the client holds every resource of
	// interest at its version, but the names of rest: the response left
	// nothing else out.
	complete bool
	gen      uint64
	// rest: sorted, the names a response cut by the size bound left for
	// the next ones (to send, as at gen); a request that checks since the
	// state looks at them with the names changed since, in order, up to
	// the next response's bound, so a first sync of n names in parts of
	// k costs about n, not n²/k.
	rest []string
	// versions: name → version held; "" for a name of marks the client
	// holds nothing of.
	versions versions
	// marks: what more the cache follows of some names (each also in
	// versions).
	marks map[string]sotwMark
}

// sotwMark is what the cache follows of one name besides its version:
// either the last response carried it (sent), or the client rejected it
// alone (rejected), or it is of a rejected response and not sent again yet
// (suspect).
type sotwMark struct {
	// sent: the version in versions is the one the last response carried;
	// prev is the one held before, restored if the client rejects the
	// response, and count the number of resources the response carried.
	sent  bool
	prev  string
	count int
	// rejected: the version the client rejected alone.
	rejected string
	// suspect: plan is the sizes of the next responses (never written).
	suspect bool
	plan    plan
}

func (h *sotwHeld) mark(n, version string, m sotwMark) {
	if h.marks == nil {
		h.marks = map[string]sotwMark{}
	}
	h.versions.put(n, version)
	h.marks[n] = m
}

// set notes that the client holds version of n, with no mark.
func (h *sotwHeld) set(n, version string) {
	h.versions.put(n, version)
	delete(h.marks, n)
}

// sotwResponse is a sotw response and the state it installs once the
// stream handler sends it.
type sotwResponse struct {
	req  *discovery.DiscoveryRequest
	resp *discovery.DiscoveryResponse
	next *sotwHeld
}

// sotwState is a sotw client's state as read when its watch is created.
type sotwState struct {
	held     versions          // name → version held (the state, or a view of it with answers applied)
	rejected map[string]string // name → version rejected alone
	plan     plan              // sizes of the next responses, while a rejected one is halved
	limit    int               // plan[0]: resources in the next response; 0: no limit
	suspects []string          // names of a rejected response not sent again yet
	names    []string          // the names to look at
	rest     []string          // and the state's rest, in order up to the bound (sotwHeld.rest)
	full     bool              // look at everything of interest instead
}

// readSotwState reads the state for a new sotw watch: applies the request's
// answer to the last response (a sotw NACK is of the latest response,
// sotwserver.go), and decides the names to look at: those changed since
// the state's generation, and the state's rest. It looks at everything of
// interest when the state is not complete (the server drops complete from
// the state for a request that asks for anything new), and after a
// rejection.
func (c *Cache) readSotwState(w *watch) {
	ts, ss := w.ts, &w.ss
	known := w.sheld
	ss.held = known.versions // read only: readMarks copies it before a change
	nack := w.sreq.GetErrorDetail() != nil && w.sreq.GetResponseNonce() != ""
	rejected, accepted, sentCount := ss.readMarks(known, nack, &ts.sotwBases)
	// The plan of halving a rejected response goes on as for delta.
	switch k := max(len(rejected), sentCount); {
	case k == 1:
		ss.plan.took(1)
	case k > 1:
		for _, n := range rejected {
			delete(ss.rejected, n)
		}
		ss.plan.took(k)
		ss.plan = append(plan{(k + 1) / 2, k / 2}, ss.plan...)
		ss.suspects = append(ss.suspects, rejected...)
	default:
		ss.plan.took(accepted)
	}
	if len(ss.plan) > 0 {
		ss.limit = ss.plan[0]
	}
	if !known.complete || w.sreq.GetResponseNonce() == "" || len(rejected) > 0 || len(ss.suspects) > 0 {
		ss.full = true
		return
	}
	if known.gen > ts.Gen || known.gen < ts.Floor {
		ss.full = true
		return
	}
	// A full check of a subscription by name looks at its names (the
	// state holds no others, sotwSub.set); the log since the state may
	// name far more (a client of a few names whose last response is old,
	// while the rest of the type changed): the cheaper of the two, which
	// leave the same state.
	if !w.sub.IsWildcard() && sinceLogExceeds(ts, known.gen, len(w.sub.SubscribedResources())+ss.held.len()) {
		ss.full = true
		return
	}
	ss.names, ss.rest = ts.SinceLog(known.gen), known.rest
}

// sinceLogExceeds reports whether the change log after generation gen
// names more than limit names (counting at most limit+1 of them).
func sinceLogExceeds(ts *typeState, gen uint64, limit int) bool {
	n := 0
	for i := len(ts.Log) - 1; i >= 0 && ts.Log[i].Gen > gen; i-- {
		if n += len(ts.Log[i].Names); n > limit {
			return true
		}
	}
	return false
}

// readMarks applies the request's answer to the marked names of the state:
// it returns the names of the response it rejects (rejected), the number
// of resources of the response it accepts (accepted) or rejects
// (sentCount).
func (ss *sotwState) readMarks(known *sotwHeld, nack bool, bases *sharedBases) (rejected []string, accepted, sentCount int) {
	// ss.held shares known's maps until a name's version changes (an ACK
	// of the last response changes none).
	copied := false
	for n, m := range known.marks {
		cur := known.versions.at(n)
		switch {
		case m.rejected != "":
			if ss.rejected == nil {
				ss.rejected = map[string]string{}
			}
			ss.rejected[n] = m.rejected
		case m.suspect:
			ss.plan = slices.Clone(m.plan)
			ss.suspects = append(ss.suspects, n)
		case !nack:
			accepted++
		default:
			// The request rejects the response that carried n: the
			// count of the response is kept in each of its names, as
			// the server drops the names a request no longer lists.
			sentCount = m.count
			rejected = append(rejected, n)
			if ss.rejected == nil {
				ss.rejected = map[string]string{}
			}
			ss.rejected[n], cur = cur, m.prev // undone unless alone
		}
		if v, ok := ss.held.get(n); (cur == "" && !ok) || (cur != "" && ok && v == cur) {
			continue
		}
		if !copied {
			ss.held, copied = ss.held.clone(bases), true
		}
		if cur == "" {
			ss.held.del(n)
		} else {
			ss.held.put(n, cur)
		}
	}
	return rejected, accepted, sentCount
}

// respondSotw computes and sends the response for a sotw watch, looking
// only at names and the state's rest (in order, up to the bound) unless
// full. It reports whether a response was sent.
func (c *Cache) respondSotw(w *watch, names []string, full, evenIfEmpty bool) bool {
	ts := w.ts
	p := &sotwPass{
		c: c, w: w, ts: ts, ss: &w.ss,
		subscribed: w.sub.SubscribedResources(), wild: w.sub.IsWildcard(),
		hold: c.holder(w, 0), keep: c.keepCluster(w), maxBytes: c.maxBytes,
	}
	if sub, ok := w.sub.(sotwSub); ok && c.maxBytes > 0 {
		p.maxBytes = sotwPartBytes(c.maxBytes, sub.listedBytes)
	}
	w.heldBack = nil
	p.collect(names, full)
	slices.Sort(w.heldBack)
	if len(p.changed) == 0 && !evenIfEmpty && (len(p.removed) == 0 || !ts.FullState) {
		// Nothing to send; and sotw cannot express the removal of an
		// EDS/RDS resource: the client keeps it until it unsubscribes.
		// The rest was looked at whole: a commit waking the watch looks
		// at what it changed only.
		w.ss.rest = p.restLeft
		if len(p.removed) > 0 {
			// What this pass found no longer held, a later pass of the
			// watch (woken by a commit, looking at what it changed) would
			// not find again: the state it installs drops them too, as a
			// full check's would.
			held := w.ss.held.clone(&ts.sotwBases)
			for _, n := range p.removed {
				held.del(n)
			}
			w.ss.held = held
		}
		return false
	}
	sort.Strings(p.changed)
	sort.Strings(p.removed)
	cut := p.bound()
	next := p.nextState(mergeNames(cut, p.restLeft))
	w.done = true

	send := p.changed
	if ts.FullState {
		send = p.everything(next)
	}
	next.versions.compact(&ts.sotwBases)
	resp := p.response(send, next)
	c.handed(w, resp, ts.newestGen(p.changed, p.removed))
	w.sch.put(&sotwResponse{req: w.sreq, resp: resp, next: next})
	switch ts.URL {
	case ClusterType:
		c.sentCDS(w, nil, resp)
	case EndpointType:
		c.sentEDS(w, send, nil, resp)
	}
	return true
}

// sotwPass is one computation of a sotw watch's response. It lives for
// one call of respondSotw, under c.mu.
type sotwPass struct {
	c          *Cache
	w          *watch
	ts         *typeState
	ss         *sotwState
	subscribed map[string]struct{}
	wild       bool
	hold       entryHolder                 // c.holder(w, 0)
	keep       func(n string) *store.Entry // c.keepCluster(w)
	interims   map[string]interim          // make before break (mbb.go)
	kept       []*store.Entry              // deleted clusters the stream's routes still name (mbb.go)
	changed    []string                    // to send
	removed    []string                    // no longer held
	restLeft   []string                    // of the state's rest, the names not looked at (walkRest)
	maxBytes   int                         // the response's bound (sotwPartBytes)
}

// collect considers names (everything of interest if full), each once.
func (p *sotwPass) collect(names []string, full bool) {
	if full {
		covered := p.w.checkInterest(p.consider)
		for n := range p.ss.held.all() {
			if !covered(n) {
				p.consider(n)
			}
		}
		return
	}
	seen := make(map[string]struct{}, len(names))
	for _, n := range names {
		if _, dup := seen[n]; dup {
			continue
		}
		seen[n] = struct{}{}
		p.consider(n)
	}
	p.walkRest(seen)
}

// consider looks at name n: to send (or its interim), held back, kept,
// removed, or nothing.
func (p *sotwPass) consider(n string) {
	w, ss := p.w, p.ss
	e, exists := w.lookup(n)
	_, isSub := p.subscribed[n]
	interested := p.wild || isSub
	kv, isKnown := ss.held.get(n)
	switch {
	case exists && interested:
		if rv, ok := ss.rejected[n]; ok && rv == e.Version {
			return // rejected alone: not sent again
		}
		// Deleted and created again since the state, at the version the
		// state holds (of a type whose responses cannot remove it, so the
		// state keeps a name the client lists): the client may have
		// dropped it meanwhile (a name it stopped listing in a request
		// skipped for its stale nonce), so it is sent again.
		_, deleted := p.ts.DeletedAt[n]
		again := isKnown && kv == e.Version && !p.ts.FullState && deleted && e.Gen > w.sheld.gen
		if !isKnown || kv != e.Version || again {
			if p.hold.holds(e) {
				w.heldBack = append(w.heldBack, n)
				return
			}
			if v, sr := p.c.interimFor(w, e, kv, isKnown); sr != nil {
				if p.interims == nil {
					p.interims = map[string]interim{}
				}
				p.interims[n] = interim{v, sr}
			}
			p.changed = append(p.changed, n)
		}
	case isKnown && (!exists || !interested):
		if !exists && interested && p.keep != nil {
			if g := p.keep(n); g != nil {
				p.kept = append(p.kept, g)
				w.heldBack = append(w.heldBack, n)
				return
			}
		}
		if !exists && isSub && !p.ts.FullState {
			// A response cannot remove it: the client holds it until
			// it no longer lists it (sotwSub.set), and so does the state.
			return
		}
		p.removed = append(p.removed, n)
	}
}

// nextState is the state the response installs: name → version held
// (with what a NACK rolls back to, the rejected versions and the plan of
// a halving), complete but for rest (sorted: the names the bound left
// out) when the response leaves out nothing else.
func (p *sotwPass) nextState(rest []string) *sotwHeld {
	ts, ss := p.ts, p.ss
	next := &sotwHeld{versions: ss.held.clone(&ts.sotwBases)}
	for _, n := range p.removed {
		next.versions.del(n)
	}
	for n, v := range ss.rejected {
		if e, ok := ts.Resources[n]; ok && e.Version == v {
			next.mark(n, ss.held.at(n), sotwMark{rejected: v})
		}
	}
	if len(ss.plan) > 0 {
		// Suspects not sent yet keep the plan for the next responses.
		for _, n := range ss.suspects {
			if e, ok := ts.Resources[n]; ok && e.Version != ss.held.at(n) {
				next.mark(n, ss.held.at(n), sotwMark{suspect: true, plan: ss.plan})
			}
		}
	}
	for _, n := range p.changed {
		if ts.FullState {
			next.set(n, ts.Resources[n].Version)
			continue
		}
		v := ts.Resources[n].Version
		if im, ok := p.interims[n]; ok {
			v = im.version
		}
		next.mark(n, v, sotwMark{sent: true, prev: ss.held.at(n), count: len(p.changed)})
	}
	// Else the next request checks in full.
	next.complete = len(p.w.heldBack) == 0 && len(p.interims) == 0
	if next.complete {
		next.rest = rest
	}
	next.gen = ts.Gen
	return next
}

// everything returns, sorted, every resource of interest the client may
// read (a response of a type that carries everything), and notes them
// and the kept clusters in next.
func (p *sotwPass) everything(next *sotwHeld) []string {
	ts, w := p.ts, p.w
	var send []string
	if p.wild {
		for n := range ts.Resources {
			if !w.hidden(n) {
				send = append(send, n)
			}
		}
	} else {
		for n := range p.subscribed {
			if _, ok := w.lookup(n); ok {
				send = append(send, n)
			}
		}
	}
	sort.Strings(send)
	for _, n := range send {
		next.set(n, ts.Resources[n].Version)
	}
	for _, g := range p.kept {
		next.set(g.Name, g.Version)
	}
	return send
}

// response builds the response carrying the kept clusters and send (an
// interim instead of a route configuration that has one).
func (p *sotwPass) response(send []string, next *sotwHeld) *discovery.DiscoveryResponse {
	anys := make([]*anypb.Any, 0, len(send)+len(p.kept))
	for _, g := range p.kept {
		anys = append(anys, g.Any)
	}
	for _, n := range send {
		if im, ok := p.interims[n]; ok {
			anys = append(anys, im.route.any)
			continue
		}
		anys = append(anys, p.ts.Resources[n].Any)
	}
	version := p.c.sotwVersion(p.w, next)
	for n, im := range p.interims {
		version ^= store.NameVersionHash(n, im.version) // an interim's version_info is its own
	}
	for _, g := range p.kept {
		version ^= g.VerHash // so is that of a response keeping a deleted cluster
	}
	return &discovery.DiscoveryResponse{
		VersionInfo: strconv.FormatUint(version, 16),
		TypeUrl:     p.ts.URL,
		Resources:   anys,
	}
}

// sotwVersion is the version_info of a response installing state next:
// the type's aggregate, kept up to date by every commit, for a client that
// may read everything. A restricted client's is of what it can read only,
// the resources it holds once it has the response (a hash of content, over
// every resource of the type, would let it test guesses about hidden
// names and versions, and see hidden changes): computed from next, which
// the response builds anyway, so no more work than that.
func (c *Cache) sotwVersion(w *watch, next *sotwHeld) uint64 {
	if w.vis() == nil {
		return w.ts.Aggregate
	}
	var v uint64
	for n := range next.versions.all() {
		if e, ok := w.lookup(n); ok {
			v ^= e.VerHash
		}
	}
	return v
}
