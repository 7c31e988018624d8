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
	// hashMask: the bits of a name's hash the index uses; all but in a
	// test of names whose hashes collide.
	hashMask uint64
}

// WireType is one type's entries as the index holds them: side by side
// (ents), found by a table of open addressing (wiretable.go).
type WireType struct {
	// Type: the store's type (its fields are read under the store's lock
	// only).
	Type *Type
	wireTable
	// Gen: the type's generation the entries are of (Type.Gen once the
	// commit that last changed them is done). Every change to a type's
	// resources is followed by the index in its commit, so a reader that
	// finds the type at Gen under the store's lock finds these entries.
	Gen uint64
	// SlotBound: every entry's Slot is below it.
	SlotBound int32

	// The keys are copies of the names, side by side in chunks of their
	// own (keys), with copies of the versions: a lookup compares the bytes
	// of the key it finds, and a decoder the client's version, and 5,000
	// names and versions scattered over the heap cost cache misses, where
	// copies together stay in the cache. A name deleted or a version
	// replaced leaves its bytes (garbage) until they are copied again.
	keys          []byte
	live, garbage int
}

// WireEntry is an entry as the index holds it: the store's entry, and
// beside its key a copy of its version, its name and its slot, which a
// decoder reads without reading the entry (whose name and slot are two
// cache lines apart).
type WireEntry struct {
	Entry   *Entry
	Version string // a copy of Entry.Version, with the keys
	Name    string // Entry.Name
	Slot    int32
	key     string // the table's key: a copy of Entry.Name
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
	return &WireIndex{types: map[string]*WireType{}, seed: maphash.MakeSeed(), hashMask: ^uint64(0)}
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
		t = &WireType{Type: ts, wireTable: wireTable{seed: x.seed, hashMask: x.hashMask}}
		t.resize(len(ts.Resources))
		x.types[ts.URL] = t
	}
	t.Gen = ts.Gen
	for _, n := range names {
		h := t.hash(n)
		i, p := t.probe(n, h)
		had := i >= 0
		var old WireEntry
		if had {
			old = t.ents[i]
			t.live -= len(old.Version)
			t.garbage += len(old.Version)
		}
		// Only an entry whose name and version are valid UTF-8: the
		// decoder checks the bytes of a name or version it finds here no
		// further (proto3 strings must be UTF-8).
		if e, ok := ts.Resources[n]; ok && utf8.ValidString(e.Name) && utf8.ValidString(e.Version) {
			if had {
				t.ents[i] = t.entry(e, old.key)
			} else {
				k := t.key(e.Name)
				t.live += len(k)
				t.insert(t.entry(e, k), h)
			}
			t.SlotBound = max(t.SlotBound, e.Slot+1)
		} else if had {
			t.remove(i, p)
			t.live -= len(n)
			t.garbage += len(n)
		}
	}
	if t.garbage > t.live+keyChunk {
		// The keys and versions again, without the garbage.
		ents := t.ents
		t.keys, t.live, t.garbage = nil, 0, 0
		t.ents, t.places = make([]WireEntry, 0, cap(ents)), nil
		t.resize(len(ents))
		for _, w := range ents {
			k := t.key(w.Entry.Name)
			t.live += len(k)
			t.insert(t.entry(w.Entry, k), t.hash(k))
		}
	}
}

// entry is e's WireEntry under key k, its version copied.
func (t *WireType) entry(e *Entry, k string) WireEntry {
	t.live += len(e.Version)
	return WireEntry{Entry: e, Version: t.key(e.Version), Name: e.Name, Slot: e.Slot, key: k}
}

// Find returns the entry of name (its encoded bytes), if the index holds
// one; t may be nil.
func (t *WireType) Find(name []byte) (WireEntry, bool) {
	if t == nil {
		return WireEntry{}, false
	}
	n := unsafe.String(unsafe.SliceData(name), len(name)) // not kept
	if i, _ := t.probe(n, t.hash(n)); i >= 0 {
		return t.ents[i], true
	}
	return WireEntry{}, false
}

// Entry returns the entry of name n (nil: none); t may be nil.
func (t *WireType) Entry(n string) *Entry {
	if t == nil {
		return nil
	}
	if i, _ := t.probe(n, t.hash(n)); i >= 0 {
		return t.ents[i].Entry
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
	if w, ok := t.Find(name); ok {
		return w.Name, w
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
