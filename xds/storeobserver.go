package xds

import (
	"maps"
	"slices"

	"github.com/xdsbridge/xdsbridge/xds/store"
)

// Store is the store (package store) as the server reaches it: the
// watches, the stream handlers, REST and sync status read it through
// these methods only.
//
//   - Lock, Unlock: hold the store's lock to read its types at one
//     instant; the server takes it before its own (Cache.lock).
//   - Type: a type's resources, generation, change log and graves, read
//     under that lock.
//   - Observe: the server's commitObserver, told of each commit and of
//     MarkReady with the store's lock held.
//   - Read: REST's read of one instant and the next commit's channel.
//   - Wire: the index the request decoder reads (its own lock).
//   - Apply, MarkReady, Ready, Marshals, Counts: publishing, readiness
//     and counters.
type Store interface {
	Lock()
	Unlock()
	Type(typeURL string) *store.Type
	Observe(store.Observer)
	Read(typeURL string, names store.NameList, wild bool, fn func(*store.Entry)) <-chan struct{}
	Wire() *store.WireIndex
	Apply(changes ...store.Change) error
	MarkReady()
	Ready() bool
	Marshals() uint64
	Counts() map[string]int
}

var _ Store = (*store.Store)(nil)

// lock takes the store's lock, then the cache's: a watch is computed
// against one instant of the store, and the store's commits reach the
// cache (commitObserver) with the store's lock held, so the store's lock
// always comes first. Every other path of the server takes both too, even
// one that touches only the server's state (a stream's open, request and
// close, a watch's cancel, Stats): with Cache.mu ever taken alone, a
// watch being built would wait for it while holding the store's lock,
// and every other watch and commit behind it (under 1,000 clients this
// convoy raised change → ACK p50 by a quarter). So Cache.mu is in
// practice only ever contended through the store's lock, and reads of a
// Type's fields always happen with the store's lock held (but its URL,
// which never changes).
//
// The server's paths queue for the store's lock in a lane of their own
// (Cache.lane), which a commit (Store.Apply) does not take: one path at a
// time waits for the store's lock beside the commits. A fleet answered at
// once ACKs at once (4,000 delta clients that follow every change), and
// in one queue with them a commit would wait behind every ACK, first come
// first served once the lock's waiters starve (sync.Mutex), and the
// changes made meanwhile with it. In turn, commits made back to back
// would let the server's paths through about one per commit: commits
// come from the one merge loop, which debounces them (bridge/loop.go).
func (c *Cache) lock() {
	c.lane.Lock()
	c.store.Lock()
	c.mu.Lock()
}

func (c *Cache) unlock() {
	c.mu.Unlock()
	c.store.Unlock()
	c.lane.Unlock()
}

// commitObserver is how the store tells the cache of its commits
// (store.Observer): it answers the watches a commit wakes before the
// store's next commit, as both run with the store's lock held.
type commitObserver struct{ c *Cache }

// Committed offers the changed names to the open watches of t's type
// that may want them (interest.go), in the order of their creation.
func (o commitObserver) Committed(t *store.Type, changed []string) {
	c := o.c
	c.mu.Lock()
	defer c.mu.Unlock()
	c.committing = true
	defer func() { c.committing = false }()
	ts := c.types[t.URL]
	for _, w := range ts.interest.woken(changed) {
		c.tryRespond(w, changed)
		if ts.URL == ClusterType && !w.done {
			c.cdsCurrent(w) // nothing of interest changed for it
		}
	}
}

// Applied hands the delta responses the commits of an Apply queued to
// their streams (handOff), with the store's lock released: each is sent
// from this goroutine if its stream can send it without waiting, else its
// stream's handler goroutine is woken to.
func (o commitObserver) Applied() {
	c := o.c
	c.mu.Lock()
	loops := c.handOffs
	c.handOffs = nil
	c.mu.Unlock()
	handOff(loops)
}

// Readied answers the watches held until MarkReady, from the current
// state, type by type in make-before-break order (every held CDS watch
// before any EDS watch), so that a client held since it connected gets
// its clusters before their assignments.
func (o commitObserver) Readied() {
	c := o.c
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ready = true
	for _, ts := range slices.SortedFunc(maps.Values(c.types), typeOrder) {
		for _, w := range slices.SortedFunc(maps.Keys(ts.watches), watchOrder) {
			if !c.respond(w, false, mustAnswer(w)) {
				c.routeHeld(w) // a route held back here is bounded too
			}
		}
	}
}
