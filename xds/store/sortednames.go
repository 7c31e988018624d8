package store

import (
	"slices"
)

// A type's resource names, sorted, shared by the rests of the responses
// split in parts (the server's delta responses). A fleet of Envoys syncing at once kept one
// copy of all but the first part's names each (the first response's rest
// is a suffix of every name of the type, and each later rest a suffix of
// it): 800 Envoys × 2 types × 60 kB held until their syncs ended. A rest
// that is a suffix of the type's names is a subslice of this one; it is
// rebuilt only when a name is added or deleted, not when a version
// changes, and never written.
type SortedNames struct {
	names []string
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
	ts.names = &SortedNames{names: names}
	return ts.names
}

// Suffix returns tail (sorted names): a subslice of the type's names when
// tail is a Suffix of them, else a copy (tail is often the end of a
// larger slice, which a rest kept until the next ACK must not hold).
func (sn *SortedNames) Suffix(tail []string) []string {
	if i := len(sn.names) - len(tail); len(tail) > 0 && i >= 0 && slices.Equal(sn.names[i:], tail) {
		return sn.names[i:len(sn.names):len(sn.names)]
	}
	return slices.Clone(tail)
}

// All returns the type's names, sorted; they must not be modified.
func (sn *SortedNames) All() []string { return sn.names }
