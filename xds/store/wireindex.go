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
// addressing (linear probing) by a hash of the name, each place holding
// what a lookup reads: the hash, the key, the version, the slot and the
// entry, in one cache line.
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

	tab      []wireSlot // a power of two long, at most half full
	n        int        // entries
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

// wireSlot is a place of a type's table; e nil: empty. 64 bytes: a table
// (a power of two in size, which Go's allocator aligns to a cache line at
// least) has each place in a cache line of its own, and a decoder reads
// an entry's name, version and slot there, not in the entry (whose name
// and slot are two cache lines apart).
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
		h, i, had := t.lookup(bytesOf(n))
		if had {
			t.live -= len(t.tab[i].ver)
			t.garbage += len(t.tab[i].ver)
		}
		// Only an entry whose name and version are valid UTF-8: the
		// decoder checks the bytes of a name or version it finds here no
		// further (proto3 strings must be UTF-8).
		if e, ok := ts.Resources[n]; ok && utf8.ValidString(e.Name) && utf8.ValidString(e.Version) {
			s := &t.tab[i]
			if !had {
				*s = wireSlot{h: h, key: t.key(e.Name)}
				t.live += len(s.key)
				t.n++
			}
			s.e, s.name, s.ver, s.slot = e, e.Name, t.key(e.Version), e.Slot
			t.live += len(s.ver)
			t.SlotBound = max(t.SlotBound, e.Slot+1)
			if 2*t.n > len(t.tab) {
				t.resize(t.n)
			}
		} else if had {
			t.live -= len(n)
			t.garbage += len(n)
			t.remove(i)
		}
	}
	if t.garbage > t.live+keyChunk {
		// The keys and versions again, without the garbage.
		t.keys, t.live, t.garbage = nil, 0, 0
		for i := range t.tab {
			if s := &t.tab[i]; s.e != nil {
				s.key, s.ver = t.key(s.e.Name), t.key(s.e.Version)
				t.live += len(s.key) + len(s.ver)
			}
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
func (t *WireType) lookup(name []byte) (h uint32, i int, found bool) {
	h = t.hash(name)
	mask := len(t.tab) - 1
	for i = int(h) & mask; ; i = (i + 1) & mask {
		s := &t.tab[i]
		if s.e == nil {
			return h, i, false
		}
		if s.h == h && s.key == string(name) {
			return h, i, true
		}
	}
}

// resize makes t's table twice the size of n entries or more (a power of
// two, at least 16), with t's entries.
func (t *WireType) resize(n int) {
	size := 16
	for size < 2*n+2 {
		size *= 2
	}
	old := t.tab
	t.tab = make([]wireSlot, size)
	for _, s := range old {
		if s.e != nil {
			i := int(s.h) & (size - 1)
			for t.tab[i].e != nil {
				i = (i + 1) & (size - 1)
			}
			t.tab[i] = s
		}
	}
}

// remove empties place i, and moves back the entries after it that
// would otherwise not be found (each must sit between its hash's place
// and the first empty one after it).
func (t *WireType) remove(i int) {
	mask := len(t.tab) - 1
	t.tab[i] = wireSlot{}
	t.n--
	for j := (i + 1) & mask; t.tab[j].e != nil; j = (j + 1) & mask {
		home := int(t.tab[j].h) & mask
		// j's entry stays if its home is in (i, j], cyclically.
		if i < j && i < home && home <= j || j < i && (i < home || home <= j) {
			continue
		}
		t.tab[i], t.tab[j] = t.tab[j], wireSlot{}
		i = j
	}
}

// Find returns the entry of name (its encoded bytes), if the index holds
// one; t may be nil.
func (t *WireType) Find(name []byte) (WireEntry, bool) {
	if t == nil {
		return WireEntry{}, false
	}
	_, i, ok := t.lookup(name)
	if !ok {
		return WireEntry{}, false
	}
	s := &t.tab[i]
	return WireEntry{Entry: s.e, Version: s.ver, Slot: s.slot}, true
}

// Entry returns the entry of name n (nil: none); t may be nil.
func (t *WireType) Entry(n string) *Entry {
	if t == nil {
		return nil
	}
	if _, i, ok := t.lookup(bytesOf(n)); ok {
		return t.tab[i].e
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
		if _, i, ok := t.lookup(name); ok {
			s := &t.tab[i]
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
