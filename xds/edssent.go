package xds

import (
	"iter"
	"maps"
	"reflect"
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
// fold into the same sets, in the same order), and the whole becomes the
// subscription's set the moment it is as large as the subscription: what
// was sent is always within the subscription last checked (keep), so
// equal sizes are equal sets.
type sentAssignments struct {
	// Delta: set ∪ extra, disjoint; set nil: none sent yet.
	set   *nameSet
	extra overlay
	// within: a subscription that holds every name sent (set by keep);
	// nil: none known.
	within *nameSet

	// at: sotw, when each name was sent (sentEpoch's monotonic clock: 8
	// bytes a name, not a time.Time's 24).
	at map[string]time.Duration
	// atWithin: a sotw subscription's names (the map itself: a request
	// that changes them replaces it, sotwSub.set, and equal sets are one
	// map, nameset.go) that hold every name in at; nil: none known.
	atWithin map[string]struct{}
}

// minFold is the overlay size below which extra is not folded into the
// shared set (a few names cost less in a private overlay than a shared
// set).
const minFold = 64

func (s *sentAssignments) has(n string) bool {
	if s.set != nil {
		if s.set.has(n) {
			return true
		}
		return s.extra.has(n)
	}
	_, ok := s.at[n]
	return ok
}

// sentAt is when n was sent, on a sotw stream.
func (s *sentAssignments) sentAt(n string) (time.Time, bool) {
	if s.set != nil {
		return time.Time{}, s.has(n)
	}
	d, ok := s.at[n]
	return sentEpoch.Add(d), ok
}

// sentEpoch is the origin of sentAssignments.at.
var sentEpoch = time.Now()

// len is the number of names sent.
func (s *sentAssignments) len() int {
	if s.set != nil {
		return s.set.len() + s.extra.len()
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
		// A slice or map made for the overlay is as large as names: the
		// names a subscription holds beyond those sent need never be
		// sent (no assignment, or removed), and an overlay made as large
		// as the set or that gap would be held, per stream, until a fold
		// that may never come (append doubles as a first sync goes on).
		size := len(names)
		for _, n := range names {
			if !has(n) {
				s.extra.add(n, size)
			}
		}
		s.settle()
		return
	}
	if s.at == nil {
		s.at = map[string]time.Duration{}
	}
	d := now.Sub(sentEpoch)
	for _, n := range names {
		s.at[n] = d
	}
}

// settle makes set ∪ extra the subscription's set once it is as large
// (it is within it, so it is the same), else folds extra into a shared
// set once extra is as large as the set.
func (s *sentAssignments) settle() {
	switch {
	case s.extra.len() == 0:
	case s.within != nil && s.set.len()+s.extra.len() == s.within.len():
		s.set, s.extra = s.within, overlay{}
	case s.extra.len() >= max(s.set.len(), minFold):
		s.set, s.extra = s.set.derive(s.extra.names(), nil), overlay{}
	}
}

func (s *sentAssignments) remove(names []string) {
	if s.set != nil {
		var inSet []string
		for _, n := range s.extra.remove(names) {
			if s.set.has(n) {
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
// is the subscription's, nor on a sotw stream whose names are the map last
// kept to.
func (s *sentAssignments) keep(sub map[string]struct{}, subSet, grewFrom *nameSet) {
	if s.set != nil {
		if subSet != nil && (subSet == s.within || (grewFrom != nil && grewFrom == s.within) || (subSet == s.set && s.extra.len() == 0)) {
			s.within = subSet
			return
		}
		var gone []string
		for n := range s.set.m {
			if _, ok := sub[n]; !ok {
				gone = append(gone, n)
			}
		}
		for n := range s.extra.all() {
			if _, ok := sub[n]; !ok {
				gone = append(gone, n)
			}
		}
		s.remove(gone)
		s.within = subSet
		s.settle()
		return
	}
	if s.atWithin != nil && reflect.ValueOf(sub).UnsafePointer() == reflect.ValueOf(s.atWithin).UnsafePointer() {
		return // a sotw ACK listing the same names
	}
	for n := range s.at {
		if _, ok := sub[n]; !ok {
			delete(s.at, n)
		}
	}
	s.atWithin = sub
}

// unbounded notes that names outside any subscription may be sent (a
// wildcard subscription): the next keep looks at every name.
func (s *sentAssignments) unbounded() { s.within, s.atWithin = nil, nil }

// overlay is a delta stream's names sent and not yet folded into its
// shared set. In a first sync an Envoy is sent its assignments in
// ascending order (a response's names are sorted, and its parts follow
// each other), so the names are kept as a sorted slice, each appended,
// while every name added is greater than the last; a name that arrives
// out of order turns the slice into a map, for the rest of the overlay's
// life (until it is folded). The slice folded is the names in order: the
// Envoys of a fleet fold with the same arguments, which derive looks up
// before it builds anything.
type overlay struct {
	asc []string            // sorted, no repeats; nil once m is made
	m   map[string]struct{} // nil while the names come in order
}

func (o *overlay) len() int {
	if o.m != nil {
		return len(o.m)
	}
	return len(o.asc)
}

func (o *overlay) has(n string) bool {
	if o.m != nil {
		_, ok := o.m[n]
		return ok
	}
	_, ok := slices.BinarySearch(o.asc, n)
	return ok
}

// add adds n (if it is not there); size: how large the overlay is
// expected to grow, the capacity of a slice or map made for it.
func (o *overlay) add(n string, size int) {
	if o.m != nil {
		o.m[n] = struct{}{}
		return
	}
	last := len(o.asc) - 1
	switch {
	case last < 0:
		if o.asc == nil {
			o.asc = make([]string, 0, size)
		}
		o.asc = append(o.asc, n)
	case o.asc[last] < n:
		o.asc = append(o.asc, n)
	default:
		if _, ok := slices.BinarySearch(o.asc, n); ok {
			return
		}
		o.m = make(map[string]struct{}, max(size, len(o.asc)+1))
		for _, a := range o.asc {
			o.m[a] = struct{}{}
		}
		o.m[n] = struct{}{}
		o.asc = nil
	}
}

// remove removes names from o, and returns those it did not hold.
func (o *overlay) remove(names []string) (absent []string) {
	if o.m != nil {
		for _, n := range names {
			if _, ok := o.m[n]; ok {
				delete(o.m, n)
			} else {
				absent = append(absent, n)
			}
		}
		return absent
	}
	var gone map[int]struct{} // indexes into asc (names may repeat)
	for _, n := range names {
		if i, ok := slices.BinarySearch(o.asc, n); ok {
			if gone == nil {
				gone = map[int]struct{}{}
			}
			gone[i] = struct{}{}
		} else {
			absent = append(absent, n)
		}
	}
	if len(gone) > 0 {
		kept := o.asc[:0]
		for i, n := range o.asc {
			if _, ok := gone[i]; !ok {
				kept = append(kept, n)
			}
		}
		clear(o.asc[len(kept):])
		o.asc = kept
	}
	return absent
}

// names returns the names of o, for a fold: o is emptied (made the zero
// overlay) after, and the slice never written again.
func (o *overlay) names() []string {
	if o.m != nil {
		return slices.Collect(maps.Keys(o.m))
	}
	return o.asc
}

// all yields the names of o.
func (o *overlay) all() iter.Seq[string] {
	if o.m != nil {
		return maps.Keys(o.m)
	}
	return slices.Values(o.asc)
}
