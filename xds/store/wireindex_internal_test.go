package store

import (
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"strings"
	"testing"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
)

// TestWireIndexFollowsThroughKeyCopies: through upserts and deletions of
// long names, enough for the index to copy its keys again several times,
// the index holds exactly the entries the type serves, each under its
// name with its version and slot, and its copies' bytes stay within a
// bound of the names and versions served.
func TestWireIndexFollowsThroughKeyCopies(t *testing.T) {
	s := New(typeRank, resource.ClusterType, resource.EndpointType)
	followThroughKeyCopies(t, s, longNames(300))
}

// TestWireIndexCollidingHashes is TestWireIndexFollowsThroughKeyCopies
// with names whose hashes collide: the index uses 2 bits of each hash, so
// 300 names share 4 hashes (tag and place); each is found under its own
// name only, by Find and by FindBatch, and a deletion leaves the others
// found.
func TestWireIndexCollidingHashes(t *testing.T) {
	s := New(typeRank, resource.ClusterType, resource.EndpointType)
	s.wire.hashMask = 3
	followThroughKeyCopies(t, s, longNames(300))
}

// TestWireIndexProbesWrapAround: 6 names whose hashes are the last 3
// places of a table of 16: the probes from the last places go on at the
// first, and so does a deletion's moving back of the entries after it.
func TestWireIndexProbesWrapAround(t *testing.T) {
	s := New(typeRank, resource.ClusterType, resource.EndpointType)
	s.wire.hashMask = 15
	var pool []string
	per := map[uint64]int{}
	for _, n := range longNames(1000) {
		if h := maphash.String(s.wire.seed, n) & 15; h >= 13 && per[h] < 2 {
			per[h]++
			pool = append(pool, n)
		}
	}
	if len(pool) != 6 {
		t.Fatalf("%d names found for the last places", len(pool))
	}
	followThroughKeyCopies(t, s, pool)
}

// longNames are n names of 200 bytes and more.
func longNames(n int) []string {
	pad := strings.Repeat("x", 200)
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%03d", pad, i)
	}
	return names
}

// followThroughKeyCopies applies random changes to names of pool to s's
// assignments, and checks the index after each: every name served found
// with its entry, by Find, WireName, Entry and FindBatch (in batches
// that cross WireBatch, with names repeated and names not served), and
// no other.
func followThroughKeyCopies(t *testing.T, s *Store, pool []string) {
	r := rand.New(rand.NewPCG(3, 4))
	ts := s.Type(resource.EndpointType)
	rebuilt := 0
	for step := range 400 {
		ch := Change{TypeURL: resource.EndpointType}
		for range 1 + r.IntN(20) {
			n := pool[r.IntN(len(pool))]
			if r.IntN(2) == 0 {
				ch.Deletes = append(ch.Deletes, n)
			} else {
				ch.Upserts = append(ch.Upserts, Resource{Name: n, Msg: &endpoint.ClusterLoadAssignment{ClusterName: fmt.Sprint(n, step)}})
			}
		}
		garbage := 0
		s.Wire().Read([]byte(resource.EndpointType), func(w *WireType) {
			if w != nil {
				garbage = w.garbage
			}
		})
		if err := s.Apply(ch); err != nil {
			t.Fatal(err)
		}
		s.Wire().Read([]byte(resource.EndpointType), func(w *WireType) {
			if w.garbage < garbage {
				rebuilt++
			}
			if len(w.ents) != len(ts.Resources) {
				t.Fatalf("step %d: the index holds %d entries, the type serves %d", step, len(w.ents), len(ts.Resources))
			}
			batch := make([][]byte, 1+r.IntN(3*WireBatch))
			for i := range batch {
				batch[i] = []byte(pool[r.IntN(len(pool))])
			}
			idx := make([]int32, len(batch))
			w.FindBatch(batch, idx)
			for i, n := range batch {
				e := ts.Resources[string(n)]
				if e == nil && idx[i] != -1 || e != nil && (idx[i] < 0 || w.At(idx[i]).Entry != e || w.At(idx[i]).Version != e.Version) {
					t.Fatalf("step %d: FindBatch found %d for %s; the type serves %v", step, idx[i], n, e)
				}
				if f, ok := w.Find(n); ok != (e != nil) || f.Entry != e || w.Entry(string(n)) != e {
					t.Fatalf("step %d: Find(%s) = %+v, %v; the type serves %v", step, n, f, ok, e)
				}
			}
			live := 0
			for n, e := range ts.Resources {
				if got := w.Entry(n); got != e {
					t.Fatalf("step %d: the index holds %v for %s, the type serves %v", step, got, n, e)
				}
				if name, got := w.WireName([]byte(n)); got.Entry != e || got.Version != e.Version || got.Slot != e.Slot || name != e.Name {
					t.Fatalf("step %d: WireName(%s) = %q, %+v", step, n, name, got)
				}
				if f, ok := w.Find([]byte(n)); !ok || f.Entry != e || f.Version != e.Version || f.Slot != e.Slot {
					t.Fatalf("step %d: Find(%s) = %+v, %v; want %+v", step, n, f, ok, e)
				}
				live += len(n) + len(e.Version)
			}
			if w.live != live || w.garbage > live+keyChunk {
				t.Fatalf("step %d: copies of %d bytes and %d of garbage; the names and versions served have %d", step, w.live, w.garbage, live)
			}
		})
	}
	if rebuilt == 0 {
		t.Fatal("the keys were never copied again: the case is not made")
	}
}
