package xds

import (
	"math/bits"
	"sync"
)

// repeatTables holds the tables of repeated, for reuse: a reconnecting
// Envoy's first request subscribes to 5,000 names, and a storm brings a
// thousand of them within two seconds.
var repeatTables = sync.Pool{New: func() any { return new([]uint64) }}

// repeated reports whether a value occurs twice in hs, hashes (their low
// bits spread). Each value goes into a table of open addressing at least
// twice as large as hs: one pass, a probe or two per value, where sorting
// a copy took log2(len(hs)) passes over it.
func repeated(hs []uint64) bool {
	if len(hs) < 2 {
		return false
	}
	size := 1 << bits.Len(uint(2*len(hs)-1))
	tp := repeatTables.Get().(*[]uint64)
	defer repeatTables.Put(tp)
	if cap(*tp) < size {
		*tp = make([]uint64, size)
	}
	tab := (*tp)[:size]
	clear(tab)
	mask := uint64(size - 1)
	zero := false // 0 marks a free place: a value 0 is noted here
	for _, h := range hs {
		if h == 0 {
			if zero {
				return true
			}
			zero = true
			continue
		}
		for i := h & mask; ; i = (i + 1) & mask {
			if tab[i] == 0 {
				tab[i] = h
				break
			}
			if tab[i] == h {
				return true
			}
		}
	}
	return false
}
