package store

import (
	"hash/maphash"
	"unsafe"
)

// wireTable is a type's entries in the wire index, side by side (ents),
// and a table of open addressing (linear probing) of 8-byte places that
// finds them by a hash of the name: the high 32 bits of the hash (its
// tag) and the entry's index + 1, 0 for a free place. The table is a
// power of two long, at most half full: 5,000 names take 128 kB.
//
// A reconnecting Envoy names 5,000 resources in the order of its own map,
// so that each lookup's place, entry and key are cache misses; looked up
// one at a time, the misses are waited for one after another. FindBatch
// looks up to WireBatch names at once, a step at a time for all of them
// (hash, place, entry, key), so that the loads of a step, independent of
// each other, are in flight together.
type wireTable struct {
	seed     maphash.Seed
	hashMask uint64
	places   []uint64
	ents     []WireEntry
}

// WireBatch is how many names FindBatch looks up at once (a caller
// gives it a multiple, or all it has).
const WireBatch = 16

// hash is the hash of name in the table.
func (t *wireTable) hash(name string) uint64 {
	return maphash.String(t.seed, name) & t.hashMask
}

// probe returns the index in ents of name (of hash h), and its place; or
// -1 and the free place that ends its probe.
func (t *wireTable) probe(name string, h uint64) (int32, uint64) {
	mask := uint64(len(t.places) - 1)
	for p := h & mask; ; p = (p + 1) & mask {
		s := t.places[p]
		if s == 0 {
			return -1, p
		}
		if s>>32 == h>>32 && t.ents[uint32(s)-1].key == name {
			return int32(uint32(s) - 1), p
		}
	}
}

// insert appends w, whose key is not in the table and hashes to h.
func (t *wireTable) insert(w WireEntry, h uint64) {
	if 2*(len(t.ents)+1) > len(t.places) {
		t.resize(len(t.ents) + 1)
	}
	t.ents = append(t.ents, w)
	_, p := t.probe(w.key, h)
	t.places[p] = h>>32<<32 | uint64(len(t.ents))
}

// resize makes the table at least twice n long, and places ents in it.
func (t *wireTable) resize(n int) {
	size := 16
	for size < 2*n {
		size *= 2
	}
	if size == len(t.places) {
		return
	}
	t.places = make([]uint64, size)
	mask := uint64(size - 1)
	for i, w := range t.ents {
		h := t.hash(w.key)
		p := h & mask
		for t.places[p] != 0 {
			p = (p + 1) & mask
		}
		t.places[p] = h>>32<<32 | uint64(i+1)
	}
}

// remove takes the entry at index i, at place p, out: the entries after
// p in its run move back (so that no probe stops early at p), and the
// last entry moves to index i.
func (t *wireTable) remove(i int32, p uint64) {
	mask := uint64(len(t.places) - 1)
	for q := (p + 1) & mask; t.places[q] != 0; q = (q + 1) & mask {
		// The entry at q stays unless its probe, from its hash's place
		// on, passes p before reaching q.
		s := t.places[q]
		home := t.hash(t.ents[uint32(s)-1].key) & mask
		if (q-home)&mask >= (q-p)&mask {
			t.places[p] = s
			p = q
		}
	}
	t.places[p] = 0
	last := int32(len(t.ents) - 1)
	if i != last {
		w := t.ents[last]
		h := t.hash(w.key)
		for q := h & mask; ; q = (q + 1) & mask {
			if uint32(t.places[q]) == uint32(last+1) {
				t.places[q] = h>>32<<32 | uint64(i+1)
				break
			}
		}
		t.ents[i] = w
	}
	t.ents[last] = WireEntry{}
	t.ents = t.ents[:last]
}

// FindBatch looks each of names up as Find does, and sets idx[i] to the
// index of names[i]'s entry (At), or -1 if the index holds none; t may be
// nil. idx is at least as long as names.
func (t *WireType) FindBatch(names [][]byte, idx []int32) {
	if t == nil || len(t.ents) == 0 {
		for i := range names {
			idx[i] = -1
		}
		return
	}
	for len(names) > 0 {
		n := min(len(names), WireBatch)
		t.findBatch(names[:n], idx[:n])
		names, idx = names[n:], idx[n:]
	}
}

// findBatch is FindBatch of at most WireBatch names.
func (t *WireType) findBatch(names [][]byte, idx []int32) {
	var hs, ps [WireBatch]uint64
	var keys [WireBatch]string
	var cand, near [WireBatch]bool
	names = names[:min(len(names), WireBatch)]
	idx = idx[:len(names)]
	places, ents := t.places, t.ents
	mask := uint64(len(places) - 1)
	for i, b := range names {
		hs[i] = t.hash(unsafe.String(unsafe.SliceData(b), len(b)))
	}
	for i := range names {
		ps[i] = places[hs[i]&mask]
	}
	// The first place of each probe whose tag is the name's (0: none),
	// read from the places loaded (the next ones are mostly in the same
	// cache line).
	for i := range names {
		tag, p := hs[i]>>32, hs[i]&mask
		s := ps[i]
		for s != 0 && s>>32 != tag {
			p = (p + 1) & mask
			s = places[p]
		}
		ps[i] = s
	}
	for i := range names {
		if s := ps[i]; s != 0 {
			keys[i], cand[i] = ents[uint32(s)-1].key, true
		}
	}
	// The keys' last bytes (the key's cache line, and often its
	// version's).
	for i, b := range names {
		k := keys[i]
		near[i] = cand[i] && len(k) == len(b) && (len(k) == 0 || k[len(k)-1] == b[len(b)-1])
	}
	for i, b := range names {
		if near[i] && keys[i] == string(b) {
			idx[i] = int32(uint32(ps[i]) - 1)
			continue
		}
		if ps[i] == 0 {
			idx[i] = -1
			continue
		}
		idx[i], _ = t.probe(unsafe.String(unsafe.SliceData(b), len(b)), hs[i])
	}
}

// At is the entry at index i (FindBatch's).
func (t *WireType) At(i int32) WireEntry { return t.ents[i] }
