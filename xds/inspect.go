package xds

import (
	"sort"

	"google.golang.org/protobuf/proto"
)

// Get returns the current resource of a type, or nil. The message must not
// be modified.
func (c *Cache) Get(typeURL, name string) proto.Message {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ts, ok := c.types[typeURL]; ok {
		if e, ok := ts.Resources[name]; ok {
			return e.Msg
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
	out := make([]ResourceInfo, 0, len(ts.Resources))
	for _, e := range ts.Resources {
		out = append(out, ResourceInfo{Name: e.Name, Version: e.Version, Bytes: e.ByteSize, Msg: e.Msg})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

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

// Stats returns the cache's counters.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := Stats{Marshals: c.marshals, RouteHolds: c.routeHolds, RouteHoldTimeouts: c.routeHoldTimeouts, Interims: c.mbbInterims, Resources: map[string]int{}, Watches: map[string]int{}}
	for u, ts := range c.types {
		s.Resources[u] = len(ts.Resources)
		s.Watches[u] = len(ts.watches)
	}
	return s
}
