package store

import (
	"slices"
)

// A type's resource names, sorted, shared by the rests of the responses
// split in parts (the server's delta responses) and by the records of the
// names each part carried. Were they copies, a fleet of Envoys syncing at
// once would hold one of all but the first part's names each (the first
// response's rest is a suffix of every name of the type, and each later
// rest a suffix of it) and one of each part's names until the part is
// answered: 2,000 Envoys × 2 types × tens of kB through their syncs. A
// run of the names (a part of a first sync, or its rest) is a subslice of
// this one; it is rebuilt only when a name is added or deleted, not when
// a version changes, and never written.
type SortedNames struct {
	names []string
	slots []int32 // of names[i]: its resource's slot
	index []int32 // of a slot: its name's place in names
}

// AllNames returns the type's names, built if a name came or went since.
func (ts *Type) AllNames() *SortedNames {
	if ts.names != nil {
		return ts.names
	}
	names := make([]string, 0, len(ts.Resources))
	for n := range ts.Resources {
		names = append(names, n)
	}
	slices.Sort(names)
	slots := make([]int32, len(names))
	index := make([]int32, len(ts.bySlot))
	for i, n := range names {
		s := ts.Resources[n].Slot
		slots[i] = s
		if int(s) >= len(index) {
			index = append(index, make([]int32, int(s)+1-len(index))...)
		}
		index[s] = int32(i)
	}
	ts.names = &SortedNames{names: names, slots: slots, index: index}
	return ts.names
}

// Run returns names, as a subslice of the type's names when names are a
// run of them (consecutive, in order), else as a copy (names are often a
// part of a larger slice, which a record kept until the next ACK must not
// hold). A first sync's parts and rests are runs: a wildcard's, and those
// of the assignments of the clusters each part subscribes to. Names that
// are a subslice of the type's names already cost a search, not a
// comparison of each name.
func (sn *SortedNames) Run(names []string) []string {
	if i, ok := sn.runAt(names); ok {
		return sn.names[i : i+len(names) : i+len(names)]
	}
	return slices.Clone(names)
}

// Join returns the names of a, then those of b, as a subslice of the
// type's names, if a is one (as Run returns them) or empty and b the run
// of names that follows it; else nil. It costs a search and a comparison
// of each name of b, however long a is: a client's rest of a split
// response (a) and the names its request subscribes to after it (b) make
// the next rest without a copy.
func (sn *SortedNames) Join(a, b []string) []string {
	if len(a) == 0 {
		if i, ok := sn.runAt(b); ok {
			return sn.names[i : i+len(b) : i+len(b)]
		}
		return nil
	}
	i, found := slices.BinarySearch(sn.names, a[0])
	j := i + len(a)
	end := j + len(b)
	if !found || end > len(sn.names) || &sn.names[i] != &a[0] || !slices.Equal(sn.names[j:end], b) {
		return nil
	}
	return sn.names[i:end:end]
}

// runAt returns where names are a run of the type's names, if they are:
// a subslice of them costs a search, other names a comparison each.
func (sn *SortedNames) runAt(names []string) (int, bool) {
	if len(names) == 0 {
		return 0, false
	}
	i, found := slices.BinarySearch(sn.names, names[0])
	j := i + len(names)
	if !found || j > len(sn.names) {
		return i, false
	}
	return i, &sn.names[i] == &names[0] || slices.Equal(sn.names[i:j], names)
}

// All returns the type's names, sorted; they must not be modified.
func (sn *SortedNames) All() []string { return sn.names }

// Cursor finds resources by name among a type's sorted names, each
// find starting after the last name found. Names that neighbour in the
// type's order (a client subscribing to the part of the type a split
// response sent it) then cost a comparison of string headers each (the
// names the request decoder hands out are the store's strings), read in
// order; any other name costs a lookup in Resources, after which the
// cursor goes on from that name's place (SortedNames.index). A search of
// the sorted names from the last place, even one that gallops, compares
// the bytes of several names: for names a few apart it costs as much as
// the lookup, and more the further apart they are
// (BenchmarkFindSortedNames). A Cursor is valid while the store's lock is
// held (no name comes or goes).
type Cursor struct {
	ts *Type
	sn *SortedNames
	at int // the place after the last name found
}

// Cursor returns a cursor over the type's names.
func (ts *Type) Cursor() Cursor { return Cursor{ts: ts, sn: ts.AllNames()} }

// Find returns the resource named n, as Resources holds it. The name
// after the last one found costs a comparison; any other a lookup in
// Resources.
func (c *Cursor) Find(n string) (*Entry, bool) {
	names := c.sn.names
	if c.at < len(names) && names[c.at] == n {
		c.at++
		return c.entry(c.at-1, n)
	}
	e, ok := c.ts.Resources[n]
	if ok && int(e.Slot) < len(c.sn.index) {
		c.at = int(c.sn.index[e.Slot]) + 1
	}
	return e, ok
}

// SearchFrom returns where n is, or would be, in names (sorted), which
// has only names before n up to from: a search that gallops from there,
// so that a name k names further costs about 2·log2(k) comparisons.
func SearchFrom(names []string, from int, n string) (i int, found bool) {
	// names[:lo] are before n; then names[hi] is not, or hi is the end.
	lo, hi, step := from, from, 1
	for hi < len(names) && names[hi] < n {
		lo = hi + 1
		hi = lo + step - 1
		step <<= 1
	}
	i, found = slices.BinarySearch(names[lo:min(hi+1, len(names))], n)
	return lo + i, found
}

// entry returns the resource of names[i], n.
func (c *Cursor) entry(i int, n string) (*Entry, bool) {
	if s := c.sn.slots[i]; int(s) < len(c.ts.bySlot) {
		if e := c.ts.bySlot[s]; e != nil && e.Name == n {
			return e, true
		}
	}
	e, ok := c.ts.Resources[n]
	return e, ok
}
