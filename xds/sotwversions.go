package xds

import (
	"iter"
	"maps"
)

// versions is name → version, as a sotw state holds it (sotwHeld): a base
// map shared by the states made from one another, never changed once
// made, and the names changed since (over). Each response makes a state
// from the last, and an ACK a working copy (readSotwState): a copy costs
// the names changed since the base, not the names held. Once those are
// about √(2n) of a base of n, a copy makes a new base: a change then costs
// O(√n) copies of names, in the copies of over and the new bases alike.
//
// The zero value is empty. A versions is not safe for concurrent use; the
// states that share a base are each read and changed under their owner's
// lock (sotw.go).
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
// changed since are √(2n) of its n. m is not changed.
func (m *versions) clone() versions {
	if k := len(m.over); k < minCompact || k*k < 2*len(m.base) {
		return versions{base: m.base, over: maps.Clone(m.over), n: m.n}
	}
	base := make(map[string]string, m.n)
	for n, v := range m.all() {
		base[n] = v
	}
	return versions{base: base, n: m.n}
}
