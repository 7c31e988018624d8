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
// What the decoder gives is the same either way: an index that lags the
// store by a commit only costs copies.
type WireIndex struct {
	mu    sync.RWMutex
	types map[string]map[string]*Entry
}

func NewWireIndex() *WireIndex {
	return &WireIndex{types: map[string]map[string]*Entry{}}
}

// Follow makes the index hold, of each of the names, the entry ts serves
// (none if it serves none). One lock per commit: a decoder holds the read
// lock for a request (a few milliseconds for 5,000 names), and a publish,
// which holds the store's lock meanwhile, waits for it once.
func (x *WireIndex) Follow(ts *Type, names []string) {
	if x == nil {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	m := x.types[ts.URL]
	if m == nil {
		m = make(map[string]*Entry, len(ts.Resources))
		x.types[ts.URL] = m
	}
	for _, n := range names {
		// Only an entry whose name and version are valid UTF-8: the
		// decoder checks the bytes of a name or version it finds here no
		// further (proto3 strings must be UTF-8).
		if e, ok := ts.Resources[n]; ok && utf8.ValidString(e.Name) && utf8.ValidString(e.Version) {
			m[e.Name] = e
		} else {
			delete(m, n)
		}
	}
}

// Read calls fn with the entries of typeURL (nil: none), Read-locked.
// fn must not keep the map.
func (x *WireIndex) Read(typeURL []byte, fn func(entries map[string]*Entry)) {
	if x == nil {
		fn(nil)
		return
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	fn(x.types[string(typeURL)])
}

// WireName is name (its encoded bytes) as a string: the store's, if it
// serves the name.
func WireName(entries map[string]*Entry, name []byte) (string, *Entry) {
	if e, ok := entries[string(name)]; ok {
		return e.Name, e
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
