package xds

import (
	"slices"
	"strings"
)

// A type's resource names, sorted and joined by sep, shared by the rests
// of the responses split in parts (delta.go). A fleet of Envoys syncing at
// once kept one joined copy of all but the first part's names each (the
// first response's rest is a suffix of every name of the type, and each
// later rest a suffix of it): 800 Envoys × 2 types × 60 kB held until
// their syncs ended. A rest that is a suffix of the type's names is now a
// substring of this string; the string is rebuilt only when a name is
// added or deleted, not when a version changes.
type sortedNames struct {
	joined string
	starts []int // starts[i]: the offset of the i-th name in joined
}

// allNames returns the type's names, built if a name came or went since.
func (ts *typeState) allNames() *sortedNames {
	if ts.names != nil {
		return ts.names
	}
	names := make([]string, 0, len(ts.resources))
	for n := range ts.resources {
		names = append(names, n)
	}
	slices.Sort(names)
	sn := &sortedNames{starts: make([]int, len(names))}
	at := 0
	for i, n := range names {
		sn.starts[i] = at
		at += len(n) + len(sep)
	}
	sn.joined = strings.Join(names, sep)
	ts.names = sn
	return sn
}

// suffix returns tail (sorted names) joined by sep: a substring of the
// joined names when tail is a suffix of them, else a new string.
func (sn *sortedNames) suffix(tail []string) string {
	if len(tail) == 0 {
		return ""
	}
	if i := len(sn.starts) - len(tail); i >= 0 {
		s := sn.joined[sn.starts[i]:]
		rest := s
		same := true
		for _, n := range tail {
			name, after, _ := strings.Cut(rest, sep)
			if name != n {
				same = false
				break
			}
			rest = after
		}
		if same {
			return s
		}
	}
	return strings.Join(tail, sep)
}
