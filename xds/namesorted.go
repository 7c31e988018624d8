package xds

import (
	"slices"

	"github.com/xdsbridge/xdsbridge/xds/store"
)

// The names of a set in order.
//
// A delta pass looks at sorted names (deltarespond.go) and asks of each
// whether the stream subscribes to it. At 20,000 names the subscription's
// map no longer fits the processor's caches, and each lookup in it costs
// a cache miss or two; a walk of the set's names in order, from where the
// last name was found, costs a comparison per name. A set of an ordered
// table keeps its names sorted (sorted), made as the set is built, by a
// merge of the sorted names of the set it is derived from with the names
// added: linear in the set, as the copy of its map already is, and once
// per set, however many streams share it.

// ordered makes the sets of t keep their names sorted by cmp.
func ordered[K comparable](t *setTable[K], cmp func(a, b K) int) *setTable[K] {
	t.cmp = cmp
	t.empty.sorted = []K{}
	return t
}

// sortedAfter returns the names of s changed by d, sorted; nil if the
// table keeps no order.
func (s *sharedSet[K]) sortedAfter(d setDiff[K], size int) []K {
	cmp := s.tab.cmp
	if cmp == nil {
		return nil
	}
	old := s.sorted
	if old == nil && len(s.m) > 0 {
		old = s.keysSorted()
	}
	added := slices.SortedFunc(slices.Values(d.added), cmp)
	out := make([]K, 0, size)
	j := 0
	for _, n := range old {
		if d.key.rems > 0 {
			if _, gone := d.rem[n]; gone {
				continue
			}
		}
		for j < len(added) && cmp(added[j], n) < 0 {
			out = append(out, added[j])
			j++
		}
		out = append(out, n)
	}
	return append(out, added[j:]...)
}

// keysSorted returns the names of s, sorted (a set built without them).
func (s *sharedSet[K]) keysSorted() []K {
	out := make([]K, 0, len(s.m))
	for n := range s.m {
		out = append(out, n)
	}
	slices.SortFunc(out, s.tab.cmp)
	return out
}

// walkWorth reports whether count sorted names are asked of a set of
// size names with a nameCursor rather than in the set's map: from least
// names (minCursor; 0, a test's, walks every pass), when they are dense
// enough among the set's: as many as three in four of its names. A cursor answers
// the name after the last one asked with a comparison and any other with
// a search, the map every name with a lookup
// (BenchmarkSortedNamesInSet: 8 ns a name for neighbours, 40–120 ns for
// names 2–32 apart, 17–25 ns in the map).
func walkWorth(count, size, least int) bool {
	return least == 0 || (count >= least && 4*count >= 3*size)
}

// nameCursor tells whether names asked in order are in a set.
type nameCursor struct {
	names []string // the set's, sorted
	at    int      // names[:at] are before the last name asked
}

// newNameCursor returns a cursor over the names of s, a set of nameSets
// (which keeps them sorted).
func newNameCursor(s *nameSet) *nameCursor {
	names := s.sorted
	if names == nil && s.len() > 0 {
		names = s.keysSorted()
	}
	return &nameCursor{names: names}
}

// has reports whether n is in the set. The name after the last one asked
// costs a comparison; one k names further about 2·log2(k); one before the
// last one asked a binary search.
func (c *nameCursor) has(n string) bool {
	names := c.names
	if c.at < len(names) && names[c.at] == n {
		c.at++
		return true
	}
	if c.at > 0 && names[c.at-1] >= n {
		_, found := slices.BinarySearch(names[:c.at], n)
		return found
	}
	i, found := store.SearchFrom(names, c.at, n)
	c.at = i
	if found {
		c.at++
	}
	return found
}
