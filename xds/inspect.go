package xds

import (
	"github.com/xdsbridge/xdsbridge/xds/store"
	"google.golang.org/protobuf/proto"
)

// The store's reads, for the app and tests that hold the Cache only: the
// Cache is the serving core's one handle (its store and the server's
// state), so these read the store as store.Store's methods of the same
// names do.

// Get returns the current resource of a type, or nil. The message must not
// be modified.
func (c *Cache) Get(typeURL, name string) proto.Message { return c.st.Get(typeURL, name) }

// List returns the resources of a type, sorted by name. The messages must
// not be modified.
func (c *Cache) List(typeURL string) []store.ResourceInfo { return c.st.List(typeURL) }

// Snapshot returns the resources of each type URL given, read at one
// instant (store.Store.Snapshot).
func (c *Cache) Snapshot(typeURLs ...string) map[string][]store.ResourceInfo {
	return c.st.Snapshot(typeURLs...)
}

// Subscribe returns a channel that receives a value after the store's
// content changes and when MarkReady is called (store.Store.Subscribe).
func (c *Cache) Subscribe() (ch <-chan struct{}, cancel func()) { return c.st.Subscribe() }

// Apply performs the changes in order (store.Store.Apply); each commit
// answers the watches it wakes before the next.
func (c *Cache) Apply(changes ...store.Change) error { return c.store.Apply(changes...) }

// Stats are counters of the cache.
type Stats struct {
	Marshals  uint64         // resource encodings since start
	Resources map[string]int // per type URL
	Watches   map[string]int // open watches per type URL
	// RouteHolds: RDS watches that held routes back for their clusters'
	// assignments; RouteHoldTimeouts: of those, the ones whose hold ran
	// out (WithRouteHold) before the assignments were sent.
	RouteHolds, RouteHoldTimeouts uint64
	// Interims: interim RouteConfigurations sent (make before break).
	Interims uint64
}

// Stats returns the cache's counters: the store's encodings and
// resources, then the server's (interims are encodings too).
func (c *Cache) Stats() Stats {
	s := Stats{Marshals: c.store.Marshals(), Resources: c.store.Counts(), Watches: map[string]int{}}
	c.lock()
	defer c.unlock()
	s.Marshals += c.marshals
	s.RouteHolds, s.RouteHoldTimeouts, s.Interims = c.routeHolds, c.routeHoldTimeouts, c.mbbInterims
	for u, ts := range c.types {
		s.Watches[u] = len(ts.watches)
	}
	return s
}
