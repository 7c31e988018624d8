package xds

import (
	"iter"
	"maps"
)

// versions is name → version, as a sotw state holds it (sotwHeld): a base
// map shared by the states made from one another, and by those of other
// clients that took it (sharedBases), never changed once made, and the
// names changed since (over). Each response makes a state
// from the last, and an ACK a working copy (readSotwState): a copy costs
// the names changed since the base, not the names held. Once those are
// about √(2n) of a base of n, a copy makes a new base: a change then costs
// O(√n) copies of names, in the copies of over and the new bases alike.
//
// The zero value is empty. A versions is not safe for concurrent use; the
// states that share a base are each read and changed under their owner's
// lock (sotw.go), the states of other streams under theirs: a base is
// read by many goroutines at once, which is safe only as it is never
// written.
type versions struct {
	base map[string]string // shared: never written
	over map[string]verOver
	n    int // names held
}

// verOver is a name's entry changed since the base: its version, or gone.
type verOver struct {
	v    string
	gone bool
}

// minCompact is the size of over below which a copy shares the base.
const minCompact = 16

func (m *versions) get(n string) (string, bool) {
	if o, ok := m.over[n]; ok {
		return o.v, !o.gone
	}
	v, ok := m.base[n]
	return v, ok
}

// at is get's version alone ("" for none).
func (m *versions) at(n string) string {
	v, _ := m.get(n)
	return v
}

// put notes v as n's version. A name already at v is left as it is: a
// response of a type that carries everything sets every name it carries
// (sotwPass.everything), and over holds only those that changed.
func (m *versions) put(n, v string) {
	old, ok := m.get(n)
	if ok && old == v {
		return
	}
	if !ok {
		m.n++
	}
	if m.over == nil {
		m.over = map[string]verOver{}
	}
	m.over[n] = verOver{v: v}
}

func (m *versions) del(n string) {
	if _, ok := m.get(n); !ok {
		return
	}
	m.n--
	if _, inBase := m.base[n]; !inBase {
		delete(m.over, n)
		return
	}
	if m.over == nil {
		m.over = map[string]verOver{}
	}
	m.over[n] = verOver{gone: true}
}

func (m *versions) len() int { return m.n }

// all yields every name held and its version, in no order.
func (m *versions) all() iter.Seq2[string, string] {
	return func(yield func(string, string) bool) {
		for n, v := range m.base {
			if _, changed := m.over[n]; changed {
				continue
			}
			if !yield(n, v) {
				return
			}
		}
		for n, o := range m.over {
			if !o.gone && !yield(n, o.v) {
				return
			}
		}
	}
}

// clone returns a copy that shares m's base, or a new base once the names
// changed since are √(2n) of its n: one of bases (nil: none) if m differs
// from it in few names, else one of its own, added to bases. m is not
// changed.
func (m *versions) clone(bases *sharedBases) versions {
	if !compacts(len(m.over), len(m.base)) {
		return versions{base: m.base, over: maps.Clone(m.over), n: m.n}
	}
	if bases != nil {
		for i, b := range bases.recent {
			if v, ok := m.onto(b); ok {
				bases.use(i)
				return v
			}
		}
	}
	base := make(map[string]string, m.n)
	for n, v := range m.all() {
		base[n] = v
	}
	if bases != nil {
		bases.add(base)
	}
	return versions{base: base, n: m.n}
}

// compact makes m a copy of itself (clone) if its over has grown to what
// a copy compacts: a state kept until something changes (a first sync's,
// of every name) then holds a base it may share, not an over of its own
// of every name.
func (m *versions) compact(bases *sharedBases) {
	if compacts(len(m.over), len(m.base)) {
		*m = m.clone(bases)
	}
}

// compacts reports whether a copy of a versions whose over holds k names,
// on a base of n, makes a new base.
func compacts(k, n int) bool { return k >= minCompact && k*k >= 2*n }

// onto returns m on base b (with what differs from b in over), if that
// copy would not compact again (compacts): the states of clients that
// hold the same names at the same versions, or nearly (a fleet of Envoys
// of every cluster, one change apart), share one base. Looking costs at
// most a lookup of each name of m and of b; a base whose size alone
// differs too much is not looked at.
func (m *versions) onto(b map[string]string) (versions, bool) {
	if d := m.n - len(b); compacts(max(d, -d), len(b)) {
		return versions{}, false
	}
	var over map[string]verOver
	note := func(n string, o verOver) bool {
		if over == nil {
			over = map[string]verOver{}
		}
		over[n] = o
		return !compacts(len(over), len(b))
	}
	inB := 0
	for n, v := range m.all() {
		bv, ok := b[n]
		if ok {
			inB++
		}
		if (!ok || bv != v) && !note(n, verOver{v: v}) {
			return versions{}, false
		}
	}
	if inB < len(b) {
		for n := range b {
			if _, ok := m.get(n); !ok && !note(n, verOver{gone: true}) {
				return versions{}, false
			}
		}
	}
	return versions{base: b, over: over, n: m.n}, true
}

// sharedBases are the last bases the sotw states of a type made, the last
// used first (at most maxSharedBases), which the next states that make a
// base take instead if they can (versions.onto): a thousand Envoys of
// every cluster hold one base of their versions, not a thousand. Held
// strongly: at most maxSharedBases maps per type. Under Cache.mu.
type sharedBases struct{ recent []map[string]string }

// maxSharedBases bounds sharedBases: enough for the bases of a first sync
// in parts (each part's names, then all) and of the fleet's states a few
// changes apart.
const maxSharedBases = 4

// use moves the base at i to the front.
func (b *sharedBases) use(i int) {
	m := b.recent[i]
	copy(b.recent[1:i+1], b.recent[:i])
	b.recent[0] = m
}

// add puts m at the front, dropping the least recently used beyond
// maxSharedBases.
func (b *sharedBases) add(m map[string]string) {
	if len(b.recent) < maxSharedBases {
		b.recent = append(b.recent, nil)
	}
	copy(b.recent[1:], b.recent[:len(b.recent)-1])
	b.recent[0] = m
}
