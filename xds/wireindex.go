package xds

import "sync"

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

// put makes e the entry served under its name.
func (x *wireIndex) put(typeURL string, e *entry) {
	if x == nil {
		return
	}
	x.mu.Lock()
	m := x.types[typeURL]
	if m == nil {
		m = map[string]*entry{}
		x.types[typeURL] = m
	}
	m[e.name] = e
	x.mu.Unlock()
}

// remove forgets the entry served under name.
func (x *wireIndex) remove(typeURL, name string) {
	if x == nil {
		return
	}
	x.mu.Lock()
	delete(x.types[typeURL], name)
	x.mu.Unlock()
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
// a string: e's, if it is e's.
func wireVersion(e *entry, version []byte) string {
	if e != nil && e.version == string(version) {
		return e.version
	}
	return string(version)
}
