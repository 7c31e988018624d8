package xds

import (
	"maps"
	"slices"
	"time"
)

// sentAssignments are the assignments sent on a stream since it last
// subscribed to them (routehold.go), by cluster name. A delta stream keeps
// the names as a shared nameSet (nameset.go) and a private overlay: an
// Envoy sent every assignment it subscribes to holds the set its
// subscription is, not a map of its own. A sotw stream also keeps when
// each was sent, which make before break reads (mbb.go); grpc-go clients
// subscribe to few.
//
// The overlay is what keeps an Envoy's first sync linear: its 5,000
// assignments come in ~60 parts, and deriving a shared set per part
// copied the set so far each time (n²/160 map inserts per Envoy; at
// 20,000 services the initial sync was superlinear). Names sent are added
// to extra, which is folded into the shared set only when it is as large
// as the set (each name is copied O(1) times, and Envoys on the same path
// fold into the same sets), and the whole becomes the subscription's set
// the moment it is as large as the subscription: what was sent is always
// within the subscription last checked (keep), so equal sizes are equal
// sets.
type sentAssignments struct {
	// Delta: set ∪ extra, disjoint; set nil: none sent yet.
	set   *nameSet
	extra map[string]struct{}
	// within: a subscription that holds every name sent (set by keep);
	// nil: none known.
	within *nameSet

	at map[string]time.Time // sotw
}

// minFold is the overlay size below which extra is not folded into the
// shared set (a few names cost less in a private map than a shared set).
const minFold = 64

func (s *sentAssignments) has(n string) bool {
	if s.set != nil {
		if s.set.has(n) {
			return true
		}
		_, ok := s.extra[n]
		return ok
	}
	_, ok := s.at[n]
	return ok
}

// sentAt is when n was sent, on a sotw stream.
func (s *sentAssignments) sentAt(n string) (time.Time, bool) {
	if s.set != nil {
		return time.Time{}, s.has(n)
	}
	t, ok := s.at[n]
	return t, ok
}

// len is the number of names sent.
func (s *sentAssignments) len() int {
	if s.set != nil {
		return s.set.len() + len(s.extra)
	}
	return len(s.at)
}

// add records names as sent; now is when, kept for a sotw stream only (a
// delta stream's caller need not read the clock).
func (s *sentAssignments) add(delta bool, names []string, now time.Time) {
	if delta {
		if s.set == nil {
			s.set = emptyNames
		}
		has := s.set.has
		if len(names) >= minCursor {
			// A response's names are sorted: a walk of the set's sorted
			// names costs less than a lookup each in its map (namesorted.go).
			has = newNameCursor(s.set).has
		}
		for _, n := range names {
			if has(n) {
				continue
			}
			if s.extra == nil {
				s.extra = make(map[string]struct{}, len(names))
			}
			s.extra[n] = struct{}{}
		}
		s.settle()
		return
	}
	if s.at == nil {
		s.at = map[string]time.Time{}
	}
	for _, n := range names {
		s.at[n] = now
	}
}

// settle makes set ∪ extra the subscription's set once it is as large
// (it is within it, so it is the same), else folds extra into a shared
// set once extra is as large as the set.
func (s *sentAssignments) settle() {
	switch {
	case len(s.extra) == 0:
	case s.within != nil && s.set.len()+len(s.extra) == s.within.len():
		s.set, s.extra = s.within, nil
	case len(s.extra) >= max(s.set.len(), minFold):
		s.set, s.extra = s.set.derive(slices.Collect(maps.Keys(s.extra)), nil), nil
	}
}

func (s *sentAssignments) remove(names []string) {
	if s.set != nil {
		var inSet []string
		for _, n := range names {
			if _, ok := s.extra[n]; ok {
				delete(s.extra, n)
			} else if s.set.has(n) {
				inSet = append(inSet, n)
			}
		}
		if len(inSet) > 0 {
			s.set = s.set.derive(nil, inSet)
		}
		return
	}
	for _, n := range names {
		delete(s.at, n)
	}
}

// keep forgets the names not in sub (a subscription's names; subSet, its
// shared set, on a delta stream, and grewFrom, the set it grew from
// without removals, if it did). Nothing is looked at on a delta stream
// whose subscription is the one last kept to or grew from it, or whose set
// is the subscription's.
func (s *sentAssignments) keep(sub map[string]struct{}, subSet, grewFrom *nameSet) {
	if s.set != nil {
		if subSet != nil && (subSet == s.within || (grewFrom != nil && grewFrom == s.within) || (subSet == s.set && len(s.extra) == 0)) {
			s.within = subSet
			return
		}
		var gone []string
		for n := range s.set.m {
			if _, ok := sub[n]; !ok {
				gone = append(gone, n)
			}
		}
		for n := range s.extra {
			if _, ok := sub[n]; !ok {
				gone = append(gone, n)
			}
		}
		s.remove(gone)
		s.within = subSet
		s.settle()
		return
	}
	for n := range s.at {
		if _, ok := sub[n]; !ok {
			delete(s.at, n)
		}
	}
}

// unbounded notes that names outside any subscription may be sent (a
// wildcard subscription): the next keep looks at every name.
func (s *sentAssignments) unbounded() { s.within = nil }
