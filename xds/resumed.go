package xds

import (
	"maps"
	"sync"
	"weak"

	"github.com/xdsbridge/xdsbridge/xds/store"
)

// A reconnecting Envoy's first request of its clusters and of its
// assignments carries its ~5,000 initial_resource_versions, almost all
// the versions the store serves. The decoder (decode.go) compares each
// with the store's entry as it reads it, from the wire index, which is of
// one generation of the type; a version that is the one served is kept as
// the entry (resumedVersions), not as a map entry, and the request's map
// holds the other names only. The watch of the request then reads "the
// client holds every one of these entries, and the map's versions": if the
// type is still at the generation decoded, an entry of the set is current,
// which a bit per slot (store.Entry.Slot) tells without a comparison, and
// when the request subscribes to exactly these names (or the wildcard, to
// as many resources as the type has), nothing of them is looked at. If the
// store moved since, the entries are the versions the client gave, read
// through a map built once.

// resumedVersions is the part of a request's initial_resource_versions
// that the decoder found current: entries of the store's type typ, at its
// generation gen. Never changed once decoded, but byName.
type resumedVersions struct {
	typ  *store.Type
	gen  uint64
	cur  []*store.Entry
	bits bitset // the slots of cur
	// subsCur: the request subscribes to names, and they are exactly
	// cur's (none is "*", none is outside cur).
	subsCur bool
	// subBits: the slots of the names the request subscribes to, if it
	// subscribes to some, each an entry of the type at gen, none "*";
	// else nil. subsIn: so far while decoding.
	subBits bitset
	subsIn  bool
	bound   int32

	once   sync.Once
	byName map[string]string
}

func newResumed(t *store.WireType, entries int) *resumedVersions {
	return &resumedVersions{
		typ: t.Type, gen: t.Gen,
		cur:    make([]*store.Entry, 0, entries),
		bits:   newBitset(t.SlotBound),
		subsIn: true, bound: t.SlotBound,
	}
}

// addCurrent takes an entry of the map whose version is the one served
// (w, the key's entry in the index; kb, the key's bytes). false: a key
// repeated in a way the entries cannot hold; they were moved to versions,
// and this one is to be put there too.
func (r *resumedVersions) addCurrent(w store.WireEntry, kb []byte, versions *map[string]string) bool {
	if w.Slot >= r.bound {
		r.spill(versions)
		return false
	}
	if r.bits.has(w.Slot) {
		return true // repeated, at the same version
	}
	if len(*versions) > 0 {
		delete(*versions, string(kb)) // an earlier entry of the key: the last wins
	}
	r.bits.set(w.Slot)
	r.cur = append(r.cur, w.Entry)
	return true
}

// addOther takes an entry of the map whose version is not the one served:
// key k, version val; w is the key's entry in the index if found. false:
// as addCurrent's.
func (r *resumedVersions) addOther(k, val string, w store.WireEntry, found bool, versions *map[string]string) bool {
	if found && r.bits.has(w.Slot) {
		// Current earlier in the map: the last wins.
		r.spill(versions)
		return false
	}
	if *versions == nil {
		*versions = map[string]string{}
	}
	(*versions)[k] = val
	return true
}

// spill moves the entries to versions.
func (r *resumedVersions) spill(versions *map[string]string) {
	if *versions == nil {
		*versions = make(map[string]string, len(r.cur))
	}
	for _, e := range r.cur {
		(*versions)[e.Name] = e.Version
	}
}

// subscribed notes a name the request subscribes to (w: its entry in the
// wire index; w.Entry nil: none). r may be nil.
func (r *resumedVersions) subscribed(n string, w store.WireEntry) {
	if r == nil || !r.subsIn {
		return
	}
	if w.Entry == nil || n == explicitWildcard || w.Slot >= r.bound {
		r.subsIn = false
		return
	}
	if r.subBits == nil {
		r.subBits = newBitset(r.bound)
	}
	r.subBits.set(w.Slot)
}

// done ends the decoding: nil if no entry was current.
func (r *resumedVersions) done() *resumedVersions {
	if r == nil || len(r.cur) == 0 {
		return nil
	}
	if !r.subsIn {
		r.subBits = nil
	}
	r.subsCur = r.subBits != nil && r.subBits.equal(r.bits)
	return r
}

// subscription returns the set of names a type's first request subscribes
// to (subscribed, unsubscribing from none), if it is known by the
// resources' slots (subBits): the set of an earlier resume to the same
// resources at the same generation (resumeSets), else a new one; nil
// otherwise. r may be nil.
func (r *resumedVersions) subscription(subscribed, unsubscribed []string) *nameSet {
	if r == nil || r.subBits == nil || len(subscribed) == 0 || len(unsubscribed) > 0 {
		return nil
	}
	return resumeSets.get(r.typ, r.gen, r.subBits, func() *nameSet { return emptyNames.derive(subscribed, nil) })
}

// resumeSets: the subscription sets of the last resumes, by the slots of
// their names at a generation of a type. A fleet reconnecting subscribes
// to a few sets of names, each 5,000 long; deriving each stream's set from
// its names (nameset.go) finds the fleet's one, but reads and hashes every
// name, and makes a map of them, to find it. The slots of the names at a
// generation identify the set: a generation maps slots to names.
var resumeSets slotSets

type slotSets struct {
	mu   sync.Mutex
	last [8]slotSet // most recent first
}

type slotSet struct {
	typ  *store.Type
	gen  uint64
	bits bitset
	set  weak.Pointer[nameSet]
}

// get returns the set of the names of slots bits of typ at gen: a live one
// found, else build's, remembered.
func (ss *slotSets) get(typ *store.Type, gen uint64, bits bitset, build func() *nameSet) *nameSet {
	ss.mu.Lock()
	for i := range ss.last {
		l := &ss.last[i]
		if l.typ == typ && l.gen == gen && l.bits.equal(bits) {
			if set := l.set.Value(); set != nil {
				ss.mu.Unlock()
				return set
			}
		}
	}
	ss.mu.Unlock()
	set := build()
	ss.mu.Lock()
	defer ss.mu.Unlock()
	copy(ss.last[1:], ss.last[:len(ss.last)-1])
	ss.last[0] = slotSet{typ: typ, gen: gen, bits: bits, set: weak.Make(set)}
	return set
}

// at reports whether the entries are of ts as it is: ts is the type
// decoded, at the generation decoded. ts is read under the store's lock.
func (r *resumedVersions) at(ts *typeState) bool {
	return r.typ == ts.Type && r.gen == ts.Gen
}

// version returns the version the client gave of n, if it is one of the
// entries. ts: the type, read under the store's lock.
func (r *resumedVersions) version(ts *typeState, n string) (string, bool) {
	if r.at(ts) {
		// The entries are of ts as it is: n's is the current one.
		if e, ok := ts.Resources[n]; ok && r.bits.has(e.Slot) {
			return e.Version, true
		}
		return "", false
	}
	r.once.Do(func() {
		r.byName = make(map[string]string, len(r.cur))
		for _, e := range r.cur {
			r.byName[e.Name] = e.Version
		}
	})
	v, ok := r.byName[n]
	return v, ok
}

// version returns the version the client is known to hold of n: an
// explicit one, or one of a resume's entries.
func (h *deltaHeld) version(ts *typeState, n string) (string, bool) {
	if v, ok := h.versions[n]; ok {
		return v, true
	}
	if h.resumed != nil {
		return h.resumed.version(ts, n)
	}
	return "", false
}

// explicit puts a resume's entries in versions, as explicit versions
// (before an unsubscription marks or forgets some).
func (h *deltaHeld) explicit() {
	r := h.resumed
	if r == nil {
		return
	}
	v := make(map[string]string, len(h.versions)+len(r.cur))
	for _, e := range r.cur {
		v[e.Name] = e.Version
	}
	maps.Copy(v, h.versions)
	h.versions, h.resumed = v, nil
}

// bitset is a set of slots.
type bitset []uint64

func newBitset(bound int32) bitset { return make(bitset, (bound+63)/64) }

func (b bitset) has(i int32) bool { return int(i>>6) < len(b) && b[i>>6]&(1<<(i&63)) != 0 }
func (b bitset) set(i int32)      { b[i>>6] |= 1 << (i & 63) }

func (b bitset) equal(o bitset) bool {
	if len(b) != len(o) {
		return false
	}
	for i := range b {
		if b[i] != o[i] {
			return false
		}
	}
	return true
}

// resumedCheck is the full check of a state whose explicit versions
// include a resume's entries (r, resumed.go). If the type is still at the
// generation they were found current at, and the client may read every
// resource, an entry is current: of interest, it is not sent, and it is
// not looked at; the client subscribing to the wildcard with as many
// entries as the type has resources, or to exactly the entries' names,
// nothing of them is looked at. Otherwise every name is, as fullCheck
// looks at them.
func (p *deltaPass) resumedCheck(r *resumedVersions) (covered func(n string) bool) {
	w, ts, subscribed := p.w, p.ts, p.subscribed
	if !r.at(ts) || w.vis() != nil {
		covered = w.fullCheck(p.known.versions, p.consider)
		for _, e := range r.cur {
			if _, explicit := p.known.versions[e.Name]; !explicit && !covered(e.Name) {
				p.consider(e.Name)
			}
		}
		return covered
	}
	covered = w.covered()
	switch {
	case p.wild:
		// The entries are resources of the type (of the generation).
		if len(r.cur) < len(ts.Resources) {
			for n, e := range ts.Resources {
				if !r.bits.has(e.Slot) {
					p.consider(n)
				}
			}
		}
	case r.subsCur && len(subscribed) == len(r.cur):
		// The names subscribed include the request's, which are the
		// entries': as many, they are these.
	default:
		held := 0
		for n := range subscribed {
			if e, ok := ts.Resources[n]; ok && r.bits.has(e.Slot) {
				held++
				continue
			}
			p.consider(n)
		}
		if held < len(r.cur) {
			// Entries not subscribed: held, not of interest.
			for _, e := range r.cur {
				if _, isSub := subscribed[e.Name]; !isSub {
					p.consider(e.Name)
				}
			}
		}
	}
	for n := range p.known.versions {
		if !covered(n) {
			p.consider(n)
		}
	}
	return covered
}
