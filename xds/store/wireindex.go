package store

import (
	"hash/maphash"
	"strings"
	"sync"
	"unicode/utf8"
	"unsafe"
)

// WireIndex is the store's resources by type and name, as the request
// decoder reads them (the server's decode.go), under a lock of its own: requests are
// decoded by each stream's goroutine, outside the store's lock. The
// decoder gives a name it finds here the store's own string, and a version
// equal to the one served the entry's, instead of new copies: a
// reconnecting Envoy names its 5,000 clusters and assignments with their
// versions, and the server then compares these strings with its own (equal
// strings at one address compare without reading them) and keeps the
// names in its subscription sets.
//
// The index also holds the type's generation, so that the decoder can
// compare a reconnecting client's versions with the served ones while it
// reads them, and tell the server as of which generation (the server
// compares again if the store moved since).
type WireIndex struct {
	mu    sync.RWMutex
	types map[string]*WireType
	seed  maphash.Seed
	// hashBits: the bits of a name's hash the index uses; all but in a
	// test of names whose hashes collide.
	hashBits uint64
}

// WireType is one type's entries as the index holds them: a table of open
// addressing (linear probing) by a hash of the name, each place 8 bytes
// (the hash, the entry's index), and the entries side by side, each
// holding what a lookup reads (the key, the version, the slot, the name
// and the entry) in one cache line. The table of 5,000 entries (128 kB)
// stays in the cache; a lookup reads one entry, and the bytes of its key
// and version.
type WireType struct {
	// Type: the store's type (its fields are read under the store's lock
	// only).
	Type *Type
	// Gen: the type's generation the entries are of (Type.Gen once the
	// commit that last changed them is done). Every change to a type's
	// resources is followed by the index in its commit, so a reader that
	// finds the type at Gen under the store's lock finds these entries.
	Gen uint64
	// SlotBound: every entry's Slot is below it.
	SlotBound int32

	places   []wirePlace // a power of two long, at most half full
	ents     []wireSlot
	seed     maphash.Seed
	hashBits uint64

	// The keys are copies of the names, side by side in chunks of their
	// own (keys), with copies of the versions: a lookup compares the bytes
	// of the key it finds, and a decoder the client's version, and 5,000
	// names and versions scattered over the heap cost cache misses, where
	// copies together stay in the cache. A name deleted or a version
	// replaced leaves its bytes (garbage) until they are copied again.
	keys          []byte
	live, garbage int
}

// wirePlace is a place of a type's table: an entry's hash, and its index
// in ents plus one (0: empty).
type wirePlace struct {
	h uint32
	e int32
}

// wireSlot is an entry of a type. 64 bytes, so that most are in one cache
// line; a decoder reads an entry's name, version and slot here, not in
// the entry (whose name and slot are two cache lines apart).
type wireSlot struct {
	h    uint32 // the hash of key, its low 32 bits
	slot int32
	key  string // a copy of e.Name
	ver  string // a copy of e.Version
	name string // e.Name
	e    *Entry
}

// A wireSlot is 64 bytes, no more, no less.
var (
	_ [64 - unsafe.Sizeof(wireSlot{})]byte
	_ [unsafe.Sizeof(wireSlot{}) - 64]byte
)

// WireEntry is an entry as the index holds it: the store's entry, and
// a copy of its version and its slot, which a decoder reads without
// reading the entry.
type WireEntry struct {
	Entry   *Entry
	Version string // a copy of Entry.Version, with the keys
	Slot    int32
}

// keyChunk is the size of a chunk of keys.
const keyChunk = 32 << 10

// key returns a copy of n in t's chunks.
func (t *WireType) key(n string) string {
	if len(n) > keyChunk/4 {
		return strings.Clone(n)
	}
	if cap(t.keys)-len(t.keys) < len(n) {
		t.keys = make([]byte, 0, keyChunk)
	}
	t.keys = append(t.keys, n...)
	b := t.keys[len(t.keys)-len(n):]
	return unsafe.String(unsafe.SliceData(b), len(b))
}

func NewWireIndex() *WireIndex {
	return &WireIndex{types: map[string]*WireType{}, seed: maphash.MakeSeed(), hashBits: ^uint64(0)}
}

// Follow makes the index hold, of each of the names, the entry ts serves
// (none if it serves none), as of ts.Gen. One lock per commit: a decoder
// holds the read lock for a request (a few milliseconds for 5,000 names),
// and a publish, which holds the store's lock meanwhile, waits for it once.
func (x *WireIndex) Follow(ts *Type, names []string) {
	if x == nil {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	t := x.types[ts.URL]
	if t == nil {
		t = &WireType{Type: ts, seed: x.seed, hashBits: x.hashBits}
		t.resize(len(ts.Resources))
		x.types[ts.URL] = t
	}
	t.Gen = ts.Gen
	for _, n := range names {
		h, p, had := t.lookup(bytesOf(n))
		if had {
			t.live -= len(t.at(p).ver)
			t.garbage += len(t.at(p).ver)
		}
		// Only an entry whose name and version are valid UTF-8: the
		// decoder checks the bytes of a name or version it finds here no
		// further (proto3 strings must be UTF-8).
		if e, ok := ts.Resources[n]; ok && utf8.ValidString(e.Name) && utf8.ValidString(e.Version) {
			if !had {
				t.ents = append(t.ents, wireSlot{h: h, key: t.key(e.Name)})
				t.places[p] = wirePlace{h: h, e: int32(len(t.ents))}
				t.live += len(e.Name)
			}
			s := t.at(p)
			s.e, s.name, s.ver, s.slot = e, e.Name, t.key(e.Version), e.Slot
			t.live += len(s.ver)
			t.SlotBound = max(t.SlotBound, e.Slot+1)
			if 2*len(t.ents) > len(t.places) {
				t.resize(len(t.ents))
			}
		} else if had {
			t.live -= len(n)
			t.garbage += len(n)
			t.remove(p)
		}
	}
	if t.garbage > t.live+keyChunk {
		// The keys and versions again, without the garbage.
		t.keys, t.live, t.garbage = nil, 0, 0
		for i := range t.ents {
			s := &t.ents[i]
			s.key, s.ver = t.key(s.e.Name), t.key(s.e.Version)
			t.live += len(s.key) + len(s.ver)
		}
	}
}

// bytesOf is s's bytes, not to be modified.
func bytesOf(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// hash is the hash of a name in t.
func (t *WireType) hash(name []byte) uint32 {
	return uint32(maphash.Bytes(t.seed, name) & t.hashBits)
}

// lookup returns name's hash and place in t: its entry's (true), else the
// empty place where it would go.
func (t *WireType) lookup(name []byte) (h uint32, p int, found bool) {
	h = t.hash(name)
	mask := len(t.places) - 1
	for p = int(h) & mask; ; p = (p + 1) & mask {
		pl := t.places[p]
		if pl.e == 0 {
			return h, p, false
		}
		if pl.h == h && t.ents[pl.e-1].key == string(name) {
			return h, p, true
		}
	}
}

// at is the entry of place p.
func (t *WireType) at(p int) *wireSlot { return &t.ents[t.places[p].e-1] }

// resize makes t's table twice the size of n entries or more (a power of
// two, at least 16), with t's entries.
func (t *WireType) resize(n int) {
	size := 16
	for size < 2*n+2 {
		size *= 2
	}
	t.places = make([]wirePlace, size)
	for i, s := range t.ents {
		p := int(s.h) & (size - 1)
		for t.places[p].e != 0 {
			p = (p + 1) & (size - 1)
		}
		t.places[p] = wirePlace{h: s.h, e: int32(i + 1)}
	}
}

// remove takes out the entry of place p: it empties the place, and moves
// back the places after it that would otherwise not be found (each must
// sit between its hash's place and the first empty one after it); the
// last entry takes the entry's index.
func (t *WireType) remove(p int) {
	mask := len(t.places) - 1
	i := t.places[p].e - 1
	t.places[p] = wirePlace{}
	for j := (p + 1) & mask; t.places[j].e != 0; j = (j + 1) & mask {
		home := int(t.places[j].h) & mask
		// j's entry stays if its home is in (p, j], cyclically.
		if p < j && p < home && home <= j || j < p && (p < home || home <= j) {
			continue
		}
		t.places[p], t.places[j] = t.places[j], wirePlace{}
		p = j
	}
	last := int32(len(t.ents))
	if i+1 != last {
		moved := t.ents[last-1]
		t.ents[i] = moved
		for q := int(moved.h) & mask; ; q = (q + 1) & mask {
			if t.places[q].e == last {
				t.places[q].e = i + 1
				break
			}
		}
	}
	t.ents[last-1] = wireSlot{}
	t.ents = t.ents[:last-1]
}

// Find returns the entry of name (its encoded bytes), if the index holds
// one; t may be nil.
func (t *WireType) Find(name []byte) (WireEntry, bool) {
	if t == nil {
		return WireEntry{}, false
	}
	_, p, ok := t.lookup(name)
	if !ok {
		return WireEntry{}, false
	}
	s := t.at(p)
	return WireEntry{Entry: s.e, Version: s.ver, Slot: s.slot}, true
}

// Entry returns the entry of name n (nil: none); t may be nil.
func (t *WireType) Entry(n string) *Entry {
	if t == nil {
		return nil
	}
	if _, p, ok := t.lookup(bytesOf(n)); ok {
		return t.at(p).e
	}
	return nil
}

// Read calls fn with the index of typeURL (nil: none), Read-locked.
// fn must not keep it.
func (x *WireIndex) Read(typeURL []byte, fn func(t *WireType)) {
	if x == nil {
		fn(nil)
		return
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	fn(x.types[string(typeURL)])
}

// WireName is name (its encoded bytes) as a string, the store's if it
// serves the name, with its entry (none: a zero WireEntry; t nil: none).
func (t *WireType) WireName(name []byte) (string, WireEntry) {
	if t != nil {
		if _, p, ok := t.lookup(name); ok {
			s := t.at(p)
			return s.name, WireEntry{Entry: s.e, Version: s.ver, Slot: s.slot}
		}
	}
	return string(name), WireEntry{}
}

// WireVersion is version (its encoded bytes, a client's version of e) as
// a string: e's, if it is e's (true).
func WireVersion(e *Entry, version []byte) (string, bool) {
	if e != nil && e.Version == string(version) {
		return e.Version, true
	}
	return string(version), false
}
