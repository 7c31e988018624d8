package store

import (
	"cmp"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"google.golang.org/protobuf/proto"
)

// Store holds the served resources of each type (see the package doc).
type Store struct {
	mu       sync.Mutex
	ready    bool
	types    map[string]*Type
	marshals uint64 // resource encodings, for the serialisations-per-version figure
	// wire: the resources as the request decoder reads them (wireindex.go).
	wire *WireIndex

	// commitWake is closed by the next commit (see Read); subs: see
	// Subscribe.
	commitWake chan struct{}
	subs       map[chan struct{}]struct{}

	observer Observer
}

// Observer follows a store's commits: a server answering its clients'
// watches. Its methods run in the goroutine of Apply or MarkReady;
// Committed and Readied with the store's lock held, one at a time: they
// may read the store's types (Store.Type, the fields of Type and Entry)
// and must not call a method of the store that locks. Applied runs after
// the lock is released, and may run beside another Apply's commits.
type Observer interface {
	// Committed tells of a commit of t: the names whose resource was
	// added, changed or removed (sorted, each once), at t.Gen. It is
	// called after MarkReady only: before, nothing is answered.
	Committed(t *Type, changed []string)
	// Readied tells that MarkReady was called (once).
	Readied()
	// Applied tells that Apply ended (its commits, if any, were told),
	// after it released the store's lock: in Apply's goroutine, before
	// Apply returns.
	Applied()
}

// New returns an empty store of the given type URLs. rank orders the
// types (Type.Order; ties by URL): Apply commits the resources its
// changes re-versioned in that order, and TypeOrder sorts by it.
func New(rank func(typeURL string) int, typeURLs ...string) *Store {
	s := &Store{types: make(map[string]*Type, len(typeURLs)), wire: NewWireIndex()}
	for _, u := range typeURLs {
		s.types[u] = newType(u, rank(u))
	}
	return s
}

func newType(u string, order int) *Type {
	return &Type{
		URL:       u,
		Order:     order,
		FullState: cache.ResourceRequiresFullStateInSotw(u),
		Resources: map[string]*Entry{},
		DeletedAt: map[string]uint64{},
		Grave:     map[string]*Entry{},
	}
}

// Observe registers o as the store's observer (one; nil: none). Call it
// before the first Apply.
func (s *Store) Observe(o Observer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.observer = o
}

// Lock holds the store's lock, so that what the caller reads of the
// types (Type) meanwhile is of one instant; Unlock releases it.
func (s *Store) Lock() { s.mu.Lock() }

// Unlock releases the lock taken by Lock.
func (s *Store) Unlock() { s.mu.Unlock() }

// Type returns the store's type of URL u (nil: not served). Its fields
// are read under the store's lock (Lock, or in an Observer's method).
// The Type of a URL is the same for the store's life.
func (s *Store) Type(u string) *Type { return s.types[u] }

// TypeURLs returns the URLs of the types served, in TypeOrder.
func (s *Store) TypeURLs() []string {
	ts := slices.SortedFunc(maps.Values(s.types), TypeOrder)
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.URL
	}
	return out
}

// TypeOrder orders types by rank (Order), then by URL (a comparison
// function for slices.SortFunc).
func TypeOrder(a, b *Type) int {
	return cmp.Or(cmp.Compare(a.Order, b.Order), strings.Compare(a.URL, b.URL))
}

// Wire returns the index the request decoder reads (wireindex.go).
func (s *Store) Wire() *WireIndex { return s.wire }

// MarkReady lets the store's observer answer clients: it tells the
// observer (Readied) once, and wakes the subscribers.
func (s *Store) MarkReady() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ready {
		return
	}
	s.ready = true
	s.notifySubs()
	if s.observer != nil {
		s.observer.Readied()
	}
}

// Ready reports whether MarkReady was called.
func (s *Store) Ready() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ready
}

// Marshals returns the number of resource encodings since start.
func (s *Store) Marshals() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.marshals
}

// Counts returns the number of resources of each type.
func (s *Store) Counts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.types))
	for u, t := range s.types {
		out[u] = len(t.Resources)
	}
	return out
}

// Get returns the current resource of a type, or nil. The message must not
// be modified.
func (s *Store) Get(typeURL, name string) proto.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ts, ok := s.types[typeURL]; ok {
		if e, ok := ts.Resources[name]; ok {
			return e.Msg
		}
	}
	return nil
}

// ResourceInfo describes one served resource.
type ResourceInfo struct {
	Name    string        `json:"name"`
	Version string        `json:"version"`
	Bytes   int           `json:"bytes"`
	Msg     proto.Message `json:"-"`
}

// List returns the resources of a type, sorted by name. The messages must
// not be modified.
func (s *Store) List(typeURL string) []ResourceInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.list(typeURL)
}

// list is List under the lock; a type not served has none.
func (s *Store) list(typeURL string) []ResourceInfo {
	ts, ok := s.types[typeURL]
	if !ok {
		return nil
	}
	out := make([]ResourceInfo, 0, len(ts.Resources))
	for _, e := range ts.Resources {
		out = append(out, ResourceInfo{Name: e.Name, Version: e.Version, Bytes: e.ByteSize, Msg: e.Msg})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
