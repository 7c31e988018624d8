package xds

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/server/stream/v3"
)

// deltaSub against go-control-plane's stream.Subscription, which the
// delta server used: random requests (names subscribed, unsubscribed,
// "*", repeated, initial versions, states installed between requests)
// leave the same subscribed names, wildcard and explicit versions as its
// returned-resources map. Except that deltaSub unsubscribes a name
// repeated among a request's unsubscriptions once: go-control-plane is
// given each once (applied again, it forgets the version the first
// unsubscription of a name subscribed under a wildcard marked, which
// asked to answer the name again).
func TestDeltaSubMatchesGoControlPlane(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	names := func(max int) []string {
		var out []string
		for range rng.IntN(max + 1) {
			if rng.IntN(8) == 0 {
				out = append(out, "*")
			} else {
				out = append(out, fmt.Sprintf("n%d", rng.IntN(12)))
			}
		}
		return out
	}
	checks := 0
	for run := range 2000 {
		var initial map[string]string
		if rng.IntN(3) == 0 {
			initial = map[string]string{}
			for _, n := range names(4) {
				initial[n] = "v0"
			}
		}
		subs, unsubs := names(5), names(2)
		ref := stream.NewDeltaSubscription(subs, firstOfEach(unsubs), maps.Clone(initial), true)
		got := newDeltaSub(subs, unsubs, maps.Clone(initial), nil)
		for step := range 8 {
			checks++
			if !maps.Equal(ref.SubscribedResources(), got.SubscribedResources()) || ref.IsWildcard() != got.IsWildcard() ||
				!maps.Equal(ref.ReturnedResources(), got.held.versions) {
				t.Fatalf("run %d step %d: subscribed %v wildcard %v versions %v; go-control-plane: %v %v %v", run, step,
					got.SubscribedResources(), got.IsWildcard(), got.held.versions,
					ref.SubscribedResources(), ref.IsWildcard(), ref.ReturnedResources())
			}
			if rng.IntN(2) == 0 {
				// A response installed: the cache's new map.
				m := map[string]string{}
				for _, n := range names(4) {
					m[n] = fmt.Sprint("v", step)
				}
				ref.SetReturnedResources(m)
				got.held = &deltaHeld{versions: maps.Clone(m)}
			}
			subs, unsubs = names(4), names(4)
			ref.UpdateResourceSubscriptions(subs, firstOfEach(unsubs))
			got.update(subs, unsubs)
		}
	}
	t.Logf("%d states compared", checks)
}

// firstOfEach returns names without repetitions, each where it first is.
func firstOfEach(names []string) []string {
	var out []string
	for _, n := range names {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// Equal sets are one set however they were reached; a derivation that
// changes nothing returns the set itself; sets nothing holds are
// collected and leave the table.
func TestNameSetsShared(t *testing.T) {
	all := make([]string, 500)
	for i := range all {
		all[i] = fmt.Sprintf("mm-cluster-%03d", i)
	}
	// Subscribed at once (an Envoy's EDS request) ...
	a := emptyNames.derive(all, nil)
	b := emptyNames.derive(all, nil)
	// ... and sent in parts, in another order, with a detour.
	c := emptyNames
	for i := 0; i < len(all); i += 64 {
		c = c.derive(all[i:min(i+64, len(all))], nil)
	}
	d := emptyNames.derive(append([]string{"mm-other"}, all[250:]...), nil).derive(all[:250], []string{"mm-other"})
	t.Logf("sets: a %p b %p c %p d %p, %d names", a, b, c, d, a.len())
	if a.len() != len(all) || a != b || a != c || a != d {
		t.Fatalf("equal sets not shared: %p %p %p %p", a, b, c, d)
	}
	if a.derive(all[:10], nil) != a || a.derive(nil, []string{"mm-absent"}) != a {
		t.Fatal("a derivation that changes nothing made a new set")
	}
	e := a.derive([]string{"mm-new"}, all[:1])
	if e == a || e.len() != len(all) || !e.has("mm-new") || e.has(all[0]) || !a.has(all[0]) || a.has("mm-new") {
		t.Fatalf("derive changed the original or missed a name: %d names", e.len())
	}
	hs := hashSets.empty.derive([]uint64{1, 2, 3}, nil)
	if hs != hashSets.empty.derive([]uint64{3, 2, 1, 2}, nil) {
		t.Fatal("hash sets not shared")
	}

	before, entries := nameSets.live(), nameSets.entries()
	a, b, c, d, e = nil, nil, nil, nil, nil
	deadline := time.Now().Add(10 * time.Second)
	for (nameSets.live() >= before || nameSets.entries() >= entries) && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("live sets in the table: %d before, %d after; entries %d before, %d after", before, nameSets.live(), entries, nameSets.entries())
	if nameSets.live() >= before || nameSets.entries() >= entries {
		t.Fatalf("no set collected, or its entry kept: %d live, %d entries", nameSets.live(), nameSets.entries())
	}
}

// Streams deriving the same set at once (a fleet reconnecting) share one
// set: the first builds it, the others wait and take it.
func TestNameSetsSharedWhenConcurrent(t *testing.T) {
	// More Ps than this machine's 2 cores, so that the derivations
	// overlap (with 2 they rarely do, and the test would not fail
	// without the lock that makes one wait for the other).
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(8))
	names := make([]string, 5000)
	for i := range names {
		names[i] = fmt.Sprintf("mm-concurrent-%d-%04d", time.Now().UnixNano(), i)
	}
	const n = 64
	got := make([]*nameSet, n)
	start := make(chan struct{})
	done := make(chan int)
	for i := range n {
		go func() {
			<-start
			got[i] = emptyNames.derive(names, nil)
			done <- i
		}()
	}
	close(start)
	for range n {
		<-done
	}
	distinct := map[*nameSet]bool{}
	for _, s := range got {
		distinct[s] = true
	}
	t.Logf("%d goroutines derived %d distinct sets", n, len(distinct))
	if len(distinct) != 1 {
		t.Fatalf("%d distinct sets for the same names", len(distinct))
	}
}

// TestDeriveAddedIsDerive: deriving a set by added hashes (none in it,
// none repeated) gives the set derive gives, shared: found by the
// derivation remembered, or built; and another list of as many hashes is
// another set.
func TestDeriveAddedIsDerive(t *testing.T) {
	tab := newSetTable(func(h uint64) uint64 { return h })
	base := tab.empty.derive([]uint64{1, 2}, nil)
	want := base.derive([]uint64{5, 3, 4}, nil)
	if got := base.deriveAdded([]uint64{3, 4, 5}); got != want {
		t.Errorf("deriveAdded gave %v, not derive's set %v", slices.Sorted(maps.Keys(got.m)), slices.Sorted(maps.Keys(want.m)))
	}
	// The same sum of hashes, as many: not the set remembered.
	other := base.deriveAdded([]uint64{0, 5, 7})
	if got := slices.Sorted(maps.Keys(other.m)); !slices.Equal(got, []uint64{0, 1, 2, 5, 7}) {
		t.Errorf("deriveAdded of another list gave %v", got)
	}
	if fresh := tab.empty.deriveAdded([]uint64{7}); !slices.Equal(slices.Sorted(maps.Keys(fresh.m)), []uint64{7}) {
		t.Errorf("deriveAdded built %v, want [7]", slices.Sorted(maps.Keys(fresh.m)))
	}
}

// TestDeriveByArgumentsComparesThem: a derivation found by its arguments
// (sharedSet.called) is the one of exactly those arguments, in order.
// The table's hash is constant, so that every call of as many names has
// the same key: only the comparison of the names tells them apart.
func TestDeriveByArgumentsComparesThem(t *testing.T) {
	tab := newSetTable(func(string) uint64 { return 0 })
	names := func(s *nameSet) []string { return slices.Sorted(maps.Keys(s.m)) }
	base := tab.empty.derive([]string{"a", "b"}, nil)
	x := base.derive([]string{"c"}, []string{"a"})
	if got := names(x); !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("derive gave %v, want [b c]", got)
	}
	// Same key, other names: another set.
	y := base.derive([]string{"d"}, []string{"b"})
	if got := names(y); !slices.Equal(got, []string{"a", "d"}) {
		t.Errorf("derive of other names gave %v, want [a d]", got)
	}
	// The same arguments again: the same sets, nothing built.
	built := tab.built.Load()
	if base.derive([]string{"c"}, []string{"a"}) != x || base.derive([]string{"d"}, []string{"b"}) != y {
		t.Errorf("the same derivation again gave another set")
	}
	if n := tab.built.Load(); n != built {
		t.Errorf("the same derivations again built %d more entries", n-built)
	}
	// A derivation that changes nothing is the set itself; then one of as
	// many names that does change it.
	if base.derive([]string{"a"}, nil) != base || base.derive([]string{"a"}, nil) != base {
		t.Errorf("adding a name the set holds gave another set")
	}
	if got := names(base.derive([]string{"e"}, nil)); !slices.Equal(got, []string{"a", "b", "e"}) {
		t.Errorf("adding e gave %v, want [a b e]", got)
	}
	// Unsubscribed, then subscribed again: the set it was.
	gone := base.derive(nil, []string{"a"})
	if got := names(gone); !slices.Equal(got, []string{"b"}) {
		t.Errorf("removing a gave %v, want [b]", got)
	}
	if back := gone.derive([]string{"a"}, nil); back != base {
		t.Errorf("a subscribed again gave %v, not the set it was", names(back))
	}
	// Added hashes (deriveAdded), same key, other hashes.
	htab := newSetTable(func(uint64) uint64 { return 0 })
	hb := htab.empty.deriveAdded([]uint64{1})
	if h2 := htab.empty.deriveAdded([]uint64{2}); h2 == hb || !h2.has(2) || h2.has(1) {
		t.Errorf("deriveAdded of another hash gave %v", slices.Sorted(maps.Keys(h2.m)))
	}
}
