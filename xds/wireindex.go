package xds

import (
	"sync"
	"unicode/utf8"
)

// wireIndex is the store's resources by type and name, as the request
// decoder reads them (decode.go), under a lock of its own: requests are
// decoded by each stream's goroutine, outside the cache's lock. The
// decoder gives a name it finds here the store's own string, and a version
// equal to the one served the entry's, instead of new copies: a
// reconnecting Envoy names its 5,000 clusters and assignments with their
// versions, and the cache then compares these strings with its own (equal
// strings at one address compare without reading them) and keeps the
// names in its subscription sets.
//
// What the decoder gives is the same either way: an index that lags the
// store by a commit only costs copies.
type wireIndex struct {
	mu    sync.RWMutex
	types map[string]map[string]*entry
}

func newWireIndex() *wireIndex {
	return &wireIndex{types: map[string]map[string]*entry{}}
}

// follow makes the index hold, of each of the names, the entry ts serves
// (none if it serves none). One lock per commit: a decoder holds the read
// lock for a request (a few milliseconds for 5,000 names), and a publish,
// which holds the cache's lock meanwhile, waits for it once.
func (x *wireIndex) follow(ts *typeState, names []string) {
	if x == nil {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	m := x.types[ts.url]
	if m == nil {
		m = make(map[string]*entry, len(ts.resources))
		x.types[ts.url] = m
	}
	for _, n := range names {
		// Only an entry whose name and version are valid UTF-8: the
		// decoder checks the bytes of a name or version it finds here no
		// further (proto3 strings must be UTF-8).
		if e, ok := ts.resources[n]; ok && utf8.ValidString(e.name) && utf8.ValidString(e.version) {
			m[e.name] = e
		} else {
			delete(m, n)
		}
	}
}

// read calls fn with the entries of typeURL (nil: none), read-locked.
// fn must not keep the map.
func (x *wireIndex) read(typeURL []byte, fn func(entries map[string]*entry)) {
	if x == nil {
		fn(nil)
		return
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	fn(x.types[string(typeURL)])
}

// wireName is name (its encoded bytes) as a string: the store's, if it
// serves the name.
func wireName(entries map[string]*entry, name []byte) (string, *entry) {
	if e, ok := entries[string(name)]; ok {
		return e.name, e
	}
	return string(name), nil
}

// wireVersion is version (its encoded bytes, a client's version of e) as
// a string: e's, if it is e's (true).
func wireVersion(e *entry, version []byte) (string, bool) {
	if e != nil && e.version == string(version) {
		return e.version, true
	}
	return string(version), false
}
