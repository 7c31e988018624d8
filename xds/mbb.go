package xds

import (
	"slices"
	"strings"
	"time"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xdsbridge/xdsbridge/translate"
	"github.com/xdsbridge/xdsbridge/xds/store"
)

// Make before break for routes, per sotw stream.
//
// grpc-go (v1.85) installs the config selector of a new RouteConfiguration
// before its cluster manager balancer has the clusters it adds: for a few
// milliseconds RPCs the new routes send to an added cluster fail
// UNAVAILABLE "unknown cluster selected for RPC", whatever the control
// plane's order (grpc-java fixed the same race, grpc-java#11947). A
// cluster that the routes already named is present. So when the
// RouteConfiguration a sotw stream would get next names clusters that the
// version the client last ACKed did not, the stream first gets an interim
// version: the ACKed one plus, at the end of each virtual host, a route
// that never matches and sends to the added clusters
// (translate.MakeBeforeBreakRoute), under a version of its own (ending in
// interimMark). grpc-go makes every cluster its routes name active, and
// routes no RPC to them.
//
// The real version follows when the client could apply the interim: it
// ACKed it, its CDS interest holds each added cluster (grpc-go asks for
// the clusters its routes name), the stream was sent each one's
// assignment (grpc-go's dependency manager hands the resolver a route
// configuration only once every cluster it names and its assignment are
// known), and then the settle time passed (WithMakeBeforeBreak; the
// resolver and balancer apply it asynchronously). Measured: sending the
// real version on the interim's ACK alone failed more calls than no
// interim at all (the two configurations reached the balancer together).
// The wait is a route hold (routehold.go): bounded by WithRouteHold,
// counted in RouteHolds.
//
// The real version going later, a cluster deleted with the change (the
// route moves from web/v1 back to web, and web/v1 goes) must not leave
// the stream's CDS while a version of the routes it holds or was sent
// still names it: grpc-go fails the RPCs of a route to a removed cluster,
// Envoy answers no_cluster. A sotw CDS response keeps such a cluster, as
// last served (the store keeps deleted clusters while their deletion is in
// its change log), and the CDS watch is looked at again when the client
// answers its routes.
//
// What a stream ACKed is read from the state the server keeps for it
// (sotw.go: name → version held); the content of each version the stream
// was sent is kept per stream and name (the one held and the one sent
// last: two messages shared with the store, or an interim's own). A
// client that holds no version of the RouteConfiguration yet (its first
// response, a new stream) gets the real version directly, and so does a
// client that NACKed the interim (the real version is then sent as usual,
// not held for anything). Delta streams (Envoy's, which has no such race)
// are served as before. Interims are counted (Stats).

// interimMark ends the version of an interim RouteConfiguration.
const interimMark = "~mbb"

// WithMakeBeforeBreak sets whether sotw streams get an interim
// RouteConfiguration before one that names clusters the version they
// ACKed did not (default on), and the settle time the real version waits
// after the interim's clusters and assignments are sent (default
// DefaultMakeBeforeBreakSettle). The whole wait is bounded by
// WithRouteHold.
func WithMakeBeforeBreak(on bool, settle time.Duration) Option {
	return func(c *Cache) { c.noMBB, c.mbbSettle = !on, max(settle, 0) }
}

// DefaultMakeBeforeBreakSettle is how long the real RouteConfiguration
// waits, after an interim's added clusters and their assignments were
// sent, for the client to apply the interim.
const DefaultMakeBeforeBreakSettle = 100 * time.Millisecond

// sentRoute is a RouteConfiguration version as sent on a stream.
type sentRoute struct {
	msg      proto.Message
	clusters []string // sorted
	any      *anypb.Any
	added    []string // of an interim: the clusters it adds
}

// interimFor returns the interim version to send instead of e (a changed
// RouteConfiguration) to sotw watch w, whose client holds version held
// (known: it holds one), or nil when e goes as is.
func (c *Cache) interimFor(w *watch, e *store.Entry, held string, known bool) (string, *sentRoute) {
	st := w.stream
	if c.noMBB || st == nil || w.delta || w.ts.URL != RouteType {
		return "", nil
	}
	c.noteRoute(st, e.Name, e.Version, &sentRoute{msg: e.Msg, clusters: e.Clusters, any: e.Any}, held)
	if !known || strings.HasSuffix(w.ss.rejected[e.Name], interimMark) {
		return "", nil
	}
	// Only a stream that also carries the client's clusters (ADS, as
	// grpc-go's) gets an interim: on a stream of routes alone the
	// clusters come on another stream, whose order this one cannot
	// follow, and the real version would wait out the hold.
	if st.cds == nil && st.pendingCDS == nil {
		return "", nil
	}
	prev := st.routes[e.Name][held]
	rc, ok := prev.msgRC()
	if !ok {
		return "", nil
	}
	var added []string
	for _, n := range e.Clusters {
		if _, in := slices.BinarySearch(prev.clusters, n); !in {
			added = append(added, n)
		}
	}
	if len(added) == 0 {
		return "", nil
	}
	im := translate.MakeBeforeBreakRoute(rc, added)
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(im)
	if err != nil {
		return "", nil
	}
	c.marshals++
	all := slices.Concat(prev.clusters, added)
	slices.Sort(all)
	v := store.FoldVersion(held, "mbb:"+e.Version) + interimMark
	sr := &sentRoute{msg: im, clusters: slices.Compact(all), any: &anypb.Any{TypeUrl: RouteType, Value: b}, added: added}
	c.noteRoute(st, e.Name, v, sr, held)
	c.mbbInterims++
	return v, sr
}

func (sr *sentRoute) msgRC() (*route.RouteConfiguration, bool) {
	if sr == nil {
		return nil, false
	}
	rc, ok := sr.msg.(*route.RouteConfiguration)
	return rc, ok
}

// noteRoute records version v of route n as sent on st, keeping only
// the one held and those about to be sent.
func (c *Cache) noteRoute(st *streamState, n, v string, sr *sentRoute, held string) {
	if st.routes == nil {
		st.routes = map[string]map[string]*sentRoute{}
	}
	m := st.routes[n]
	if m == nil {
		m = map[string]*sentRoute{}
		st.routes[n] = m
	}
	for k := range m {
		if k != held && k != v {
			delete(m, k)
		}
	}
	m[v] = sr
}

// forgetRoutes drops what a sotw RDS watch's stream keeps of routes it
// no longer subscribes to, and of versions it no longer holds (the
// request answers the last response); clusters kept for the versions
// it held may go (keepCluster).
func (c *Cache) forgetRoutes(w *watch) {
	st := w.stream
	if st == nil || st.routes == nil {
		return
	}
	sub := w.sub.SubscribedResources()
	for n, m := range st.routes {
		if _, ok := sub[n]; !ok && !w.sub.IsWildcard() {
			delete(st.routes, n)
			continue
		}
		held := w.ss.held.at(n)
		for v := range m {
			if v != held {
				delete(m, v)
			}
		}
	}
	if cw := st.cdsw; c.ready && cw != nil && len(cw.heldBack) > 0 {
		c.tryRespond(cw, cw.heldBack)
	}
}

// keepCluster returns, for sotw CDS watch w, the deleted clusters (as
// last served) that a version of a RouteConfiguration its stream holds
// or was sent still names: the cluster goes only after the routes stop
// naming it (make before break holds the real version back a while, and
// grpc-go fails RPCs to a cluster removed from under its routes); nil
// when nothing is kept.
func (c *Cache) keepCluster(w *watch) func(n string) *store.Entry {
	st := w.stream
	if c.noMBB || st == nil || w.delta || w.ts.URL != ClusterType || len(st.routes) == 0 || len(w.ts.Grave) == 0 {
		return nil
	}
	return func(n string) *store.Entry {
		g := w.ts.Grave[n]
		if g == nil || w.hidden(n) {
			return nil
		}
		for _, m := range st.routes {
			for _, sr := range m {
				if _, ok := slices.BinarySearch(sr.clusters, n); ok {
					return g
				}
			}
		}
		return nil
	}
}

// interim is the interim version of a route in a sotw response.
type interim struct {
	version string
	route   *sentRoute
}

// awaitsInterim reports whether route e waits, on sotw watch w's stream,
// for the client to apply the interim it holds: until the stream holds
// each cluster the interim added in its CDS interest and was sent its
// assignment (when it has one), and then for WithMakeBeforeBreak's
// settle time (grpc-go applies a route configuration once it has the
// clusters and assignments it names, asynchronously: the real version
// right after the last assignment would race the interim). It sets a
// timer to look again when only the settle time is missing.
func (c *Cache) awaitsInterim(w *watch, e *store.Entry, clusters, loads *typeState, now time.Time) bool {
	st := w.stream
	kv, ok := w.ss.held.get(e.Name)
	if !ok || kv == e.Version {
		return false
	}
	sr := st.routes[e.Name][kv]
	if sr == nil || len(sr.added) == 0 {
		return false
	}
	ready := w.created
	for _, cn := range sr.added {
		if _, ok := clusters.Resources[cn]; !ok || !st.vis.sees(cn) {
			continue
		}
		if !((st.cds != nil && st.cds.wants(cn)) || (st.pendingCDS != nil && st.pendingCDS.wants(cn))) {
			return true // the client asks for it once it applies the interim
		}
		if loads == nil {
			continue
		}
		if _, ok := loads.Resources[cn]; !ok {
			continue
		}
		t, sent := st.edsSent.sentAt(cn)
		if !sent {
			return true
		}
		if t.After(ready) {
			ready = t
		}
	}
	if at := ready.Add(c.mbbSettle); now.Before(at) {
		c.wakeAt(w, at)
		return true
	}
	return false
}
