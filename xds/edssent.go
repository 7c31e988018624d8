package xds

import (
	"iter"
	"maps"
	"slices"
	"time"
)

// sentAssignments are the assignments sent on a stream since it last
// subscribed to them (routehold.go), by cluster name, kept as a shared
// nameSet (nameset.go) and a private overlay: an Envoy sent every
// assignment it subscribes to holds the set its subscription is, not a
// map of its own. A sotw stream also keeps when its recent sends were
// made, which make before break reads (mbb.go).
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
	// set ∪ extra, disjoint; set nil: none sent yet.
	set   *nameSet
	extra overlay
	// within: a subscription that holds every name sent (set by keep);
	// nil: none known.
	within *nameSet

	// recent: a sotw stream's sends of the last settle window, oldest
	// first (add). Make before break waits for a send until the settle
	// time after it (Cache.awaitsInterim), so an older one, whatever its
	// names, is as good as one long ago, and is dropped: a sotw Envoy
	// keeps when its assignments were sent while they matter, not a time
	// per name for its life.
	recent []sentBatch
}

// sentBatch is one sotw send: its names, sorted (the response's, never
// written), and when.
type sentBatch struct {
	at    time.Time
	names []string
}

// minFold is the overlay size below which extra is not folded into the
// shared set (a few names cost less in a private overlay than a shared
// set).
const minFold = 64

func (s *sentAssignments) has(n string) bool {
	if s.set == nil {
		return false
	}
	return s.set.has(n) || s.extra.has(n)
}

// sentAt is when n was sent, on a sotw stream: the time of its latest
// recent send, or the zero time for one before the settle window.
func (s *sentAssignments) sentAt(n string) (time.Time, bool) {
	if !s.has(n) {
		return time.Time{}, false
	}
	for i := len(s.recent) - 1; i >= 0; i-- {
		if _, ok := slices.BinarySearch(s.recent[i].names, n); ok {
			return s.recent[i].at, true
		}
	}
	return time.Time{}, true
}

// len is the number of names sent.
func (s *sentAssignments) len() int {
	if s.set == nil {
		return 0
	}
	return s.set.len() + s.extra.len()
}

// add records names as sent. On a sotw stream (!delta) it also keeps the
// send, made at now, for the settle window (recent; none when window is
// 0): names must then be sorted, and are kept as they are.
func (s *sentAssignments) add(delta bool, names []string, now time.Time, window time.Duration) {
	if !delta {
		s.expire(now, window)
		if window > 0 && len(names) > 0 {
			s.recent = append(s.recent, sentBatch{at: now, names: names})
		}
	}
	if s.set == nil {
		s.set = emptyNames
		if !delta {
			// Derived apart from the delta streams' sets and the sotw
			// subscriptions' lists (sotwSentNames).
			s.set = sotwSentNames
		}
	}
	has := s.set.has
	if walkWorth(len(names), s.set.len(), minCursor) {
		// A response's names are sorted: a walk of the set's sorted
		// names costs less than a lookup each in its map when they are
		// many of its names (namesorted.go).
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
}

// expire drops the sends of recent made a settle window (window) or more
// before now: they hold nothing back any more.
func (s *sentAssignments) expire(now time.Time, window time.Duration) {
	i := 0
	for i < len(s.recent) && !now.Before(s.recent[i].at.Add(window)) {
		i++
	}
	if i == 0 {
		return
	}
	clear(s.recent[:i])
	s.recent = s.recent[i:]
	if len(s.recent) == 0 {
		s.recent = nil
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
	if s.set == nil {
		return
	}
	var inSet []string
	for _, n := range s.extra.remove(names) {
		if s.set.has(n) {
			inSet = append(inSet, n)
		}
	}
	if len(inSet) > 0 {
		s.set = s.set.derive(nil, inSet)
	}
}

// keep forgets the names not in sub (a subscription's names; subSet,
// its shared set, and grewFrom, the set it grew from without removals, if
// it did). Nothing is looked at when the subscription is the one last
// kept to or grew from it, or its set is the one sent, nor when nothing
// was sent.
func (s *sentAssignments) keep(sub map[string]struct{}, subSet, grewFrom *nameSet) {
	if s.set == nil {
		s.within = subSet
		return
	}
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
}

// unbounded notes that names outside any subscription may be sent (a
// wildcard subscription): the next keep looks at every name.
func (s *sentAssignments) unbounded() { s.within = nil }

// overlay is a stream's names sent and not yet folded into its
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
