package xds

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"sort"
	"strconv"
	"sync"

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
}

// genKey is a key the cache keeps in the returned-resources map it hands the
// server: the type generation the response was computed at. Resource names
// are never empty, so it cannot collide with one.
const genKey = ""

// changeLogSize is how many past generations of a type the cache remembers,
// so that an ACK only needs to look at what changed since its response.
const changeLogSize = 256

type typeState struct {
	url       string
	fullState bool // sotw responses carry every subscribed resource (CDS, LDS)
	resources map[string]*entry
	aggregate uint64 // XOR of entries' verHash: the sotw version_info
	gen       uint64
	log       []genChange // ring of recent generations, oldest first

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
	done  bool
}

// Cache holds the resources served to xDS clients and answers
// go-control-plane's watches for sotw and delta streams alike.
//
// Each resource version is encoded once (deterministically) and its bytes are
// shared by every response that carries it. A resource's version is a hash of
// that encoding, so the same content has the same version across restarts
// and replicas. Responses are computed per resource: a change to one resource
// wakes only the watches subscribed to it (and wildcard ones) and sends only
// that resource to delta clients. Until MarkReady is called, watches are held
// without an answer, so no client sees a partial first state.
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
}

// DefaultMaxDeltaResponseBytes bounds the resource bytes of one delta
// response. A new Envoy subscribed to 5,000 assignments would otherwise get
// them in one 2 MB message, encoded and held by gRPC for every stream that
// connects at once; above the bound the rest follows each ACK.
const DefaultMaxDeltaResponseBytes = 256 << 10

var _ cache.Cache = (*Cache)(nil)

// NewCache returns an empty cache serving the given types.
func NewCache(typeURLs ...string) *Cache {
	c := &Cache{types: make(map[string]*typeState, len(typeURLs)), maxDeltaBytes: DefaultMaxDeltaResponseBytes}
	for _, u := range typeURLs {
		c.types[u] = &typeState{
			url:       u,
			fullState: cache.ResourceRequiresFullStateInSotw(u),
			resources: map[string]*entry{},
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
	for _, ch := range changes {
		ts, ok := c.types[ch.TypeURL]
		if !ok {
			return fmt.Errorf("xds cache: type %s is not served", ch.TypeURL)
		}
		changed := make([]string, 0, len(ch.Upserts)+len(ch.Deletes))
		for _, r := range ch.Upserts {
			if old, ok := ts.resources[r.Name]; ok && sameDep(old.dep, r.DependsOn) && proto.Equal(old.msg, r.Msg) {
				continue // unchanged: not encoded again
			}
			e, err := c.newEntry(ch.TypeURL, r)
			if err != nil {
				return err
			}
			if old, ok := ts.resources[r.Name]; ok && old.version == e.version {
				continue
			}
			c.put(ts, e)
			changed = append(changed, r.Name)
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
	for _, ts := range sortedTypes(pendingDeps) {
		c.commit(ts, c.reversion(ts, pendingDeps[ts]))
	}
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
	ts.gen++
	if len(ts.log) == changeLogSize {
		copy(ts.log, ts.log[1:])
		ts.log = ts.log[:changeLogSize-1]
	}
	ts.log = append(ts.log, genChange{gen: ts.gen, names: changed})
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
		// Envoy expects an answer to its first wildcard request to finish
		// initialising, even when there is nothing.
		return w.sub.IsWildcard() && w.dreq.GetResponseNonce() == ""
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
		names, full := c.pendingSince(w)
		if full {
			names = nil
		}
		if c.tryRespondScoped(w, names, full, firstRequest(w)) {
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

// pendingSince returns the names to look at for a new watch: those changed
// since the generation the client's state was computed at, plus, for a delta
// request, the names it subscribes or unsubscribes. full is true when that
// is not known (a new stream or type, a wildcard change, a generation too
// old for the change log) and every subscribed resource must be checked.
func (c *Cache) pendingSince(w *watch) (names []string, full bool) {
	known := w.sub.ReturnedResources()
	g, ok := known[genKey]
	if !ok {
		return nil, true
	}
	if w.delta {
		if w.dreq.GetResponseNonce() == "" {
			return nil, true
		}
		for _, l := range [][]string{w.dreq.GetResourceNamesSubscribe(), w.dreq.GetResourceNamesUnsubscribe()} {
			for _, n := range l {
				if n == "*" {
					return nil, true
				}
			}
		}
	} else if w.sreq.GetResponseNonce() == "" {
		return nil, true
	}
	gen, err := strconv.ParseUint(g, 10, 64)
	if err != nil {
		return nil, true
	}
	ts := w.ts
	if gen != ts.gen {
		if len(ts.log) == 0 || ts.log[0].gen > gen+1 || gen > ts.gen {
			return nil, true
		}
		for _, l := range ts.log {
			if l.gen > gen {
				names = append(names, l.names...)
			}
		}
	}
	if w.delta {
		names = append(names, w.dreq.GetResourceNamesSubscribe()...)
		names = append(names, w.dreq.GetResourceNamesUnsubscribe()...)
	}
	return names, false
}

func (c *Cache) track(w *watch) { w.ts.watches[w] = struct{}{} }

func (c *Cache) untrack(w *watch) { delete(w.ts.watches, w) }

// tryRespond answers a tracked watch if anything among names (nil: all)
// needs sending, and untracks it.
func (c *Cache) tryRespond(w *watch, names []string, evenIfEmpty bool) {
	if w.done {
		return
	}
	if c.tryRespondScoped(w, names, names == nil, evenIfEmpty) {
		c.untrack(w)
	}
}

// tryRespondScoped computes and sends the response for w, looking only at
// names unless full. It reports whether a response was sent.
func (c *Cache) tryRespondScoped(w *watch, names []string, full, evenIfEmpty bool) bool {
	ts := w.ts
	sub := w.sub
	known := sub.ReturnedResources()
	subscribed := sub.SubscribedResources()
	wild := sub.IsWildcard()

	var changed, removed []string
	consider := func(n string) {
		if n == genKey {
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
		if wild {
			for n := range ts.resources {
				consider(n)
			}
		} else {
			for n := range subscribed {
				consider(n)
			}
		}
		for n := range known {
			if _, ok := ts.resources[n]; !ok {
				consider(n)
			} else if _, ok := subscribed[n]; !ok && !wild {
				consider(n)
			}
		}
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
	sort.Strings(changed)
	sort.Strings(removed)
	// A delta response larger than the bound carries a first part; the
	// generation is then left out of the client's state, so the watch the
	// client's ACK opens looks at everything again and sends the next part.
	partial := false
	if w.delta && c.maxDeltaBytes > 0 {
		total := 0
		for i, n := range changed {
			total += ts.resources[n].byteSize
			if total > c.maxDeltaBytes && i > 0 {
				changed, partial = changed[:i], true
				break
			}
		}
	}

	if len(changed) == 0 && len(removed) == 0 && !evenIfEmpty {
		return false
	}
	if !w.delta && !ts.fullState && len(changed) == 0 && !evenIfEmpty {
		// sotw cannot express the removal of an EDS/RDS resource: the
		// client keeps what it has until it unsubscribes.
		return false
	}

	// The versions the client will know once it has this response. A
	// delta stream's map is updated in place: go-control-plane's delta
	// server (v0.14.0, pinned) installs NextVersionMap as the
	// subscription's returned resources after sending every response it
	// takes from the channel, reads and changes that map only on the
	// stream's goroutine after cancelling the watch (which takes c.mu), and
	// never drops a response. Copying it instead costs O(subscribed) per
	// response: 5,000 entries for every change, for every Envoy with 5,000
	// clusters. (Subscription's doc asks caches not to alter the map; this
	// is the one deliberate exception, covered by the protocol tests.) The
	// sotw ADS server drops responses superseded by a request, so a sotw
	// map is copied.
	var next map[string]string
	if w.delta && known != nil {
		next = known
	} else {
		next = make(map[string]string, len(known)+len(changed)+1)
		maps.Copy(next, known)
	}
	for _, n := range removed {
		delete(next, n)
	}
	for _, n := range changed {
		next[n] = ts.resources[n].version
	}
	if partial {
		delete(next, genKey)
	} else {
		next[genKey] = strconv.FormatUint(ts.gen, 10)
	}
	w.done = true

	if w.delta {
		res := make([]*discovery.Resource, 0, len(changed))
		for _, n := range changed {
			res = append(res, ts.resources[n].delta)
		}
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
}

// Stats returns the cache's counters.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := Stats{Marshals: c.marshals, Resources: map[string]int{}, Watches: map[string]int{}}
	for u, ts := range c.types {
		s.Resources[u] = len(ts.resources)
		s.Watches[u] = len(ts.watches)
	}
	return s
}
