package xds

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/xdsbridge/xdsbridge/xds/store"
)

// Cache answers the watches of sotw and delta streams alike from its
// store (package store), the resources served to xDS clients.
//
// Each resource version is encoded once (deterministically) and its bytes are
// shared by every response that carries it. A resource's version is a hash of
// that encoding, so the same content has the same version across restarts
// and replicas. Responses are computed per resource: a change to one resource
// answers only the watches interested in it and sends only that resource to
// delta clients. Until MarkReady is called, watches are held without an
// answer, so no client sees a partial first state.
//
// What a client holds is kept by its stream's handler, per type, and
// handed to each watch: for a delta stream a typed, compact state
// (deltaHeld, delta.go), installed by the handler when it sends the
// response that computed it; for a sotw stream an explicit name → version
// map (sotw.go) in the handler's returned-resources map (sotwserver.go). A
// response the client rejects (NACK) does not count as held: its resources
// are sent again, in halves until the one the client refuses is alone, and
// that one is not sent again at the same version. The states handed to
// the handlers are new for each response, and the cache never changes
// them afterwards.
//
// The store (package store) holds the resources; the Cache is the
// server: it follows the store's commits (commitObserver) and reaches the
// store through the Store interface (storeobserver.go). The files:
// watch.go (watches), interest.go (which watches a commit wakes),
// delta.go and deltarespond.go, sotw.go,
// updateorder.go (the order of responses on a stream: one table, and the
// hold rule of each type), order.go (what the cache follows per stream:
// clusters before their assignments), routehold.go (routes after their
// clusters' assignments), mbb.go (interim routes: make before break for
// grpc-go), inspect.go (Stats; the store's reads), sotwserver.go and
// deltaserver.go (the stream handlers; their doc comments state what the
// cache relies on), server.go (the gRPC server, whose callbacks tell the
// cache each request's stream and when a stream ends). The package doc
// (doc.go) draws the data flow.
//
// Cache is safe for concurrent use. Resources passed to Apply are owned by
// the store afterwards and must not be modified.
type Cache struct {
	// store: the resources (package store), reached through the Store
	// interface; st is the same store, for the app's reads (inspect.go).
	store Store
	st    *store.Store

	// mu guards the server's state below: the watches of each type
	// (types), the streams, the counters. Taken after the store's lock
	// (lock), or in the store's commit hooks (commitObserver), which run
	// with the store's lock held.
	mu sync.Mutex
	// lane: taken before the store's lock by every path of the server
	// (lock), never by a commit, so that a commit waits for at most the
	// one path holding the store's lock, not for every stream queued for
	// it (see lock).
	lane  sync.Mutex
	ready bool // the store's MarkReady was called (commitObserver.Readied)
	// types: per type the store's Type and the server's watches of it.
	types    map[string]*typeState
	typeURLs []string // served (WithTypes)

	// marshals: interim routes encoded (mbb.go), added to the store's
	// encodings for the serialisations-per-version figure.
	marshals uint64
	nextID   uint64

	maxBytes int // resource bytes per response (see WithMaxResponseBytes); 0: no limit
	// minCursor: from how many sorted names a delta pass finds their
	// resources with a store.Cursor (finder); minCursor unless a test sets it.
	minCursor int
	// maxNarrow: the most names of a watch indexed by name (interest.go);
	// maxNarrowNames unless a test sets it (-1: none).
	maxNarrow int
	// passNames: the room a delta pass collects the names it sends in,
	// taken by a pass and given back when it is done (deltaPass.names).
	passNames []string
	// committing: a commit offers its changes to the watches
	// (commitObserver.Committed); the delta responses they queue are
	// handed to their streams once the store's lock is released
	// (handOffs, commitObserver.Applied), not by waking each stream.
	committing bool
	handOffs   []*streamLoop

	// routeHold bounds an RDS hold (routehold.go); routeHolds and
	// routeHoldTimeouts count the RDS watches that held routes back, and
	// those whose hold ran out.
	routeHold                     time.Duration
	routeHolds, routeHoldTimeouts uint64
	// noMBB: no interim routes (mbb.go); mbbInterims counts those sent.
	noMBB       bool
	mbbSettle   time.Duration
	mbbInterims uint64

	requests map[any]*streamState // see order.go
	streams  map[streamKey]*streamState
	// registered: the server registers every stream as it opens
	// (openStream), because it authorizes its clients; from then on a
	// stream not registered has no state, and a watch whose stream is not
	// known is refused rather than served unfiltered.
	registered bool

	// pubMu serialises PublishServices; subsets (behind it) is each
	// service's subset clusters as last published.
	pubMu    sync.Mutex
	subsets  map[string][]string
	services map[string]bool // services published by PublishServices

	// vhds serves a route configuration over VHDS (ServeVHDS, vhds.go);
	// nil: none.
	vhds atomic.Pointer[vhdsTable]

	// ackObserver, when set, is told each change → ACK latency
	// (syncstatus.go); called under mu.
	ackObserver func(typeURL string, d time.Duration)
}

// DefaultMaxResponseBytes bounds the encoded size of one delta response
// (and, scaled to the names its client lists, of a sotw response of a type
// whose responses need not carry every resource: sotwPartBytes): its
// resources with their envelopes, and the response's own fields
// (envelope). A new Envoy subscribed to 5,000 assignments would
// otherwise get them in one 2 MB message, encoded and held by gRPC for
// every stream that connects at once; above the bound the rest follows
// each ACK. A part fits a 32 KiB buffer of the server's pool (counting the
// resources' bytes only, a part was ~47 KB with 242-byte assignments, and
// took a 64 KiB buffer).
const DefaultMaxResponseBytes = 32 << 10

// envelope bounds what a response adds to its resources: the type URL, a
// nonce, a system version, with their tags and lengths (removed names are
// not counted).
func envelope(typeURL string) int { return len(typeURL) + 64 }

// Option configures a Cache.
type Option func(*Cache)

// WithTypes sets the type URLs served (default DefaultTypes).
func WithTypes(typeURLs ...string) Option {
	return func(c *Cache) {
		c.typeURLs = typeURLs
	}
}

// WithMaxResponseBytes bounds the encoded size of one response (n <= 0:
// no bound; default DefaultMaxResponseBytes). Above it a delta response
// carries a first part and the rest follows each ACK; so does a sotw
// response of a type that need not carry every resource (EDS, RDS), whose
// parts carry at least eight times the bytes of the names its client
// lists (each part is acknowledged by a request listing them all), up to
// 32 times n. A resource larger than the bound is sent alone.
func WithMaxResponseBytes(n int) Option {
	return func(c *Cache) { c.maxBytes = max(n, 0) }
}

// NewCache returns an empty cache: a store of the types served and the
// server's state, registered as the store's observer. It starts nothing.
func NewCache(opts ...Option) *Cache {
	c := &Cache{maxBytes: DefaultMaxResponseBytes, minCursor: minCursor, maxNarrow: maxNarrowNames, routeHold: DefaultRouteHold, mbbSettle: DefaultMakeBeforeBreakSettle, requests: map[any]*streamState{}, streams: map[streamKey]*streamState{}}
	WithTypes(DefaultTypes...)(c)
	for _, o := range opts {
		o(c)
	}
	c.st = store.New(orderRank, c.typeURLs...)
	c.store = c.st
	c.types = make(map[string]*typeState, len(c.typeURLs))
	for _, u := range c.typeURLs {
		c.types[u] = &typeState{Type: c.store.Type(u), watches: map[*watch]struct{}{}, interest: newInterest()}
	}
	c.store.Observe(commitObserver{c})
	return c
}

// typeState is a type as the server sees it: the store's Type (read
// under the store's lock) and the type's open watches (under Cache.mu).
type typeState struct {
	*store.Type
	// watches are the type's open watches; interest, the same as a
	// commit wakes them (interest.go).
	watches  map[*watch]struct{}
	interest interest
	// sotwBases: the bases of the sotw states of the type (sotwversions.go).
	sotwBases sharedBases
	// version: Gen as a string, for versionGen (under Cache.mu).
	version    string
	versionGen uint64
}

// genVersion returns the type's generation as a string, the system version
// of its responses: made once per generation, not once per response.
// Under Cache.mu.
func (ts *typeState) genVersion() string {
	if ts.version == "" || ts.versionGen != ts.Gen {
		ts.version, ts.versionGen = strconv.FormatUint(ts.Gen, 10), ts.Gen
	}
	return ts.version
}

// watcher is the cache as the stream handlers reach it: a watch per
// request, on the typed state of the stream's handler, and
// go-control-plane's REST Fetch (not used).
type watcher interface {
	sotwWatcher
	deltaWatcher
	cache.ConfigFetcher
}

var _ watcher = (*Cache)(nil)

// watchSotw creates the watch of a sotw stream's request, from the state
// its type's last response installed (sub.held): its response, when there
// is one to send, is put on q (sotwserver.go). The returned function
// cancels it.
func (c *Cache) watchSotw(req *discovery.DiscoveryRequest, sub sotwSub, q sotwQueue) (func(), error) {
	ts, ok := c.types[req.GetTypeUrl()]
	if !ok {
		return nil, fmt.Errorf("type %s is not served", req.GetTypeUrl())
	}
	return c.create(&watch{ts: ts, sreq: req, sub: sub, sheld: sub.held, sch: q})
}

// watchDelta creates the watch of a delta stream's request, from the
// state its type's last response installed (sub.held): its response, when
// there is one to send, is put on q (deltaserver.go). The returned
// function cancels it.
func (c *Cache) watchDelta(req *discovery.DeltaDiscoveryRequest, sub deltaSub, q deltaQueue) (func(), error) {
	ts, ok := c.types[req.GetTypeUrl()]
	if !ok {
		return nil, fmt.Errorf("type %s is not served", req.GetTypeUrl())
	}
	w := &watch{}
	w.armDelta(ts, req, sub, q)
	return c.create(w)
}

// newDeltaWatch is watchDelta for the delta stream handler: the request
// is of stream key, which the watch knows without the request being noted
// (noteRequest), and the watch is returned too, to be re-armed for the ACK
// of its response (rearmDelta).
func (c *Cache) newDeltaWatch(key streamKey, req *discovery.DeltaDiscoveryRequest, sub deltaSub, q deltaQueue) (*watch, func(), error) {
	ts, ok := c.types[req.GetTypeUrl()]
	if !ok {
		return nil, nil, fmt.Errorf("type %s is not served", req.GetTypeUrl())
	}
	w := &watch{}
	w.armDelta(ts, req, sub, q)
	c.lock()
	defer c.unlock()
	w.stream = c.streamOf(key)
	cancel, err := c.createLocked(w)
	return w, cancel, err
}

// rearmDelta makes w, the watch of a delta stream's previous request of
// its type, the watch of req, an ACK (isACK: the subscription, sub, is
// the previous request's): w is cancelled, and created again for req, in
// one hold of the lock and without a new watch. What the watch reads and
// answers is what a new watch would (cancelLocked, then createLocked): the
// state of its type's last response (sub.held), the responses req
// answers, the change log since. Only if something else still refers to
// w is a new watch made instead: its response queued and not installed
// (cancelLocked hands it to the next watch), or an RDS hold's timers
// (routehold.go, mbb.go).
func (c *Cache) rearmDelta(w *watch, req *discovery.DeltaDiscoveryRequest, sub deltaSub) (*watch, func(), error) {
	c.lock()
	defer c.unlock()
	c.cancelLocked(w)
	next, st, t := w, w.stream, w.st
	if (w.done && !w.installed) || w.ts.URL == RouteType {
		next = &watch{}
	}
	cancelFn, forgetFn := next.cancelFn, next.forgetFn // nil for a new watch
	next.armDelta(w.ts, req, sub, w.dch)
	next.stream, next.st, next.cancelFn, next.forgetFn = st, t, cancelFn, forgetFn
	cancel, err := c.createLocked(next)
	return next, cancel, err
}

// Fetch is go-control-plane's REST polling API, not used: REST-JSON
// polling is served by REST (rest.go), which holds polls and counts NACKs.
func (c *Cache) Fetch(context.Context, *cache.Request) (cache.Response, error) {
	return nil, errors.New("xds cache: Fetch is not used; REST-JSON polling is served by xds.REST")
}
