package store

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestWireTableAgreesWithMap: through random upserts and deletions
// (growing the table, moving entries back after a deletion, copying the
// keys again), with hashes cut to few bits in several ways (the tags all
// equal, the places few, both), the index finds by Find and FindBatch
// exactly the entries of a plain map of the names served, and its places
// stay a table of open addressing of its entries: one place per entry,
// reached from its hash's place without a free place between, of its tag.
func TestWireTableAgreesWithMap(t *testing.T) {
	masks := []uint64{^uint64(0), 3, 15, 0xffffffff_0000000f, 0x3_000000ff, 0x1_00000000}
	for _, mask := range masks {
		t.Run(fmt.Sprintf("mask=%x", mask), func(t *testing.T) {
			tableAgreesWithMap(t, mask)
		})
	}
}

func tableAgreesWithMap(t *testing.T, mask uint64) {
	r := rand.New(rand.NewPCG(mask, 11))
	// Names of equal lengths and equal last bytes (FindBatch's first
	// comparison), the empty name, and names differing in one byte.
	var pool []string
	for i := range 150 {
		pool = append(pool, fmt.Sprintf("n%03dz", i), fmt.Sprintf("%dz", i))
	}
	pool = append(pool, "", "z", strings.Repeat("y", 300))
	x := NewWireIndex()
	x.hashMask = mask
	ts := &Type{URL: "type.test/T", Resources: map[string]*Entry{}}
	var slot int32
	rebuilt, removed := 0, 0
	for step := range 300 {
		var changed []string
		for range 1 + r.IntN(40) {
			n := pool[r.IntN(len(pool))]
			changed = append(changed, n)
			switch r.IntN(5) {
			case 0, 1:
				if ts.Resources[n] != nil {
					removed++
				}
				delete(ts.Resources, n)
			case 2:
				// Not UTF-8: served, but not the index's.
				ts.Resources[n] = &Entry{Name: n, Version: "\xff" + n, Slot: slot}
				slot++
			default:
				ts.Resources[n] = &Entry{Name: n, Version: strings.Repeat("v", r.IntN(600)) + fmt.Sprint(step), Slot: slot}
				slot++
			}
		}
		ts.Gen++
		garbage := 0
		x.Read([]byte(ts.URL), func(w *WireType) {
			if w != nil {
				garbage = w.garbage
			}
		})
		x.Follow(ts, changed)
		x.Read([]byte(ts.URL), func(w *WireType) {
			if w.garbage < garbage {
				rebuilt++
			}
			checkTable(t, step, &w.wireTable)
			want := map[string]*Entry{}
			for n, e := range ts.Resources {
				if utf8.ValidString(e.Version) {
					want[n] = e
				}
			}
			if len(w.ents) != len(want) {
				t.Fatalf("step %d: %d entries, want %d", step, len(w.ents), len(want))
			}
			for _, n := range pool {
				if f, ok := w.Find([]byte(n)); f.Entry != want[n] || ok != (want[n] != nil) {
					t.Fatalf("step %d: Find(%q) = %v, %v; want %v", step, n, f.Entry, ok, want[n])
				}
			}
			for _, size := range []int{1, WireBatch - 1, WireBatch, WireBatch + 1, 2*WireBatch - 1, 2 * WireBatch, 2*WireBatch + 1, 1 + r.IntN(100)} {
				batch := make([][]byte, size)
				for i := range batch {
					if i > 0 && r.IntN(4) == 0 {
						batch[i] = batch[r.IntN(i)] // repeated
					} else {
						batch[i] = []byte(pool[r.IntN(len(pool))])
					}
				}
				idx := make([]int32, size)
				w.FindBatch(batch, idx)
				for i, n := range batch {
					e := want[string(n)]
					if e == nil && idx[i] != -1 || e != nil && (idx[i] < 0 || w.At(idx[i]).Entry != e || w.At(idx[i]).Version != e.Version) {
						t.Fatalf("step %d: FindBatch of %d: %q at %d found %d; want %v", step, size, n, i, idx[i], e)
					}
				}
			}
		})
	}
	if rebuilt == 0 || removed < 100 {
		t.Fatalf("keys copied again %d times, %d entries removed: the case is not made", rebuilt, removed)
	}
}

// checkTable checks that t's places are a table of open addressing of
// its entries.
func checkTable(t *testing.T, step int, w *wireTable) {
	t.Helper()
	size := uint64(len(w.places))
	if size&(size-1) != 0 || 2*len(w.ents) > len(w.places) {
		t.Fatalf("step %d: %d places for %d entries", step, size, len(w.ents))
	}
	mask := size - 1
	seen := make([]bool, len(w.ents))
	used := 0
	for p, s := range w.places {
		if s == 0 {
			continue
		}
		used++
		i := int(uint32(s)) - 1
		if i < 0 || i >= len(w.ents) || seen[i] {
			t.Fatalf("step %d: place %d holds index %d (of %d entries, seen %v)", step, p, i, len(w.ents), i >= 0 && i < len(w.ents) && seen[i])
		}
		seen[i] = true
		h := w.hash(w.ents[i].key)
		if s>>32 != h>>32 {
			t.Fatalf("step %d: place %d: tag %x, the key's %x", step, p, s>>32, h>>32)
		}
		for q := h & mask; q != uint64(p); q = (q + 1) & mask {
			if w.places[q] == 0 {
				t.Fatalf("step %d: %q at place %d, its hash's %d, free place %d between", step, w.ents[i].key, p, h&mask, q)
			}
		}
		if w.ents[i].key != w.ents[i].Entry.Name || w.ents[i].Name != w.ents[i].Entry.Name {
			t.Fatalf("step %d: entry %d keyed %q for %q", step, i, w.ents[i].key, w.ents[i].Entry.Name)
		}
	}
	if used != len(w.ents) {
		t.Fatalf("step %d: %d places used for %d entries", step, used, len(w.ents))
	}
}
