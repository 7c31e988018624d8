package xds

import (
	"maps"
	"slices"
)

// Which watches a commit wakes.
//
// A commit offers its changed names to the open watches of its type that
// may want them (commitObserver.Committed). Most watches are offered every
// commit (broad): checking a watch's interest costs a few map lookups per
// changed name, where an index by name would have to be rebuilt under
// every subscribed name on every ACK (5,000 names for an Envoy with 5,000
// clusters). A sotw watch of a few assignments by name, a grpc-go client's
// clusters, is indexed under its names instead (narrow), and a commit
// wakes it only if it changed one of them: in a fleet of grpc-go clients
// of a few clusters each, a change of one assignment costs the clients
// that use it, not a pass of every client's watch.
//
// A narrow watch wants nothing but its names: it is a sotw watch (its
// state holds only the names it lists, sotwSub.set) of assignments (no
// full state, no make-before-break interim, no route hold), not wildcard,
// and has held nothing back for its clusters. A watch that holds an
// assignment back becomes broad (widen): a commit retries what it holds
// back (Cache.respond), whatever the commit changed.

// maxNarrowNames is the most names a narrow watch lists: indexing a
// watch costs a map insertion and a deletion per name, on each of its
// client's requests.
const maxNarrowNames = 64

// interest is a type's open watches as commits wake them. Under Cache.mu.
type interest struct {
	broad  map[*watch]struct{}
	byName map[string]map[*watch]struct{} // the narrow watches under each of their names
}

func newInterest() interest {
	return interest{broad: map[*watch]struct{}{}, byName: map[string]map[*watch]struct{}{}}
}

// narrowWatch reports whether w is to be indexed under its names, of
// which it lists at most maxNames.
func narrowWatch(w *watch, maxNames int) bool {
	if w.delta || w.ts.URL != EndpointType || len(w.heldBack) > 0 || w.sub.IsWildcard() {
		return false
	}
	return len(w.sub.SubscribedResources()) <= maxNames
}

// add enters w, a watch being tracked, narrow if it lists at most
// maxNames.
func (in *interest) add(w *watch, maxNames int) {
	if !narrowWatch(w, maxNames) {
		in.broad[w] = struct{}{}
		return
	}
	w.narrow = true
	w.narrowNames = slices.Collect(maps.Keys(w.sub.SubscribedResources()))
	for _, n := range w.narrowNames {
		ws := in.byName[n]
		if ws == nil {
			ws = map[*watch]struct{}{}
			in.byName[n] = ws
		}
		ws[w] = struct{}{}
	}
}

// remove takes w out, a watch no longer tracked.
func (in *interest) remove(w *watch) {
	if !w.narrow {
		delete(in.broad, w)
		return
	}
	for _, n := range w.narrowNames {
		ws := in.byName[n]
		delete(ws, w)
		if len(ws) == 0 {
			delete(in.byName, n)
		}
	}
	w.narrow, w.narrowNames = false, nil
}

// widen makes w, a tracked narrow watch, broad.
func (in *interest) widen(w *watch) {
	in.remove(w)
	in.broad[w] = struct{}{}
}

// woken returns the watches a commit of changed wakes, in the order of
// their creation (watchOrder).
func (in *interest) woken(changed []string) []*watch {
	ws := slices.Collect(maps.Keys(in.broad))
	if len(in.byName) > 0 {
		var seen map[*watch]struct{}
		for _, n := range changed {
			for w := range in.byName[n] {
				if seen == nil {
					seen = map[*watch]struct{}{}
				}
				if _, dup := seen[w]; !dup {
					seen[w] = struct{}{}
					ws = append(ws, w)
				}
			}
		}
	}
	slices.SortFunc(ws, watchOrder)
	return ws
}
