package xds

import (
	"hash/maphash"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"weak"
)

// Shared, immutable sets of resource names.
//
// 800 Envoys subscribed to the assignments of 5,000 clusters hold 800
// copies of the same 5,000-name set: go-control-plane's delta server keeps
// a map per stream and type (~250 kB, plus the names' strings kept from the
// request), and the cache's record of the assignments sent on each stream
// (routehold.go) another. A nameSet is never changed once made: a stream
// whose subscription changes derives a new set (derive), and equal sets are
// one set. Two ways find an equal set without building it: a set remembers
// what was derived from it (the next step of the same path: every Envoy
// subscribes to the same names, and is sent its first assignments in the
// same sorted parts), and a process-wide table indexes every live set by
// its size and the sum of its names' hashes (different paths to the same
// set). Both hold their sets weakly: a set nothing else holds is collected,
// and its entries go with it.

// sharedSet is an immutable set. Read m, never write it.
type sharedSet[K comparable] struct {
	m   map[K]struct{}
	h   uint64 // sum of the table's hash over m
	tab *setTable[K]
	// sorted: the names of m in order, if the table keeps it (namesorted.go).
	sorted []K

	mu   sync.Mutex
	memo map[deriveKey]weak.Pointer[sharedSet[K]]
	// calls: derivations from s by their arguments (callKey); a call
	// with the same arguments, in the same order, has the same result.
	calls map[callKey]*call[K]
	// parents: the sets whose calls name s, which forget them when s is
	// collected (recalledBy).
	parents struct {
		mu sync.Mutex
		m  map[weak.Pointer[sharedSet[K]]]runtime.Cleanup
	}
}

// callKey identifies the arguments of a derivation: a hash of the names
// added and removed, in order, and their counts.
type callKey struct {
	h          uint64
	adds, rems int
}

// call is a derivation remembered by its arguments (copies) and result.
type call[K comparable] struct {
	add, remove []K
	result      weak.Pointer[sharedSet[K]]
}

// nameSet is a set of resource names; hashSet one of name hashes (the
// guard's accounting, guard.go).
type (
	nameSet = sharedSet[string]
	hashSet = sharedSet[uint64]
)

// setTable indexes the live sets of a key type.
type setTable[K comparable] struct {
	hash  func(K) uint64
	cmp   func(a, b K) int // nil: the sets keep no order (ordered)
	empty *sharedSet[K]    // the root of every derivation

	mu sync.Mutex
	m  map[setKey][]weak.Pointer[sharedSet[K]]

	built atomic.Int64 // entries of the sets built so far (tests)
}

func newSetTable[K comparable](hash func(K) uint64) *setTable[K] {
	t := &setTable[K]{hash: hash, m: map[setKey][]weak.Pointer[sharedSet[K]]{}}
	t.empty = &sharedSet[K]{m: map[K]struct{}{}, tab: t}
	return t
}

// deriveKey identifies a derivation from a set: the names it adds (not in
// the set) and removes (in the set), by count and sum of hashes. A derived
// set found under the key is checked to hold every name added and none
// removed, which with the counts proves it is the one (see derive).
type deriveKey struct {
	addHash, remHash uint64
	adds, rems       int
}

type setKey struct {
	h uint64
	n int
}

var (
	nameSeed = maphash.MakeSeed()
	nameSets = ordered(newSetTable(func(n string) uint64 { return maphash.String(nameSeed, n) }), strings.Compare)
	// hashSets: the keys are maphash values already.
	hashSets = newSetTable(func(h uint64) uint64 { return h })
	// emptyNames is the empty set of names.
	emptyNames = nameSets.empty
	// sotwNames is the empty set the sets of sotw subscriptions derive
	// from, each from a request's list (sotwSub.set): the same sets as the
	// delta streams' (one table), but derivations remembered apart, so
	// that the lists of many sotw clients do not push the delta streams'
	// first steps out of emptyNames's memo (maxMemo).
	sotwNames = &nameSet{m: map[string]struct{}{}, tab: nameSets.empty.tab}
	// sotwSentNames is the empty set the records of the assignments sent
	// on sotw streams fold from (sentAssignments.add): apart from
	// sotwNames, so that their folds do not push the subscriptions' lists
	// out of its memo (the lists' shared copies, sotwSub.listed).
	sotwSentNames = &nameSet{m: map[string]struct{}{}, tab: nameSets.empty.tab}
)

// maxMemo bounds the derivations a set remembers.
const maxMemo = 16

func (s *sharedSet[K]) has(n K) bool {
	_, ok := s.m[n]
	return ok
}

func (s *sharedSet[K]) len() int { return len(s.m) }

// derive returns the set s ∪ add − remove (the removals applied after the
// additions, as a delta request's unsubscriptions after its
// subscriptions): s itself if that changes nothing, else a shared equal
// set if one is alive, else a new one.
//
// A fleet of clients takes the same steps (an Envoy subscribes to its
// assignments a CDS part at a time, each part the same names in the same
// order): the derivation is first looked up by its arguments, which are
// compared name by name in order, without a lookup in any set (at 20,000
// names a set's map no longer fits the processor's caches, and a lookup
// in it costs a cache miss or two).
func (s *sharedSet[K]) derive(add, remove []K) *sharedSet[K] {
	ck := s.callKey(add, remove)
	if c := s.called(ck, add, remove); c != nil {
		return c
	}
	d := s.diff(add, remove)
	k := d.key
	if k.adds+k.rems == 0 {
		s.recall(ck, add, remove, s)
		return s
	}
	size := len(s.m) + k.adds - k.rems
	// A set derived from s before the same way: it holds every name added
	// and none removed, and its size is s's plus the additions minus the
	// removals. The names it added to s are then exactly these (they are
	// not in s, and these, none in s, are among them and as many), and so
	// are those it removed: it is s ∪ added − removed.
	//
	// s.mu is held until the derived set is remembered: streams deriving
	// from s at once (a fleet reconnecting) wait for the first to build
	// the set, instead of each building its own. (Lock order: s.mu, then
	// the table's.)
	s.mu.Lock()
	defer s.mu.Unlock()
	if wp, ok := s.memo[k]; ok {
		if c := wp.Value(); c != nil && len(c.m) == size && holdsAll(c, d.added) && holdsNone(c, d.removed) {
			return c
		}
	}
	h := s.h + k.addHash - k.remHash
	key := setKey{h, size}
	c := s.equalSet(key, d)
	if c == nil {
		c = s.build(key, d)
	}
	s.remember(k, c)
	s.recallLocked(ck, add, remove, c)
	return c
}

// callKey returns the key of a derivation's arguments: their hashes,
// each folded with its position.
func (s *sharedSet[K]) callKey(add, remove []K) callKey {
	hash := s.tab.hash
	var h uint64
	for _, n := range add {
		h = (h^hash(n))*prime64 + 1
	}
	for _, n := range remove {
		h = (h^hash(n))*prime64 + 2
	}
	return callKey{h: h, adds: len(add), rems: len(remove)}
}

// prime64 is FNV-1's 64-bit prime.
const prime64 = 1099511628211

// called returns the set a derivation from s with exactly these arguments
// gave, if it is alive; nil if none is known.
func (s *sharedSet[K]) called(k callKey, add, remove []K) *sharedSet[K] {
	s.mu.Lock()
	cl := s.calls[k]
	s.mu.Unlock()
	if cl == nil || !slices.Equal(cl.add, add) || !slices.Equal(cl.remove, remove) {
		return nil
	}
	return cl.result.Value()
}

// recall records that the derivation from s with these arguments gave c.
func (s *sharedSet[K]) recall(k callKey, add, remove []K, c *sharedSet[K]) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recallLocked(k, add, remove, c)
}

// recallLocked is recall with s.mu held. The arguments are copied (a
// request's names are its own), and dropped when c is collected: a set
// that lives on (the table's empty set, every stream's root) keeps no
// arguments of sets gone. A call is only ever set, never changed, so
// called reads one outside the lock.
func (s *sharedSet[K]) recallLocked(k callKey, add, remove []K, c *sharedSet[K]) {
	if s.calls == nil {
		s.calls = map[callKey]*call[K]{}
	}
	if len(s.calls) >= maxMemo {
		maps.DeleteFunc(s.calls, func(_ callKey, cl *call[K]) bool { return cl.result.Value() == nil })
		if len(s.calls) >= maxMemo {
			clear(s.calls)
		}
	}
	s.calls[k] = &call[K]{add: slices.Clone(add), remove: slices.Clone(remove), result: weak.Make(c)}
	if c != s {
		c.recalledBy(s)
	}
}

// recalledBy makes parent's calls forget s when s is collected, once per
// parent; the cleanups of parents collected are stopped (a set that lives
// on is reached from new parents). parents.mu is taken last, and holds no
// other lock (sets derive from each other both ways).
func (s *sharedSet[K]) recalledBy(parent *sharedSet[K]) {
	wp := weak.Make(parent) // held weakly: a derived set keeps no parent alive
	s.parents.mu.Lock()
	defer s.parents.mu.Unlock()
	if _, ok := s.parents.m[wp]; ok {
		return
	}
	if s.parents.m == nil {
		s.parents.m = map[weak.Pointer[sharedSet[K]]]runtime.Cleanup{}
	}
	maps.DeleteFunc(s.parents.m, func(p weak.Pointer[sharedSet[K]], c runtime.Cleanup) bool {
		if p.Value() != nil {
			return false
		}
		c.Stop()
		return true
	})
	s.parents.m[wp] = runtime.AddCleanup(s, forgetCalls[K], wp)
}

// forgetCalls drops the calls of a set whose results were collected.
func forgetCalls[K comparable](wp weak.Pointer[sharedSet[K]]) {
	s := wp.Value()
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	maps.DeleteFunc(s.calls, func(_ callKey, cl *call[K]) bool { return cl.result.Value() == nil })
}

// deriveListed is derive(add, nil), for the set of a list of names (a
// sotw request's), with the copy of the list the derivation is
// remembered by: the streams that list the same names in the same order
// share one copy (never write it), as they share the set.
func (s *sharedSet[K]) deriveListed(add []K) (*sharedSet[K], []K) {
	if c, list := s.listed(add); list != nil {
		return c, list
	}
	c := s.derive(add, nil)
	if got, list := s.listed(add); list != nil && got == c {
		return c, list
	}
	return c, slices.Clone(add)
}

// listed returns the set a derivation from s by add alone gave, and the
// copy of add it is remembered by (deriveListed), if the set is alive;
// nil, nil if none is known.
func (s *sharedSet[K]) listed(add []K) (*sharedSet[K], []K) {
	if len(add) == 0 {
		return nil, nil
	}
	ck := s.callKey(add, nil)
	s.mu.Lock()
	cl := s.calls[ck]
	s.mu.Unlock()
	if cl == nil || len(cl.remove) != 0 || !slices.Equal(cl.add, add) {
		return nil, nil
	}
	if c := cl.result.Value(); c != nil {
		return c, cl.add
	}
	return nil, nil
}

// deriveAdded returns s ∪ added, where none of added is in s nor
// repeated (the caller knows it: a list of hashes none of which the set
// has, none twice). The derivation's key is read off them without a
// set of them: a set derived from s under it, holding them all and as many
// more than s, is s ∪ added (see derive).
func (s *sharedSet[K]) deriveAdded(added []K) *sharedSet[K] {
	if len(added) == 0 {
		return s
	}
	ck := s.callKey(added, nil)
	if c := s.called(ck, added, nil); c != nil {
		return c
	}
	k := deriveKey{adds: len(added)}
	for _, n := range added {
		k.addHash += s.tab.hash(n)
	}
	s.mu.Lock()
	wp, ok := s.memo[k]
	s.mu.Unlock()
	if ok {
		if c := wp.Value(); c != nil && len(c.m) == len(s.m)+len(added) && holdsAll(c, added) {
			s.recall(ck, added, nil, c)
			return c
		}
	}
	return s.derive(added, nil)
}

// setDiff is what a derivation changes in a set: the names added (none
// already in it; also as a set) and removed (all in it), the names asked
// to be removed, and the derivation's key.
type setDiff[K comparable] struct {
	key            deriveKey
	added, removed []K
	addSet, rem    map[K]struct{}
}

// diff returns what s ∪ add − remove changes in s.
func (s *sharedSet[K]) diff(add, remove []K) setDiff[K] {
	hash := s.tab.hash
	var d setDiff[K]
	for _, n := range remove {
		if d.rem == nil {
			d.rem = make(map[K]struct{}, len(remove))
		}
		d.rem[n] = struct{}{}
	}
	for _, n := range add {
		if _, ok := s.m[n]; ok {
			continue
		}
		if _, ok := d.rem[n]; ok {
			continue
		}
		if d.addSet == nil {
			d.addSet = make(map[K]struct{}, len(add))
		}
		if _, dup := d.addSet[n]; dup {
			continue
		}
		d.addSet[n] = struct{}{}
		d.added = append(d.added, n)
		d.key.addHash += hash(n)
	}
	for n := range d.rem {
		if _, ok := s.m[n]; ok {
			d.removed = append(d.removed, n)
			d.key.remHash += hash(n)
		}
	}
	d.key.adds, d.key.rems = len(d.added), len(d.removed)
	return d
}

// equalSet returns a live set of the table equal to s changed by d, found
// by another path (checked name by name); nil if there is none.
func (s *sharedSet[K]) equalSet(key setKey, d setDiff[K]) *sharedSet[K] {
	tab := s.tab
	tab.mu.Lock()
	cands := tab.m[key]
	tab.mu.Unlock()
	for _, wp := range cands {
		c := wp.Value()
		if c == nil || len(c.m) != key.n {
			continue
		}
		same := true
		for n := range c.m {
			_, isAdded := d.addSet[n]
			_, isRemoved := d.rem[n]
			if !isAdded && (isRemoved || !s.has(n)) {
				same = false
				break
			}
		}
		if same {
			return c
		}
	}
	return nil
}

// build makes the set s changed by d, and enters it in the table.
func (s *sharedSet[K]) build(key setKey, d setDiff[K]) *sharedSet[K] {
	var m map[K]struct{}
	if d.key.rems == 0 {
		m = maps.Clone(s.m)
	} else {
		m = make(map[K]struct{}, key.n)
		for n := range s.m {
			if _, ok := d.rem[n]; !ok {
				m[n] = struct{}{}
			}
		}
	}
	for _, n := range d.added {
		m[n] = struct{}{}
	}
	tab := s.tab
	tab.built.Add(int64(len(m)))
	c := &sharedSet[K]{m: m, h: key.h, tab: tab, sorted: s.sortedAfter(d, key.n)}
	tab.mu.Lock()
	tab.m[key] = append(tab.m[key], weak.Make(c))
	tab.mu.Unlock()
	runtime.AddCleanup(c, tab.forget, key)
	return c
}

func holdsAll[K comparable](s *sharedSet[K], names []K) bool {
	for _, n := range names {
		if !s.has(n) {
			return false
		}
	}
	return true
}

func holdsNone[K comparable](s *sharedSet[K], names []K) bool {
	for _, n := range names {
		if s.has(n) {
			return false
		}
	}
	return true
}

// remember records that derivation k of s gives c. s.mu is held.
func (s *sharedSet[K]) remember(k deriveKey, c *sharedSet[K]) {
	if s.memo == nil {
		s.memo = map[deriveKey]weak.Pointer[sharedSet[K]]{}
	}
	if len(s.memo) >= maxMemo {
		maps.DeleteFunc(s.memo, func(_ deriveKey, wp weak.Pointer[sharedSet[K]]) bool { return wp.Value() == nil })
		if len(s.memo) >= maxMemo {
			clear(s.memo)
		}
	}
	s.memo[k] = weak.Make(c)
}

// forget drops the table's entries of collected sets under key.
func (t *setTable[K]) forget(key setKey) {
	t.mu.Lock()
	defer t.mu.Unlock()
	// A new slice: derive reads the old one outside the lock.
	var live []weak.Pointer[sharedSet[K]]
	for _, wp := range t.m[key] {
		if wp.Value() != nil {
			live = append(live, wp)
		}
	}
	if len(live) == 0 {
		delete(t.m, key)
	} else {
		t.m[key] = live
	}
}

// live is the number of sets in the table (tests).
func (t *setTable[K]) live() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, l := range t.m {
		for _, wp := range l {
			if wp.Value() != nil {
				n++
			}
		}
	}
	return n
}

// entries is the number of entries in the table, live or not (tests).
func (t *setTable[K]) entries() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, l := range t.m {
		n += len(l)
	}
	return n
}
