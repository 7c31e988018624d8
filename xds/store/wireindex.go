package store

import (
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
}

// WireType is one type's entries as the index holds them.
type WireType struct {
	// Type: the store's type (its fields are read under the store's lock
	// only).
	Type    *Type
	entries map[string]WireEntry
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
	key     string // the map's key: a copy of Entry.Name
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
	return &WireIndex{types: map[string]*WireType{}}
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
		t = &WireType{Type: ts, entries: make(map[string]WireEntry, len(ts.Resources))}
		x.types[ts.URL] = t
	}
	t.Gen = ts.Gen
	for _, n := range names {
		old, had := t.entries[n]
		if had {
			t.live -= len(old.Version)
			t.garbage += len(old.Version)
		}
		// Only an entry whose name and version are valid UTF-8: the
		// decoder checks the bytes of a name or version it finds here no
		// further (proto3 strings must be UTF-8).
		if e, ok := ts.Resources[n]; ok && utf8.ValidString(e.Name) && utf8.ValidString(e.Version) {
			k := old.key
			if !had {
				k = t.key(e.Name)
				t.live += len(k)
			}
			t.entries[k] = t.entry(e, k)
			t.SlotBound = max(t.SlotBound, e.Slot+1)
		} else if had {
			delete(t.entries, n)
			t.live -= len(n)
			t.garbage += len(n)
		}
	}
	if t.garbage > t.live+keyChunk {
		// The keys and versions again, without the garbage.
		entries := make(map[string]WireEntry, len(t.entries))
		t.keys, t.live, t.garbage = nil, 0, 0
		for _, w := range t.entries {
			k := t.key(w.Entry.Name)
			t.live += len(k)
			entries[k] = t.entry(w.Entry, k)
		}
		t.entries = entries
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
	w, ok := t.entries[string(name)]
	return w, ok
}

// Entry returns the entry of name n (nil: none); t may be nil.
func (t *WireType) Entry(n string) *Entry {
	if t == nil {
		return nil
	}
	return t.entries[n].Entry
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
		if w, ok := t.entries[string(name)]; ok {
			return w.Name, w
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
