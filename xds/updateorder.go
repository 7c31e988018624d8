package xds

import (
	"slices"

	"github.com/xdsbridge/xdsbridge/xds/store"
)

// The order of responses on a stream.
//
// updateOrder is the one list of the served types in the order the xDS
// protocol asks a client to be given changes ("Eventual consistency
// considerations"): a type comes after the types its resources refer to.
// Each entry's hold is the rule that keeps a resource of that type out of
// a stream's response until the stream was sent what it refers to:
//
//	type         held back on a stream until
//	clusters     (never)
//	assignments  the stream was sent the assignment's cluster at the version
//	             the assignment depends on (clusterHolder, order.go)
//	listeners    (never)
//	routes       the stream was sent the assignments of the clusters the
//	             routes name, bounded by WithRouteHold (routeHolder,
//	             routehold.go); on a sotw stream, routes that add
//	             clusters are preceded by an interim version, and the real
//	             version waits until the client could apply the interim
//	             (make before break, mbb.go)
//	virtual      the stream was sent the route configuration whose vhds
//	  hosts      names them ("VHDS updates must arrive after RDS updates";
//	             vhdsStream, vhds.go). Served outside the store, to delta
//	             streams only: not among DefaultTypes or publishSteps.
//
// A held resource goes with the first response of its type after what it
// waits for is sent. The same order is every other order of types:
// DefaultTypes, the types Apply re-versions dependents in and MarkReady
// answers held watches in (typeOrder), and the steps of PublishServices:
// upserts in this order, removals in reverse (publishSteps), so that a
// client is never given a reference to something it does not have.
var updateOrder = []orderRule{
	{typeURL: ClusterType},
	{typeURL: EndpointType, hold: holdUntilCluster},
	{typeURL: ListenerType},
	{typeURL: RouteType, hold: holdUntilAssignments},
	{typeURL: VirtualHostType, hold: holdUntilRouteSent, outsideStore: true},
}

// orderRule is one type's place in updateOrder, and what its responses
// hold back.
type orderRule struct {
	typeURL string
	hold    holdRule
	// outsideStore: the type is not served from the store (VHDS).
	outsideStore bool
}

// holdRule names what a type's responses hold back on a stream.
type holdRule int

const (
	holdNothing          holdRule = iota
	holdUntilCluster              // clusterHolder
	holdUntilAssignments          // routeHolder, and interims first (mbb.go)
	holdUntilRouteSent            // vhdsStream.next (vhds.go)
)

// holder returns what w's response must hold back (its type's rule in
// updateOrder); the zero value when nothing is held back. c.mu is held.
func (c *Cache) holder(w *watch, inOrder int) entryHolder {
	rule := holdNothing
	if r := w.ts.Order; r < len(updateOrder) {
		rule = updateOrder[r].hold
	}
	switch rule {
	case holdUntilCluster:
		return entryHolder{cluster: c.clusterHolder(w, inOrder)}
	case holdUntilAssignments:
		return entryHolder{route: c.routeHolder(w)}
	}
	return entryHolder{}
}

// entryHolder tells the entries a response holds back (holder); the zero
// value holds none back.
type entryHolder struct {
	cluster clusterHold             // holdUntilCluster (zero: none)
	route   func(*store.Entry) bool // holdUntilAssignments (nil: none)
}

// holds reports whether the response holds e back.
func (h *entryHolder) holds(e *store.Entry) bool {
	if h.cluster.st != nil {
		return h.cluster.holds(e)
	}
	return h.route != nil && h.route(e)
}

// DefaultTypes are the types a cache's store serves unless told
// otherwise, in make-before-break order.
var DefaultTypes = orderedTypes()

func orderedTypes() []string {
	out := make([]string, 0, len(updateOrder))
	for _, r := range updateOrder {
		if !r.outsideStore {
			out = append(out, r.typeURL)
		}
	}
	return out
}

// orderRank is the index of typeURL in updateOrder; a type not there
// ranks after all of them.
func orderRank(typeURL string) int {
	if i := slices.IndexFunc(updateOrder, func(r orderRule) bool { return r.typeURL == typeURL }); i >= 0 {
		return i
	}
	return len(updateOrder)
}

// typeOrder orders types as updateOrder does, then others by URL (a
// comparison function for slices.SortFunc).
func typeOrder(a, b *typeState) int { return store.TypeOrder(a.Type, b.Type) }

// publishSteps orders one publication's changes: the upserts of each type
// in updateOrder, then the removals in reverse (routes and listeners
// before the assignments and clusters they name). Types not in
// updateOrder are not published.
func publishSteps(upserts map[string][]store.Resource, deletes map[string][]string) []store.Change {
	steps := make([]store.Change, 0, 2*len(updateOrder))
	for _, r := range updateOrder {
		if !r.outsideStore {
			steps = append(steps, store.Change{TypeURL: r.typeURL, Upserts: upserts[r.typeURL]})
		}
	}
	for _, r := range slices.Backward(updateOrder) {
		if !r.outsideStore {
			steps = append(steps, store.Change{TypeURL: r.typeURL, Deletes: deletes[r.typeURL]})
		}
	}
	return steps
}
