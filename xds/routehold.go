package xds

import (
	"slices"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/xdsbridge/xdsbridge/xds/store"
)

// Routes after their clusters' assignments, per stream.
//
// The xDS protocol's order for changes is CDS, then EDS for those
// clusters, then LDS, then RDS ("Eventual consistency considerations").
// Envoy asks for a new cluster's assignment only once it has applied the
// cluster, which warms until the assignment arrives; a RouteConfiguration
// applied meanwhile routes to a cluster that is not active, and Envoy
// answers 503 no_cluster (measured: RDS applied 2-29 ms before the new
// subset cluster's EDS, 0-8 calls failed per change). The cache commits
// routes after clusters and assignments, but the assignment of a cluster
// the client has not asked for yet cannot go before the routes.
//
// So the cache holds back, per stream, a RouteConfiguration that names a
// cluster C while:
//   - the stream's CDS interest holds C (its wildcard, or C by name): C
//     was sent on the stream, or is about to be;
//   - C has an assignment (an EDS cluster; its ClusterLoadAssignment is
//     named C and depends on C) that the client may read;
//   - the stream has asked for assignments at some point (edsSeen), and
//     was sent no assignment of C since it last subscribed to C's.
//
// The held routes go with the first RDS response after C's assignment is
// sent (for sotw: when the server sends it, as for clusters in order.go;
// the server sends a stream's responses in the order it is handed them).
// A client that learns its clusters from its routes (grpc-go asks LDS,
// RDS, then CDS for the clusters its routes name, then EDS) does not hold
// C in its CDS interest before its routes name C: nothing is held for it,
// which would wait for a request that only the routes bring. A cluster
// updated (not new) on the stream is active at the client while it warms:
// an assignment sent before, at any version, is enough.
//
// A hold is bounded: after WithRouteHold's duration (DefaultRouteHold) the
// watch sends what it held (a client that never asks for an assignment
// it could). Holds and timeouts are counted (Stats; the wait of a real
// route configuration after an interim, mbb.go, is a hold too).

// DefaultRouteHold bounds how long an RDS response waits for the
// assignments of the clusters it names.
const DefaultRouteHold = 2 * time.Second

// WithRouteHold bounds how long an RDS response is held back for the
// assignments of the clusters it names (d <= 0: routes are not held back;
// default DefaultRouteHold).
func WithRouteHold(d time.Duration) Option {
	return func(c *Cache) { c.routeHold = max(d, 0) }
}

// routeHolder returns what an RDS watch's response must hold back: the
// routes naming a cluster whose assignment the stream waits for, and
// (mbb.go) the real version after an interim until the client could
// apply the interim.
func (c *Cache) routeHolder(w *watch) func(*store.Entry) bool {
	st := w.stream
	if st == nil || c.routeHold <= 0 || w.holdExpired {
		return nil
	}
	clusters, loads := c.types[ClusterType], c.types[EndpointType]
	edsRule := st.edsSeen && (st.cds != nil || st.pendingCDS != nil) && clusters != nil && loads != nil
	mbbRule := !w.delta && !c.noMBB && st.routes != nil && clusters != nil
	if !edsRule && !mbbRule {
		return nil
	}
	now := time.Now()
	return func(e *store.Entry) bool {
		if edsRule {
			for _, cn := range e.Clusters {
				if c.awaitsEDS(st, clusters, loads, cn) {
					return true
				}
			}
		}
		return mbbRule && c.awaitsInterim(w, e, clusters, loads, now)
	}
}

// awaitsEDS reports whether the stream waits for the assignment of
// cluster cn (see the file's comment).
func (c *Cache) awaitsEDS(st *streamState, clusters, loads *typeState, cn string) bool {
	if st.edsSent.has(cn) {
		return false
	}
	if _, ok := clusters.Resources[cn]; !ok || !st.vis.sees(cn) {
		return false
	}
	la, ok := loads.Resources[cn]
	if !ok || la.Dep == nil || la.Dep.TypeURL != ClusterType || la.Dep.Name != cn {
		return false
	}
	return (st.cds != nil && st.cds.wants(cn)) || (st.pendingCDS != nil && st.pendingCDS.wants(cn))
}

// wants reports whether the stream's CDS interest holds cluster n.
func (sc *sentClusters) wants(n string) bool {
	_, ok := sc.names[n]
	return sc.wild || ok
}

// edsInterest notes a new EDS watch: the stream asks for assignments;
// those it no longer subscribes to are forgotten as sent (a subscription
// again waits for them again); a sotw EDS response still queued was
// dropped by the server for this request (sotwserver.go).
func (c *Cache) edsInterest(w *watch) {
	st := w.stream
	st.edsSeen = true
	if !w.delta {
		st.pendingEDS = nil
	}
	if w.sub.IsWildcard() {
		st.edsSent.unbounded()
		return
	}
	var subSet, grewFrom *nameSet
	if w.delta {
		subSet, grewFrom = w.dsub.names, w.dsub.grewFrom
	} else if ss, ok := w.sub.(sotwSub); ok {
		subSet = ss.names
	}
	st.edsSent.keep(w.sub.SubscribedResources(), subSet, grewFrom)
}

// sentEDS records an EDS response to w: sent at once on a delta stream,
// once the server sends it on a sotw one (sotwSentEDS).
func (c *Cache) sentEDS(w *watch, sent, removed []string, resp *discovery.DiscoveryResponse) {
	st := w.stream
	if st == nil {
		return
	}
	if resp != nil {
		if len(sent) > 0 {
			if st.pendingEDS == nil {
				st.pendingEDS = map[*discovery.DiscoveryResponse][]string{}
			}
			// Sorted, as a sotw send is kept (sentAssignments.add).
			names := slices.Clone(sent)
			if !slices.IsSorted(names) {
				slices.Sort(names)
			}
			st.pendingEDS[resp] = names
		}
		return
	}
	if len(removed) > 0 {
		st.edsSent.remove(removed)
	}
	c.edsDelivered(st, sent)
}

// sotwSentEDS is told by the server of each sotw EDS response it sends.
func (c *Cache) sotwSentEDS(key streamKey, resp *discovery.DiscoveryResponse) {
	c.lock()
	defer c.unlock()
	st := c.streams[key]
	if st == nil {
		return
	}
	sent, ok := st.pendingEDS[resp]
	if !ok {
		return
	}
	delete(st.pendingEDS, resp)
	c.edsDelivered(st, sent)
}

func (c *Cache) edsDelivered(st *streamState, sent []string) {
	if len(sent) == 0 {
		return
	}
	// When a sotw send was made is read by make before break, for its
	// settle time (mbb.go).
	var now time.Time
	var window time.Duration
	if !st.key.delta {
		now = time.Now()
		if !c.noMBB {
			window = c.mbbSettle
		}
	}
	st.edsSent.add(st.key.delta, sent, now, window)
	c.wakeRDS(st)
}

// wakeRDS answers the stream's open RDS watch if it held routes back.
func (c *Cache) wakeRDS(st *streamState) {
	if r := st.rds; r != nil && len(r.heldBack) > 0 {
		c.tryRespond(r, r.heldBack)
	}
}

// wakeAt answers RDS watch w at t (or soon after), if it still holds
// routes back then.
func (c *Cache) wakeAt(w *watch, t time.Time) {
	if w.wakeTimer != nil {
		return
	}
	w.wakeTimer = time.AfterFunc(max(time.Until(t), time.Millisecond), func() {
		c.lock()
		defer c.unlock()
		w.wakeTimer = nil
		if _, open := w.ts.watches[w]; !open || w.done {
			return
		}
		c.tryRespond(w, w.heldBack)
	})
}

// routeHeld starts the bound of a hold: w, an RDS watch left open, holds
// routes back.
func (c *Cache) routeHeld(w *watch) {
	if w.ts.URL != RouteType || w.done || len(w.heldBack) == 0 || w.holdTimer != nil || w.stream == nil {
		return
	}
	c.routeHolds++
	w.holdTimer = time.AfterFunc(c.routeHold, func() {
		c.lock()
		defer c.unlock()
		if _, open := w.ts.watches[w]; !open || w.done {
			return
		}
		w.holdExpired = true
		c.routeHoldTimeouts++
		c.tryRespond(w, w.heldBack)
	})
}
