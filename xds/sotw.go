package xds

import (
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

// Sotw client state is explicit (name → version): the server drops a
// response superseded by a request, and sotw clients subscribe by name to a
// few resources, or to every cluster, which a full-state response carries
// anyway. genKey → G, when present, says the state was computed at G, so an
// ACK looks only at what changed since.
//
// For the types whose responses need not carry every resource (EDS, RDS),
// a response's names have "version sep previous sep count" until the
// client answers:
// a NACK restores what it held before, and the next response carries at
// most half of what was rejected, until the resource the client refuses is
// alone; that one is marked "held sep rejectedMark version" and not sent
// again at that version. (Envoy rejects such a response whole when one
// resource cannot be decoded.) A full-state response (CDS, LDS) cannot
// leave a resource out without removing it; Envoy and grpc-go apply the
// valid clusters and listeners of one they NACK, so there a NACKed response
// counts as held and is not sent again.

// Keys of the cache's state in a sotw stream's returned-resources map:
// genKey → G says the state was computed at G. Names are never empty and
// never start with NUL, so no key is a name.
const genKey = ""

func isStateKey(k string) bool { return k == genKey || (len(k) > 0 && k[0] == 0) }

// sep joins the parts of a state value. Names and versions never contain
// it: versions are hex, and a name with a NUL is not a name the cache
// serves.
const sep = "\x00"

// Sotw versions in the returned map (sotwserver.go): a name a response carried
// has "version sep previous sep count" until the client answers; previous
// is what it held before ("" for nothing), restored if the client rejects
// the response, and count the number of resources the response carried. A resource the client rejected alone has "held sep
// rejectedMark version"; a name of a rejected response not sent again yet
// has "held sep limitMark plan" (the sizes of the next responses).
const (
	rejectedMark = "\x01"
	limitMark    = "\x02"
)

// sotwState is a sotw client's state as read when its watch is created.
type sotwState struct {
	held     map[string]string // name → version held (the state, or a view of it with answers applied)
	rejected map[string]string // name → version rejected alone
	plan     plan              // sizes of the next responses, while a rejected one is halved
	limit    int               // plan[0]: resources in the next response; 0: no limit
	suspects []string          // names of a rejected response not sent again yet
	names    []string          // the names to look at
	full     bool              // look at everything of interest instead
}

// readSotwState reads the state for a new sotw watch: applies the request's
// answer to the last response (a sotw NACK is of the latest response,
// sotwserver.go), and decides the names to look at: those changed since
// the state's generation. It
// looks at everything of interest when the request lists names (the
// interest may have changed; the server drops genKey from the state for
// such a request unless it lists "*"), and after a rejection.
func (c *Cache) readSotwState(w *watch) {
	ts, ss := w.ts, &w.ss
	known := w.returned
	ss.held = known
	nack := w.sreq.GetErrorDetail() != nil && w.sreq.GetResponseNonce() != ""
	var rejected []string // of the response this request rejects
	accepted := 0         // resources of the response this request accepts
	sentCount := 0        // resources of the response this request rejects
	cloned := false
	for n, v := range known {
		cur, prev, ok := strings.Cut(v, sep)
		if isStateKey(n) || !ok {
			continue
		}
		if !cloned {
			ss.held, cloned = maps.Clone(known), true
		}
		switch {
		case strings.HasPrefix(prev, rejectedMark):
			if ss.rejected == nil {
				ss.rejected = map[string]string{}
			}
			ss.rejected[n] = prev[len(rejectedMark):]
		case strings.HasPrefix(prev, limitMark):
			ss.plan = parsePlan(prev[len(limitMark):])
			ss.suspects = append(ss.suspects, n)
		case !nack:
			accepted++
		case nack:
			// "version sep previous sep count": the server drops the
			// names a request no longer lists, so the count of the
			// response is kept in each.
			var k string
			prev, k, _ = strings.Cut(prev, sep)
			sentCount, _ = strconv.Atoi(k)
			rejected = append(rejected, n)
			if ss.rejected == nil {
				ss.rejected = map[string]string{}
			}
			ss.rejected[n], cur = cur, prev // undone below unless alone
		}
		if cur == "" {
			delete(ss.held, n)
		} else {
			ss.held[n] = cur
		}
	}
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
	// A request that lists names (even only "*", which keeps genKey) may
	// have changed the interest: checked in full.
	g, ok := known[genKey]
	if !ok || w.sreq.GetResponseNonce() == "" || len(w.sreq.GetResourceNames()) > 0 || len(rejected) > 0 || len(ss.suspects) > 0 {
		ss.full = true
		return
	}
	gen, err := strconv.ParseUint(g, 10, 64)
	if err != nil || gen > ts.gen || gen < ts.floor {
		ss.full = true
		return
	}
	ss.names = ts.sinceLog(gen)
}

// respondSotw computes and sends the response for a sotw watch, looking
// only at names unless full. It reports whether a response was sent.
func (c *Cache) respondSotw(w *watch, names []string, full, evenIfEmpty bool) bool {
	ts := w.ts
	p := &sotwPass{
		c: c, w: w, ts: ts, ss: &w.ss,
		subscribed: w.sub.SubscribedResources(), wild: w.sub.IsWildcard(),
		hold: c.holder(w), keep: c.keepCluster(w),
	}
	w.heldBack = nil
	p.collect(names, full)
	slices.Sort(w.heldBack)
	if len(p.changed) == 0 && !evenIfEmpty && (len(p.removed) == 0 || !ts.fullState) {
		// Nothing to send; and sotw cannot express the removal of an
		// EDS/RDS resource: the client keeps it until it unsubscribes.
		return false
	}
	sort.Strings(p.changed)
	sort.Strings(p.removed)
	cut := p.bound()
	next := p.nextState(cut)
	w.done = true

	send := p.changed
	if ts.fullState {
		send = p.everything(next)
	}
	resp := p.response(send, next)
	c.handed(w, resp, ts.newestGen(p.changed, p.removed))
	w.sch <- &cache.PassthroughResponse{Request: w.sreq, ReturnedResources: next, DiscoveryResponse: resp}
	switch ts.url {
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
	hold       func(*entry) bool     // c.holder(w)
	keep       func(n string) *entry // c.keepCluster(w)
	interims   map[string]interim    // make before break (mbb.go)
	kept       []*entry              // deleted clusters the stream's routes still name (mbb.go)
	changed    []string              // to send
	removed    []string              // no longer held
}

// collect considers names (everything of interest if full), each once.
func (p *sotwPass) collect(names []string, full bool) {
	if full {
		p.w.fullCheck(p.ss.held, p.consider)
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
}

// consider looks at name n: to send (or its interim), held back, kept,
// removed, or nothing.
func (p *sotwPass) consider(n string) {
	if isStateKey(n) {
		return
	}
	w, ss := p.w, p.ss
	e, exists := w.lookup(n)
	_, isSub := p.subscribed[n]
	interested := p.wild || isSub
	kv, isKnown := ss.held[n]
	switch {
	case exists && interested:
		if rv, ok := ss.rejected[n]; ok && rv == e.version {
			return // rejected alone: not sent again
		}
		if !isKnown || kv != e.version {
			if p.hold != nil && p.hold(e) {
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
		p.removed = append(p.removed, n)
	}
}

// bound cuts the changed names of a type that need not carry everything
// as a delta response is bounded, and reports whether it did; what it
// leaves out is found by the next full check.
func (p *sotwPass) bound() (cut bool) {
	if p.ts.fullState {
		return false
	}
	maxBytes, limit := p.c.maxBytes, p.ss.limit
	total := envelope(p.ts.url)
	for i, n := range p.changed {
		total += p.ts.resources[n].anySize
		if i > 0 && ((maxBytes > 0 && total > maxBytes) || (limit > 0 && i >= limit)) {
			p.changed = p.changed[:i]
			return true
		}
	}
	return false
}

// nextState is the state the response installs: name → version held
// (with what a NACK rolls back to, the rejected versions and the plan of
// a halving), and the generation when the response leaves nothing out.
func (p *sotwPass) nextState(cut bool) map[string]string {
	ts, ss := p.ts, p.ss
	next := make(map[string]string, len(ss.held)+len(p.changed)+1)
	maps.Copy(next, ss.held)
	for _, n := range p.removed {
		delete(next, n)
	}
	for n, v := range ss.rejected {
		if e, ok := ts.resources[n]; ok && e.version == v {
			next[n] = ss.held[n] + sep + rejectedMark + v
		}
	}
	if len(ss.plan) > 0 {
		// Suspects not sent yet keep the plan for the next responses.
		plan := ss.plan.String()
		for _, n := range ss.suspects {
			if e, ok := ts.resources[n]; ok && e.version != ss.held[n] {
				next[n] = ss.held[n] + sep + limitMark + plan
			}
		}
	}
	for _, n := range p.changed {
		if ts.fullState {
			next[n] = ts.resources[n].version
		} else {
			v := ts.resources[n].version
			if im, ok := p.interims[n]; ok {
				v = im.version
			}
			next[n] = v + sep + ss.held[n] + sep + strconv.Itoa(len(p.changed))
		}
	}
	if !cut && len(p.w.heldBack) == 0 && len(p.interims) == 0 {
		next[genKey] = strconv.FormatUint(ts.gen, 10)
	} else {
		delete(next, genKey) // the next request checks in full
	}
	return next
}

// everything returns, sorted, every resource of interest the client may
// read (a response of a type that carries everything), and notes them
// and the kept clusters in next.
func (p *sotwPass) everything(next map[string]string) []string {
	ts, w := p.ts, p.w
	var send []string
	if p.wild {
		for n := range ts.resources {
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
		next[n] = ts.resources[n].version
	}
	for _, g := range p.kept {
		next[g.name] = g.version
	}
	return send
}

// response builds the response carrying the kept clusters and send (an
// interim instead of a route configuration that has one).
func (p *sotwPass) response(send []string, next map[string]string) *discovery.DiscoveryResponse {
	anys := make([]*anypb.Any, 0, len(send)+len(p.kept))
	for _, g := range p.kept {
		anys = append(anys, g.any)
	}
	for _, n := range send {
		if im, ok := p.interims[n]; ok {
			anys = append(anys, im.route.any)
			continue
		}
		anys = append(anys, p.ts.resources[n].any)
	}
	version := p.c.sotwVersion(p.w, next)
	for n, im := range p.interims {
		version ^= verHash(n, im.version) // an interim's version_info is its own
	}
	for _, g := range p.kept {
		version ^= g.verHash // so is that of a response keeping a deleted cluster
	}
	return &discovery.DiscoveryResponse{
		VersionInfo: strconv.FormatUint(version, 16),
		TypeUrl:     p.ts.url,
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
func (c *Cache) sotwVersion(w *watch, next map[string]string) uint64 {
	if w.vis() == nil {
		return w.ts.aggregate
	}
	var v uint64
	for n := range next {
		if isStateKey(n) {
			continue
		}
		if e, ok := w.lookup(n); ok {
			v ^= e.verHash
		}
	}
	return v
}
