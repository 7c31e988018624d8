package bridge

import (
	"fmt"
	"math/rand"
	"reflect"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/xdsbridge/xdsbridge/sources"
)

// TestUpdateDeltaMatchesFullComparison: an update with a delta records
// what the same update without one records (the services, claims,
// conflicts, refused names, dirty services and statuses), over random
// sequences of two sources' updates: services changed, changed back,
// added, removed, names refused, deltas naming more than what changed,
// and deltas that do not follow the last update (ignored).
func TestUpdateDeltaMatchesFullComparison(t *testing.T) {
	at := time.Unix(1e9, 0)
	opts := Options{Sources: []string{"a", "b"}, Now: func() time.Time { return at }}
	withDelta, without := New(opts, newRecorder()), New(opts, newRecorder())
	rng := rand.New(rand.NewSource(1))
	names := []string{"s0", "s1", "s2", "s3", "s4", "s5", "bad/name", "bad name"}
	endpoints := [][]sources.Endpoint{
		{{Address: "10.0.0.1", Port: 80}},
		{{Address: "10.0.0.1", Port: 80}, {Address: "10.0.0.2", Port: 80}},
		{{Address: "10.0.0.3", Port: 81}},
	}
	lists := map[string][][]sources.Service{} // each source's updates so far
	deltas := 0
	for step := 0; step < 4000; step++ {
		src := "a"
		if rng.Intn(4) == 0 {
			src = "b"
		}
		hist := lists[src]
		var last []sources.Service
		if len(hist) > 0 {
			last = hist[len(hist)-1]
		}
		// The next list: last's services, the same values, with some
		// changed, added or removed.
		cur := map[string]sources.Service{}
		for _, s := range last {
			cur[s.Name] = s
		}
		touched := map[string]bool{}
		for range rng.Intn(3) + 1 {
			name := names[rng.Intn(len(names))]
			touched[name] = true
			if _, ok := cur[name]; ok && rng.Intn(3) == 0 {
				delete(cur, name)
				continue
			}
			// A new slice (the values of one of a few), or, changed
			// back, last's own.
			eps := slices.Clone(endpoints[rng.Intn(len(endpoints))])
			cur[name] = sources.Service{Name: name, Endpoints: eps}
		}
		if rng.Intn(4) == 0 {
			touched[names[rng.Intn(len(names))]] = true // named, unchanged
		}
		next := make([]sources.Service, 0, len(cur))
		for _, s := range cur {
			next = append(next, s)
		}
		sort.Slice(next, func(i, j int) bool { return next[i].Name < next[j].Name })
		u := sources.Update{Source: src, Services: next}
		if len(hist) > 0 {
			base := last
			if rng.Intn(5) == 0 {
				base = hist[rng.Intn(len(hist))] // not always the last
			}
			d := &sources.Delta{Base: base}
			for name := range touched {
				if s, ok := cur[name]; ok {
					d.Changed = append(d.Changed, s)
				} else {
					d.Removed = append(d.Removed, name)
				}
			}
			if d.Follows(base) && sameListBy(base, last) {
				deltas++
			}
			u.Delta = d
		}
		lists[src] = append(hist, next)
		full := u
		full.Delta = nil
		got, want := withDelta.applyUpdate(u), without.applyUpdate(full)
		if got != want {
			t.Fatalf("step %d: dirty %v with the delta, %v without", step, got, want)
		}
		compareLoops(t, fmt.Sprintf("step %d", step), withDelta, without)
		clear(withDelta.dirty)
		clear(without.dirty)
	}
	if deltas < 1000 {
		t.Fatalf("only %d updates had a delta that follows", deltas)
	}
}

func sameListBy(a, b []sources.Service) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// compareLoops fails t when two loops recorded different updates.
func compareLoops(t *testing.T, step string, a, b *Loop) {
	t.Helper()
	for _, c := range []struct {
		what     string
		got, wnt any
	}{
		{"services", a.bySource, b.bySource},
		{"claims", a.claims, b.claims},
		{"dirty", a.dirty, b.dirty},
		{"refused names", a.refusedNames, b.refusedNames},
		{"conflicts", a.Conflicts(), b.Conflicts()},
		{"statuses", a.Sources(), b.Sources()},
		{"diagnostics", a.snap.diags, b.snap.diags},
	} {
		if !reflect.DeepEqual(c.got, c.wnt) {
			t.Fatalf("%s: %s differ (-delta +full):\n%s", step, c.what, cmp.Diff(c.got, c.wnt))
		}
	}
}

// TestUpdateDeltaCostsWhatItNames: an update whose delta follows the
// last one is applied without looking at the services it does not name:
// a service of the list changed but left out of the delta (which a
// source must never do) is not seen, where a full comparison sees it.
func TestUpdateDeltaCostsWhatItNames(t *testing.T) {
	l := New(Options{Sources: []string{"a"}}, newRecorder())
	first := []sources.Service{service("x", 1), service("y", 1)}
	l.applyUpdate(sources.Update{Source: "a", Services: first})
	clear(l.dirty)
	next := []sources.Service{service("x", 2), service("y", 2)}
	l.applyUpdate(sources.Update{Source: "a", Services: next, Delta: &sources.Delta{Base: first, Changed: next[:1]}})
	if !l.dirty["x"] || l.dirty["y"] {
		t.Fatalf("dirty %v, want x alone (the delta names x)", l.dirty)
	}
	// The same delta, its base no longer the last list: compared in full.
	clear(l.dirty)
	again := []sources.Service{service("x", 3), service("y", 3)}
	l.applyUpdate(sources.Update{Source: "a", Services: again, Delta: &sources.Delta{Base: first, Changed: again[:1]}})
	if !l.dirty["x"] || !l.dirty["y"] {
		t.Fatalf("dirty %v, want x and y (the delta does not follow the last update)", l.dirty)
	}
}
