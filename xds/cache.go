package xds

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// Resource is one named resource to publish.
type Resource struct {
	Name string
	Msg  proto.Message
	// DependsOn, when set, names a resource of another type (an EDS
	// resource's cluster) whose version is folded into this one's, so that a
	// change to the cluster re-sends this resource too: a cluster updated by
	// CDS warms only once Envoy receives its ClusterLoadAssignment again.
	DependsOn *Dep
}

// Dep names a resource of another type.
type Dep struct {
	TypeURL string
	Name    string
}

// Change is one step of an update: resources to add or replace, and names
// to remove, of one type.
type Change struct {
	TypeURL string
	Upserts []Resource
	Deletes []string
}

// entry is a resource as served: marshaled once, shared by every response.
type entry struct {
	name     string
	base     string // hash of the deterministic encoding
	version  string // base folded with the dependency's version
	dep      *Dep
	msg      proto.Message
	any      *anypb.Any
	delta    *discovery.Resource
	verHash  uint64 // hash of (name, version), for the type's aggregate version
	byteSize int
	gen      uint64 // the type generation that committed this version
}

// Keys the cache keeps in the returned-resources map it hands the server.
// Resource names are never empty and do not start with NUL, so these do not
// collide with one.
const (
	// genKey: the type generation the response was computed at.
	genKey = ""
	// partKey: the id of the rest of a split delta response, names the
	// client may hold older versions of, kept by the cache (Cache.parts).
	partKey = "\x00part"
)

// A split response's rest is kept this long for the client's ACK; a client
// that comes back later is reset.
const partTTL = 5 * time.Minute

type part struct {
	names []string // sorted
	made  time.Time
}

// The change log is how much history of a type the cache keeps, so that an
// ACK only needs to look at what changed since its response. A delta client
// whose state is older than the log gets its stream reset and reconnects
// with its versions.
const (
	maxLogGens  = 4096
	maxLogNames = 1 << 18
)

type typeState struct {
	url       string
	fullState bool // sotw responses carry every subscribed resource (CDS, LDS)
	resources map[string]*entry
	aggregate uint64 // XOR of entries' verHash: the sotw version_info
	gen       uint64
	log       []genChange // recent generations, oldest first
	logNames  int         // names in log
	floor     uint64      // changes at or before this generation are forgotten
	deletedAt map[string]uint64

	// watches are the type's open watches. A change is offered to each:
	// checking a watch's interest in the changed names costs a few map
	// lookups per name, while an index by name would have to be rebuilt
	// under every subscribed name on every ACK (5,000 names for an Envoy
	// with 5,000 clusters).
	watches map[*watch]struct{}
}

type genChange struct {
	gen   uint64
	names []string
}

type watch struct {
	id    uint64
	ts    *typeState
	delta bool
	sreq  *cache.Request
	dreq  *cache.DeltaRequest
	sub   cache.Subscription
	sch   chan cache.Response
	dch   chan cache.DeltaResponse
	// newSub: names the delta request subscribes to, which the client did
	// not hold at its generation unless it says so.
	newSub map[string]struct{}
	// How a delta client's compact state reads (see deltaScope): complete
	// at generation gen, but pending (sorted: the rest of a split
	// response); wholesale: its interest changed, so only what changed since
	// gen is known not to be held; stale: gen is older than the change log.
	complete, wholesale, stale bool
	gen                        uint64
	pending                    []string
	done                       bool
}

// Cache holds the resources served to xDS clients and answers
// go-control-plane's watches for sotw and delta streams alike.
//
// Each resource version is encoded once (deterministically) and its bytes are
// shared by every response that carries it. A resource's version is a hash of
// that encoding, so the same content has the same version across restarts
// and replicas. Responses are computed per resource: a change to one resource
// answers only the watches interested in it and sends only that resource to
// delta clients. Until MarkReady is called, watches are held without an
// answer, so no client sees a partial first state.
//
// The returned-resources maps the cache hands the server are new for each
// response and never changed afterwards (go-control-plane's Subscription
// contract); for delta streams they hold the compact state described at
// deltaScope, not every subscribed name.
//
// Cache is safe for concurrent use. Resources passed to Apply are owned by
// the cache afterwards and must not be modified.
type Cache struct {
	mu    sync.Mutex
	ready bool
	types map[string]*typeState

	marshals uint64 // resource encodings, for the serialisations-per-version figure
	nextID   uint64

	maxDeltaBytes int // resource bytes per delta response; 0: no limit

	parts     map[uint64]*part // rests of split delta responses, by id
	partSweep time.Time
}

// DefaultMaxDeltaResponseBytes bounds the resource bytes of one delta
// response. A new Envoy subscribed to 5,000 assignments would otherwise get
// them in one 2 MB message, encoded and held by gRPC for every stream that
// connects at once; above the bound the rest follows each ACK.
const DefaultMaxDeltaResponseBytes = 32 << 10

var _ cache.Cache = (*Cache)(nil)

// NewCache returns an empty cache serving the given types.
func NewCache(typeURLs ...string) *Cache {
	c := &Cache{types: make(map[string]*typeState, len(typeURLs)), maxDeltaBytes: DefaultMaxDeltaResponseBytes, parts: map[uint64]*part{}}
	for _, u := range typeURLs {
		c.types[u] = &typeState{
			url:       u,
			fullState: cache.ResourceRequiresFullStateInSotw(u),
			resources: map[string]*entry{},
			deletedAt: map[string]uint64{},
			watches:   map[*watch]struct{}{},
		}
	}
	return c
}

// SetMaxDeltaResponseBytes sets the bound on the resource bytes of one delta
// response (n <= 0: none). A resource larger than the bound is sent alone.
// Call it before serving.
func (c *Cache) SetMaxDeltaResponseBytes(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.maxDeltaBytes = max(n, 0)
}

// Apply performs the changes in order, notifying watches after each step, so
// that on an ordered ADS stream a client receives the steps in that order
// (make before break: clusters, then endpoints, then removals). Resources
// that depend on a changed resource (an EDS resource on its cluster) are
// re-versioned and sent with the next step of their own type, or at the end.
func (c *Cache) Apply(changes ...Change) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	pendingDeps := map[*typeState][]string{}
	// On an error, the steps before the failing one stay applied and
	// committed (with the dependents they re-versioned); nothing of the
	// failing step is stored.
	flushDeps := func() {
		for _, ts := range sortedTypes(pendingDeps) {
			c.commit(ts, c.reversion(ts, pendingDeps[ts]))
		}
	}
	for _, ch := range changes {
		ts, ok := c.types[ch.TypeURL]
		if !ok {
			flushDeps()
			return fmt.Errorf("xds cache: type %s is not served", ch.TypeURL)
		}
		entries := make([]*entry, 0, len(ch.Upserts))
		for _, r := range ch.Upserts {
			if old, ok := ts.resources[r.Name]; ok && sameDep(old.dep, r.DependsOn) && proto.Equal(old.msg, r.Msg) {
				continue // unchanged: not encoded again
			}
			e, err := c.newEntry(ch.TypeURL, r)
			if err != nil {
				flushDeps()
				return err
			}
			entries = append(entries, e)
		}
		changed := make([]string, 0, len(entries)+len(ch.Deletes))
		for _, e := range entries {
			if old, ok := ts.resources[e.name]; ok && old.version == e.version {
				continue
			}
			c.put(ts, e)
			changed = append(changed, e.name)
		}
		for _, n := range ch.Deletes {
			if old, ok := ts.resources[n]; ok {
				ts.aggregate ^= old.verHash
				delete(ts.resources, n)
				changed = append(changed, n)
			}
		}
		if deps := pendingDeps[ts]; len(deps) > 0 {
			changed = append(changed, c.reversion(ts, deps)...)
			delete(pendingDeps, ts)
		}
		c.markDependents(ts, changed, pendingDeps)
		c.commit(ts, changed)
	}
	flushDeps()
	return nil
}

func sameDep(a, b *Dep) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

func (c *Cache) put(ts *typeState, e *entry) {
	if old, ok := ts.resources[e.name]; ok {
		ts.aggregate ^= old.verHash
	}
	ts.resources[e.name] = e
	ts.aggregate ^= e.verHash
}

// markDependents notes, per other type, the names whose resources may depend
// on the changed resources of ts.
func (c *Cache) markDependents(ts *typeState, changed []string, pending map[*typeState][]string) {
	for _, other := range c.types {
		if other == ts {
			continue
		}
		for _, n := range changed {
			if e, ok := other.resources[n]; ok && e.dep != nil && e.dep.TypeURL == ts.url && e.dep.Name == n {
				pending[other] = append(pending[other], n)
			}
		}
	}
}

// reversion recomputes the versions of the named resources of ts from their
// dependencies and returns the names whose version changed.
func (c *Cache) reversion(ts *typeState, names []string) []string {
	var touched []string
	for _, n := range names {
		e, ok := ts.resources[n]
		if !ok {
			continue
		}
		v := foldVersion(e.base, c.depVersion(e.dep))
		if v == e.version {
			continue
		}
		ne := *e
		ne.version = v
		ne.delta = &discovery.Resource{Name: e.name, Version: v, Resource: e.any}
		ne.verHash = verHash(e.name, v)
		c.put(ts, &ne)
		touched = append(touched, n)
	}
	return touched
}

func sortedTypes(m map[*typeState][]string) []*typeState {
	out := make([]*typeState, 0, len(m))
	for ts := range m {
		out = append(out, ts)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].url < out[j].url })
	return out
}

func (c *Cache) depVersion(d *Dep) string {
	if d == nil {
		return ""
	}
	if ts, ok := c.types[d.TypeURL]; ok {
		if e, ok := ts.resources[d.Name]; ok {
			return e.version
		}
	}
	return ""
}

func (c *Cache) newEntry(typeURL string, r Resource) (*entry, error) {
	if r.Name == "" {
		return nil, errors.New("xds cache: resource with empty name")
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(r.Msg)
	if err != nil {
		return nil, fmt.Errorf("xds cache: encoding %s: %w", r.Name, err)
	}
	c.marshals++
	sum := sha256.Sum256(b)
	base := hex.EncodeToString(sum[:12])
	e := &entry{
		name:     r.Name,
		base:     base,
		dep:      r.DependsOn,
		msg:      r.Msg,
		any:      &anypb.Any{TypeUrl: typeURL, Value: b},
		byteSize: len(b),
	}
	e.version = foldVersion(base, c.depVersion(r.DependsOn))
	e.delta = &discovery.Resource{Name: r.Name, Version: e.version, Resource: e.any}
	e.verHash = verHash(r.Name, e.version)
	return e, nil
}

func foldVersion(base, dep string) string {
	if dep == "" {
		return base
	}
	sum := sha256.Sum256([]byte(base + "/" + dep))
	return hex.EncodeToString(sum[:12])
}

func verHash(name, version string) uint64 {
	sum := sha256.Sum256([]byte(name + "\x00" + version))
	return binary.BigEndian.Uint64(sum[:8])
}

// commit records a generation for the changed names and answers the
// watches they wake.
func (c *Cache) commit(ts *typeState, changed []string) {
	if len(changed) == 0 {
		return
	}
	slices.Sort(changed)
	changed = slices.Compact(changed)
	ts.gen++
	for _, n := range changed {
		if e, ok := ts.resources[n]; ok {
			e.gen = ts.gen
		} else {
			ts.deletedAt[n] = ts.gen
		}
	}
	ts.log = append(ts.log, genChange{gen: ts.gen, names: changed})
	ts.logNames += len(changed)
	c.sweepParts()
	for len(ts.log) > 1 && (len(ts.log) > maxLogGens || ts.logNames > maxLogNames) {
		old := ts.log[0]
		for _, n := range old.names {
			if ts.deletedAt[n] == old.gen {
				delete(ts.deletedAt, n)
			}
		}
		ts.floor = old.gen
		ts.logNames -= len(old.names)
		ts.log = ts.log[1:]
	}
	if !c.ready {
		return
	}
	for _, w := range sortedWatches(ts.watches) {
		c.tryRespond(w, changed, false)
	}
}

// sortedWatches gives a stable order (by creation), so responses leave in the
// order clients asked and tests are repeatable.
func sortedWatches(m map[*watch]struct{}) []*watch {
	out := make([]*watch, 0, len(m))
	for w := range m {
		out = append(out, w)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

// MarkReady lets the cache answer clients. Watches held until now are
// answered from the current state.
func (c *Cache) MarkReady() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ready {
		return
	}
	c.ready = true
	for _, ts := range c.types {
		for _, w := range sortedWatches(ts.watches) {
			c.tryRespond(w, nil, firstRequest(w))
		}
	}
}

// Ready reports whether MarkReady was called.
func (c *Cache) Ready() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ready
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
		known := w.sub.ReturnedResources()
		_, installed := known[genKey]
		return !installed && (w.sub.IsWildcard() || len(known) > 0)
	}
	// A sotw client's first request on a stream is answered even when empty.
	// (Not version_info == "": a NACK of the first response also carries an
	// empty version, and answering it would resend what was rejected.)
	return w.sreq.GetResponseNonce() == ""
}

// CreateWatch implements cache.ConfigWatcher for sotw streams.
func (c *Cache) CreateWatch(req *cache.Request, sub cache.Subscription, ch chan cache.Response) (func(), error) {
	ts, ok := c.types[req.GetTypeUrl()]
	if !ok {
		return nil, fmt.Errorf("type %s is not served", req.GetTypeUrl())
	}
	w := &watch{ts: ts, sreq: req, sub: sub, sch: ch}
	return c.create(w)
}

// CreateDeltaWatch implements cache.ConfigWatcher for delta streams.
func (c *Cache) CreateDeltaWatch(req *cache.DeltaRequest, sub cache.Subscription, ch chan cache.DeltaResponse) (func(), error) {
	ts, ok := c.types[req.GetTypeUrl()]
	if !ok {
		return nil, fmt.Errorf("type %s is not served", req.GetTypeUrl())
	}
	w := &watch{ts: ts, delta: true, dreq: req, sub: sub, dch: ch}
	return c.create(w)
}

func (c *Cache) create(w *watch) (func(), error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nextID++
	w.id = c.nextID
	if c.ready {
		var responded bool
		if w.delta {
			names, full, err := c.deltaScope(w)
			if err != nil {
				return nil, err
			}
			responded = c.respondDelta(w, names, full, firstRequest(w))
		} else {
			names, full := c.sotwScope(w)
			responded = c.respondSotw(w, names, full, firstRequest(w))
		}
		if responded {
			return func() {}, nil
		}
	}
	c.track(w)
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.untrack(w)
	}, nil
}

// sinceLog returns the names changed after generation gen, which must not
// be older than the log.
func (ts *typeState) sinceLog(gen uint64) []string {
	// The log is in generation order; an ACK of a recent response looks
	// at its tail only, not at up to maxLogGens entries.
	i := sort.Search(len(ts.log), func(i int) bool { return ts.log[i].gen > gen })
	var names []string
	for _, l := range ts.log[i:] {
		names = append(names, l.names...)
	}
	return names
}

// sotwScope returns the names to look at for a new sotw watch: those
// changed since the generation the client's state was computed at. full is
// true when that is not known and every subscribed resource is checked. (A
// sotw request that names resources drops genKey from the state: the
// go-control-plane server removes returned entries that are not among the
// request's names. Such a request is therefore always checked in full,
// which is how a name added to the request is answered.)
func (c *Cache) sotwScope(w *watch) (names []string, full bool) {
	known := w.sub.ReturnedResources()
	g, ok := known[genKey]
	if !ok || w.sreq.GetResponseNonce() == "" {
		return nil, true
	}
	gen, err := strconv.ParseUint(g, 10, 64)
	if err != nil || gen > w.ts.gen || gen < w.ts.floor {
		return nil, true
	}
	return w.ts.sinceLog(gen), false
}

// Delta client state. The returned-resources map the cache hands the
// go-control-plane server for a delta stream is compact: genKey → G says
// that the client holds, of every resource it was interested in at
// generation G, the version current at G (and knows that the others do not
// exist), except the names of the part partKey refers to. Any other entry is an
// explicit version (initial_resource_versions of a reconnecting client,
// before its first response, or "" where the server asks for a resend).
// Keeping G instead of 5,000 name → version entries per Envoy is what
// keeps a fleet of Envoys subscribed to every assignment within memory;
// the versions at G are recovered from each resource's commit generation
// (entry.gen) and the deletion generations (deletedAt).

// deltaScope reads a delta client's state for a new watch (into w) and
// returns the names to look at: those changed since the client's
// generation, still pending, or subscribed or unsubscribed by this request.
// full is true when every resource of interest must be looked at: the
// state is explicit (a new stream), the client's interest changed
// wholesale (wildcard subscribed or unsubscribed), the rest of a split
// response is no longer kept, or the generation is older than the change
// log. A wildcard client older than the change log is reset (the error
// ends the stream; it reconnects with its versions): the names deleted in
// the forgotten generations are not known any more.
func (c *Cache) deltaScope(w *watch) (names []string, full bool, err error) {
	ts := w.ts
	known := w.sub.ReturnedResources()
	g, ok := known[genKey]
	if !ok {
		return nil, true, nil // explicit: a new stream or type
	}
	gen, perr := strconv.ParseUint(g, 10, 64)
	if perr != nil || gen > ts.gen {
		return nil, true, nil
	}
	w.complete, w.gen = true, gen
	if id, ok := known[partKey]; ok {
		if p := c.lookupPart(id); p != nil {
			w.pending = p.names
		} else {
			w.wholesale = true
		}
	}
	subs, unsubs := w.dreq.GetResourceNamesSubscribe(), w.dreq.GetResourceNamesUnsubscribe()
	if slices.Contains(subs, "*") || slices.Contains(unsubs, "*") {
		w.wholesale = true
	}
	if gen < ts.floor {
		if w.sub.IsWildcard() {
			return nil, false, fmt.Errorf("xds cache: %s state of generation %d is older than the change log (from %d); reconnect", ts.url, gen, ts.floor)
		}
		w.stale = true
	}
	if len(subs) > 0 {
		w.newSub = make(map[string]struct{}, len(subs))
		for _, n := range subs {
			w.newSub[n] = struct{}{}
		}
	}
	if w.wholesale || w.stale {
		return nil, true, nil
	}
	names = ts.sinceLog(gen)
	if len(names) == 0 && len(subs) == 0 && len(unsubs) == 0 {
		// The ACK of one part of a split response: the rest, as kept
		// (sorted, not copied: a new Envoy goes through ~20 of them).
		return w.pending, false, nil
	}
	names = append(names, w.pending...)
	names = append(names, subs...)
	names = append(names, unsubs...)
	slices.Sort(names)
	return slices.Compact(names), false, nil
}

func (c *Cache) lookupPart(id string) *part {
	n, err := strconv.ParseUint(id, 16, 64)
	if err != nil {
		return nil
	}
	return c.parts[n]
}

// keepPart keeps the rest of a split response and returns its id.
func (c *Cache) keepPart(names []string) string {
	now := c.sweepParts()
	// Random ids: a client cannot name another stream's part (in
	// initial_resource_versions) and have it dropped.
	id := rand.Uint64()
	for c.parts[id] != nil {
		id = rand.Uint64()
	}
	c.parts[id] = &part{names: names, made: now}
	return strconv.FormatUint(id, 16)
}

// sweepParts drops parts older than partTTL, at most every partTTL/5: their
// streams are gone, or get everything of interest checked when they come
// back. It returns the time.
func (c *Cache) sweepParts() time.Time {
	now := time.Now()
	if now.Sub(c.partSweep) > partTTL/5 {
		c.partSweep = now
		for id, p := range c.parts {
			if now.Sub(p.made) > partTTL {
				delete(c.parts, id)
			}
		}
	}
	return now
}

// dropPart forgets the part a delta client's state referred to, once a
// response has superseded that state.
func (c *Cache) dropPart(known map[string]string) {
	if id, ok := known[partKey]; ok {
		if n, err := strconv.ParseUint(id, 16, 64); err == nil {
			delete(c.parts, n)
		}
	}
}

// tryRespond answers a tracked watch if anything among names (nil: all)
// needs sending, and untracks it.
func (c *Cache) tryRespond(w *watch, names []string, evenIfEmpty bool) {
	if w.done {
		return
	}
	var responded bool
	if w.delta {
		responded = c.respondDelta(w, names, names == nil, evenIfEmpty)
	} else {
		responded = c.respondSotw(w, names, names == nil, evenIfEmpty)
	}
	if responded {
		c.untrack(w)
	}
}

// fullCheck calls fn once for each name a full check of a subscription
// looks at: every resource of interest (all of the type for a wildcard
// subscription, else the subscribed names), then each name the client is
// known to hold besides. It returns whether a name was among the first.
func (ts *typeState) fullCheck(sub cache.Subscription, fn func(n string)) (covered func(n string) bool) {
	subscribed, wild := sub.SubscribedResources(), sub.IsWildcard()
	covered = func(n string) bool {
		_, exists := ts.resources[n]
		_, isSub := subscribed[n]
		return (wild && exists) || (!wild && isSub)
	}
	if wild {
		for n := range ts.resources {
			fn(n)
		}
	} else {
		for n := range subscribed {
			fn(n)
		}
	}
	for n := range sub.ReturnedResources() {
		if !covered(n) {
			fn(n)
		}
	}
	return covered
}

func isStateKey(k string) bool { return k == genKey || k == partKey }

// respondDelta computes and sends the response for a delta watch, looking
// only at names unless full. It reports whether a response was sent.
func (c *Cache) respondDelta(w *watch, names []string, full, evenIfEmpty bool) bool {
	ts := w.ts
	known := w.sub.ReturnedResources()
	subscribed := w.sub.SubscribedResources()
	wild := w.sub.IsWildcard()

	// held reports the version the client holds of n, if known (held), or
	// whether it may hold another one (maybe). The state's own keys are not
	// names: a client naming a resource "" or partKey is ignored.
	held := func(n string) (version string, held, maybe bool) {
		if v, ok := known[n]; ok {
			return v, true, false
		}
		if !w.complete {
			return "", false, false
		}
		if _, ok := w.newSub[n]; ok {
			return "", false, false // not of interest at G
		}
		if _, ok := slices.BinarySearch(w.pending, n); ok {
			return "", false, true
		}
		e, exists := ts.resources[n]
		if (exists && e.gen > w.gen) || ts.deletedAt[n] > w.gen || (w.stale && !exists) {
			return "", false, true
		}
		if !exists {
			return "", false, false
		}
		if w.wholesale {
			return "", false, true // of interest at G or not: unknown
		}
		return e.version, true, false
	}

	// Each name is considered once (names are unique; a full check
	// dedupes).
	var changed, removed []string
	size := 0
	consider := func(n string) {
		if isStateKey(n) {
			return
		}
		e, exists := ts.resources[n]
		_, isSub := subscribed[n]
		switch {
		case exists && (wild || isSub):
			if v, h, _ := held(n); !h || v != e.version {
				changed = append(changed, n)
				size += e.byteSize
			}
		case wild || isSub:
			if _, h, maybe := held(n); h || maybe {
				removed = append(removed, n)
			}
		default:
			if _, ok := known[n]; ok {
				removed = append(removed, n)
			}
		}
	}
	// A response larger than the bound carries a first part (a resource
	// larger than the bound goes alone); the rest is kept as a part the
	// client may hold older versions of, and follows its ACK.
	over := func() bool { return c.maxDeltaBytes > 0 && size > c.maxDeltaBytes && len(changed) > 1 }
	var rest []string
	if full {
		changed = make([]string, 0, len(ts.resources))
		// Everything of interest, then what else may be held: explicit
		// names, and of a compact state the names changed since G
		// (deleted ones among them) and the pending rest; each once.
		covered := ts.fullCheck(w.sub, consider)
		if w.complete {
			var extra []string
			if !w.stale {
				extra = ts.sinceLog(w.gen)
			}
			extra = append(extra, w.pending...)
			slices.Sort(extra)
			for _, n := range slices.Compact(extra) {
				if _, isKnown := known[n]; !isKnown && !covered(n) {
					consider(n)
				}
			}
		}
		sort.Strings(changed)
		if over() {
			total := 0
			for i, n := range changed {
				total += ts.resources[n].byteSize
				if total > c.maxDeltaBytes && i > 0 {
					changed, rest = changed[:i], changed[i:]
					break
				}
			}
		}
	} else {
		// names are sorted: stop at the bound, the names not looked at
		// are the rest. (Each of them that exists and is of interest would
		// be sent: it changed since G, is pending or newly subscribed.)
		for i, n := range names {
			consider(n)
			if over() {
				changed = changed[:len(changed)-1]
				rest = names[i:]
				break
			}
		}
	}
	if len(changed) == 0 && len(removed) == 0 && !evenIfEmpty {
		return false
	}
	sort.Strings(removed)
	// What the client holds once it has this response, in the compact
	// form: everything of interest as of now, but the rest. The map is new:
	// the server installs it only when it sends the response.
	if w.complete {
		c.dropPart(known)
	}
	next := map[string]string{genKey: strconv.FormatUint(ts.gen, 10)}
	if len(rest) > 0 {
		next[partKey] = c.keepPart(rest)
	}
	w.done = true

	res := make([]*discovery.Resource, 0, len(changed))
	for _, n := range changed {
		res = append(res, ts.resources[n].delta)
	}
	// Sent under c.mu: this does not block, as a watch sends once and the
	// server's response channel holds two per type.
	w.dch <- &cache.DeltaPassthroughResponse{
		DeltaRequest:   w.dreq,
		NextVersionMap: next,
		DeltaDiscoveryResponse: &discovery.DeltaDiscoveryResponse{
			TypeUrl:           ts.url,
			Resources:         res,
			RemovedResources:  removed,
			SystemVersionInfo: strconv.FormatUint(ts.gen, 10),
		},
	}
	return true
}

// respondSotw computes and sends the response for a sotw watch, looking
// only at names unless full. It reports whether a response was sent. A sotw
// client's state is explicit (name → version): the server drops a response
// superseded by a request, and sotw clients subscribe by name to a few
// resources, or to every cluster, which a full-state response carries
// anyway.
func (c *Cache) respondSotw(w *watch, names []string, full, evenIfEmpty bool) bool {
	ts := w.ts
	sub := w.sub
	known := sub.ReturnedResources()
	subscribed := sub.SubscribedResources()
	wild := sub.IsWildcard()

	var changed, removed []string
	consider := func(n string) {
		if isStateKey(n) {
			return
		}
		e, exists := ts.resources[n]
		_, isSub := subscribed[n]
		interested := wild || isSub
		kv, isKnown := known[n]
		switch {
		case exists && interested:
			if !isKnown || kv != e.version {
				changed = append(changed, n)
			}
		case isKnown && (!exists || !interested):
			removed = append(removed, n)
		}
	}
	if full {
		ts.fullCheck(sub, consider)
	} else {
		seen := make(map[string]struct{}, len(names))
		for _, n := range names {
			if _, dup := seen[n]; dup {
				continue
			}
			seen[n] = struct{}{}
			consider(n)
		}
	}
	if len(changed) == 0 && !evenIfEmpty && (len(removed) == 0 || !ts.fullState) {
		// Nothing to send; and sotw cannot express the removal of an
		// EDS/RDS resource: the client keeps it until it unsubscribes.
		return false
	}
	sort.Strings(changed)
	sort.Strings(removed)

	next := make(map[string]string, len(known)+len(changed)+1)
	maps.Copy(next, known)
	for _, n := range removed {
		delete(next, n)
	}
	for _, n := range changed {
		next[n] = ts.resources[n].version
	}
	next[genKey] = strconv.FormatUint(ts.gen, 10)
	w.done = true

	send := changed
	if ts.fullState {
		send = send[:0:0]
		if wild {
			for n := range ts.resources {
				send = append(send, n)
			}
		} else {
			for n := range subscribed {
				if _, ok := ts.resources[n]; ok {
					send = append(send, n)
				}
			}
		}
		sort.Strings(send)
		for _, n := range send {
			next[n] = ts.resources[n].version
		}
	}
	anys := make([]*anypb.Any, 0, len(send))
	for _, n := range send {
		anys = append(anys, ts.resources[n].any)
	}
	w.sch <- &cache.PassthroughResponse{
		Request:           w.sreq,
		ReturnedResources: next,
		DiscoveryResponse: &discovery.DiscoveryResponse{
			VersionInfo: strconv.FormatUint(ts.aggregate, 16),
			TypeUrl:     ts.url,
			Resources:   anys,
		},
	}
	return true
}

// Fetch is the REST polling API, which the bridge does not serve.
func (c *Cache) Fetch(context.Context, *cache.Request) (cache.Response, error) {
	return nil, errors.New("REST xDS is not served; use gRPC ADS")
}

// Get returns the current resource of a type, or nil. The message must not
// be modified.
func (c *Cache) Get(typeURL, name string) proto.Message {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ts, ok := c.types[typeURL]; ok {
		if e, ok := ts.resources[name]; ok {
			return e.msg
		}
	}
	return nil
}

// ResourceInfo describes one served resource.
type ResourceInfo struct {
	Name    string        `json:"name"`
	Version string        `json:"version"`
	Bytes   int           `json:"bytes"`
	Msg     proto.Message `json:"-"`
}

// List returns the resources of a type, sorted by name. The messages must
// not be modified.
func (c *Cache) List(typeURL string) []ResourceInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	ts, ok := c.types[typeURL]
	if !ok {
		return nil
	}
	out := make([]ResourceInfo, 0, len(ts.resources))
	for _, e := range ts.resources {
		out = append(out, ResourceInfo{Name: e.name, Version: e.version, Bytes: e.byteSize, Msg: e.msg})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Stats are counters of the cache.
type Stats struct {
	Marshals  uint64         // resource encodings since start
	Resources map[string]int // per type URL
	Watches   map[string]int // open watches per type URL
	Parts     int            // rests of split delta responses kept
}

// Stats returns the cache's counters.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := Stats{Marshals: c.marshals, Resources: map[string]int{}, Watches: map[string]int{}, Parts: len(c.parts)}
	for u, ts := range c.types {
		s.Resources[u] = len(ts.resources)
		s.Watches[u] = len(ts.watches)
	}
	return s
}

func (c *Cache) track(w *watch) { w.ts.watches[w] = struct{}{} }

func (c *Cache) untrack(w *watch) { delete(w.ts.watches, w) }
