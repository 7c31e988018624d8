package xds

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"unsafe"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/xdsbridge/xdsbridge/xds/store"
)

// lookedAt returns the names a pass of ds walks: its rest and seq, in
// order, each once.
func lookedAt(ds *deltaState) []string {
	var out []string
	w := newNameWalk(ds.rest, ds.seq)
	for n, ok := w.next(); ok; n, ok = w.next() {
		out = append(out, n)
	}
	return out
}

// TestDeltaSubscribeKeepsTheRestAsKept: a request that subscribes while
// the client's sync is still in parts (its rest up to the whole type)
// looks at the rest and the names subscribed, walked together in order,
// and keeps the rest as the state kept it, neither copied nor merged
// with the request's names (seq holds only those); a rejection's names
// and a resource rejected alone make a new rest, and leave the kept one
// as it was.
func TestDeltaSubscribeKeepsTheRestAsKept(t *testing.T) {
	ts, names := assignmentsServed(t, 100)
	rest := ts.AllNames().Run(names[10:40])
	subs := slices.Concat(names[5:8], names[38:45], names[90:92])
	slices.Sort(subs)
	subs = slices.Compact(subs)

	ds := deltaState{complete: true, gen: ts.Gen, newSub: subs}
	ds.lookAt(ts, rest, nil, "", false, ds.newSub, nil)
	want := slices.Concat(names[5:8], names[10:45], names[90:92])
	if got := lookedAt(&ds); !slices.Equal(got, want) {
		t.Fatalf("looks at %q, want %q", got, want)
	}
	if !slices.Equal(ds.seq, subs) {
		t.Errorf("seq %q, want only the names subscribed %q", ds.seq, subs)
	}
	if unsafe.SliceData(ds.rest) != unsafe.SliceData(rest) || len(ds.rest) != len(rest) {
		t.Error("the rest is a copy of the one kept")
	}

	// A rejected response's names join the rest; one rejected alone
	// leaves it.
	kept := slices.Clone(rest)
	nacked := []string{names[60], names[3], names[20]}
	ds = deltaState{complete: true, gen: ts.Gen, newSub: subs}
	ds.lookAt(ts, rest, nacked, names[30], false, ds.newSub, []string{names[95], names[1]})
	wantRest := slices.Concat(names[3:4], names[10:30], names[31:40], names[60:61])
	if !slices.Equal(ds.rest, wantRest) {
		t.Errorf("rest %q, want %q", ds.rest, wantRest)
	}
	want = slices.Concat(names[1:2], names[3:4], names[5:8], names[10:30], names[31:45], names[60:61], names[90:92], names[95:96])
	if got := lookedAt(&ds); !slices.Equal(got, want) {
		t.Errorf("looks at %q, want %q", got, want)
	}
	if !slices.Equal(rest, kept) {
		t.Errorf("the rest kept was written: %q, was %q", rest, kept)
	}
}

// assignmentsServed returns the assignments' type of a cache serving n
// of them, and their names, sorted.
func assignmentsServed(tb testing.TB, n int) (*typeState, []string) {
	c := NewCache(WithTypes(EndpointType))
	var ch store.Change
	ch.TypeURL = EndpointType
	var names []string
	for i := range n {
		name := fmt.Sprintf("svc-%05d", i)
		names = append(names, name)
		ch.Upserts = append(ch.Upserts, store.Resource{Name: name, Msg: &endpoint.ClusterLoadAssignment{ClusterName: name}})
	}
	if err := c.Apply(ch); err != nil {
		tb.Fatal(err)
	}
	return c.types[EndpointType], names
}

// TestNameWalkIsTheSortedUnion: a nameWalk of two sorted lists of
// distinct names gives their union, sorted, each once (what mergeNames
// makes of them), and what it has not given yet of each list.
func TestNameWalkIsTheSortedUnion(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	pick := func(n, of int) []string { return randomSortedNames(r, n, of) }
	for range 2000 {
		of := 1 + r.IntN(300)
		a, b := pick(r.IntN(60), of), pick(r.IntN(60), of)
		want := mergeNames(a, b)
		stopAt := r.IntN(len(want) + 1)
		w := newNameWalk(a, b)
		var got []string
		for len(got) < stopAt {
			n, ok := w.next()
			if !ok {
				t.Fatalf("walk of %q and %q ended after %q", a, b, got)
			}
			got = append(got, n)
		}
		ta, tb := w.tails()
		if rest := mergeNames(ta, tb); !slices.Equal(slices.Concat(got, rest), want) {
			t.Fatalf("walk of %q and %q: %q then tails %q, %q; want %q", a, b, got, ta, tb, want)
		}
		for n, ok := w.next(); ok; n, ok = w.next() {
			got = append(got, n)
		}
		if !slices.Equal(got, want) && len(want) > 0 {
			t.Fatalf("walk of %q and %q = %q, want %q", a, b, got, want)
		}
		if w.len() != len(a)+len(b) {
			t.Fatalf("len %d, want %d", w.len(), len(a)+len(b))
		}
	}
}

// TestMergeNamesIsTheSortedUnion: mergeNames of two sorted lists of
// distinct names is their union, sorted, each once, whichever is longer.
func TestMergeNamesIsTheSortedUnion(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	pick := func(n, of int) []string { return randomSortedNames(r, n, of) }
	for range 2000 {
		of := 1 + r.IntN(300)
		a, b := pick(r.IntN(60), of), pick(r.IntN(60), of)
		want := slices.Compact(slices.Sorted(slices.Values(slices.Concat(a, b))))
		got := mergeNames(a, b)
		if !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
			t.Fatalf("mergeNames(%q, %q) = %q, want %q", a, b, got, want)
		}
	}
}

// BenchmarkDeltaLookAtSubscribeWithRest is the cost of deciding the names
// a request looks at when it subscribes to 200 names (a CDS part's
// assignments) while half the type is still the client's rest: the
// request's names, not the rest's, which the pass walks as kept (ns/name:
// per name of the rest, falling as the rest grows).
func BenchmarkDeltaLookAtSubscribeWithRest(b *testing.B) {
	for _, services := range []int{5000, 20000} {
		b.Run(fmt.Sprintf("services=%d", services), func(b *testing.B) {
			ts, names := assignmentsServed(b, services)
			rest := ts.AllNames().Run(names[services/4 : 3*services/4])
			subs := names[3*services/4 : 3*services/4+200]
			b.ReportAllocs()
			for b.Loop() {
				ds := deltaState{complete: true, gen: ts.Gen, newSub: subs}
				ds.lookAt(ts, rest, nil, "", false, ds.newSub, nil)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(rest)), "ns/name")
		})
	}
}

// randomSortedNames returns up to n distinct names of of, sorted.
func randomSortedNames(r *rand.Rand, n, of int) []string {
	var out []string
	for range n {
		out = append(out, fmt.Sprintf("n%04d", r.IntN(of)))
	}
	return sortedNames(out)
}
