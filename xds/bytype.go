package xds

import (
	"iter"
	"unsafe"
)

// byType maps a type URL to a V: a stream's state per type. A stream has
// a few types, so a scan of their URLs (most calls pass the cache's own
// string, which compares by its address, and set stores a served type's
// URL as that string) is cheaper than hashing a URL
// of 50 to 70 bytes in a map, as every response and ACK did; past
// byTypeScan types (a client naming many types) an index map takes over.
// The zero value is empty. Not safe for concurrent use: a stream's state
// is read and written under the cache's lock.
type byType[V any] struct {
	urls []string
	vals []V
	idx  map[string]int // when len(urls) > byTypeScan
}

const byTypeScan = 8

func (m *byType[V]) find(url string) int {
	if m.idx != nil {
		if i, ok := m.idx[url]; ok {
			return i
		}
		return -1
	}
	// The cache's own string first, by its address; then by the bytes.
	p := unsafe.StringData(url)
	for i, u := range m.urls {
		if unsafe.StringData(u) == p && len(u) == len(url) {
			return i
		}
	}
	for i, u := range m.urls {
		if u == url {
			return i
		}
	}
	return -1
}

// get returns url's value and whether it has one.
func (m *byType[V]) get(url string) (V, bool) {
	if i := m.find(url); i >= 0 {
		return m.vals[i], true
	}
	var zero V
	return zero, false
}

// at returns url's value, or the zero value.
func (m *byType[V]) at(url string) V {
	v, _ := m.get(url)
	return v
}

// set makes v url's value.
func (m *byType[V]) set(url string, v V) {
	if i := m.find(url); i >= 0 {
		m.vals[i] = v
		return
	}
	m.urls = append(m.urls, servedTypeString(url))
	m.vals = append(m.vals, v)
	if m.idx != nil {
		m.idx[url] = len(m.urls) - 1
	} else if len(m.urls) > byTypeScan {
		m.reindex()
	}
}

// delete removes url's value, if any.
func (m *byType[V]) delete(url string) {
	i := m.find(url)
	if i < 0 {
		return
	}
	last := len(m.urls) - 1
	m.urls[i], m.vals[i] = m.urls[last], m.vals[last]
	var zero V
	m.urls[last], m.vals[last] = "", zero
	m.urls, m.vals = m.urls[:last], m.vals[:last]
	if m.idx != nil {
		delete(m.idx, url)
		if i < last {
			m.idx[m.urls[i]] = i
		}
		if len(m.urls) <= byTypeScan {
			m.idx = nil
		}
	}
}

// servedTypeString is url as the constant of the type it names, if the
// server serves it, else url: a URL stored as the constant is then found
// by its address by the lookups that pass the constant (an ACK's type URL,
// the cache's), though it was set from a request's own copy.
func servedTypeString(url string) string {
	for _, s := range servedTypes {
		if url == s {
			return s
		}
	}
	return url
}

func (m *byType[V]) reindex() {
	m.idx = make(map[string]int, len(m.urls))
	for i, u := range m.urls {
		m.idx[u] = i
	}
}

// len is the number of URLs with a value.
func (m *byType[V]) len() int { return len(m.urls) }

// all yields each URL and its value (in no particular order); the map
// must not change during the iteration.
func (m *byType[V]) all() iter.Seq2[string, V] {
	return func(yield func(string, V) bool) {
		for i, u := range m.urls {
			if !yield(u, m.vals[i]) {
				return
			}
		}
	}
}
