package store

import (
	"sync"
	"unicode/utf8"
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
	Entries map[string]*Entry
	// Gen: the type's generation the entries are of (Type.Gen once the
	// commit that last changed them is done). Every change to a type's
	// resources is followed by the index in its commit, so a reader that
	// finds the type at Gen under the store's lock finds these entries.
	Gen uint64
	// SlotBound: every entry's Slot is below it.
	SlotBound int32
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
		t = &WireType{Type: ts, Entries: make(map[string]*Entry, len(ts.Resources))}
		x.types[ts.URL] = t
	}
	t.Gen = ts.Gen
	for _, n := range names {
		// Only an entry whose name and version are valid UTF-8: the
		// decoder checks the bytes of a name or version it finds here no
		// further (proto3 strings must be UTF-8).
		if e, ok := ts.Resources[n]; ok && utf8.ValidString(e.Name) && utf8.ValidString(e.Version) {
			t.Entries[e.Name] = e
			t.SlotBound = max(t.SlotBound, e.Slot+1)
		} else {
			delete(t.Entries, n)
		}
	}
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

// WireName is name (its encoded bytes) as a string: the store's, if it
// serves the name (t nil: none).
func (t *WireType) WireName(name []byte) (string, *Entry) {
	if t != nil {
		if e, ok := t.Entries[string(name)]; ok {
			return e.Name, e
		}
	}
	return string(name), nil
}

// WireVersion is version (its encoded bytes, a client's version of e) as
// a string: e's, if it is e's (true).
func WireVersion(e *Entry, version []byte) (string, bool) {
	if e != nil && e.Version == string(version) {
		return e.Version, true
	}
	return string(version), false
}
