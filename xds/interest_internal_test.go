package xds

import (
	"slices"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/xdsbridge/xdsbridge/xds/store"
)

// TestInterestIndexesSotwAssignmentWatchesByName: a commit wakes the
// sotw assignment watches that list a name it changed and every broad
// watch (a wildcard one, one of more names than the index takes), and
// nothing is left of a watch once cancelled.
func TestInterestIndexesSotwAssignmentWatchesByName(t *testing.T) {
	c := NewCache(WithTypes(EndpointType))
	c.maxNarrow = 2
	var ups []store.Resource
	for _, n := range []string{"a", "b", "c"} {
		ups = append(ups, store.Resource{Name: n, Msg: &discovery.Resource{Name: n}})
	}
	if err := c.Apply(store.Change{TypeURL: EndpointType, Upserts: ups}); err != nil {
		t.Fatal(err)
	}
	c.MarkReady()
	ts := c.types[EndpointType]
	watchOf := func(names ...string) (*watch, func()) {
		// A request answering a response that held the names at their
		// versions (nothing to send): the watch stays open.
		sub := newSotwSub(names)
		sub.held.complete = false
		held := names
		if len(names) == 0 {
			held = []string{"a", "b", "c"} // the wildcard's
		}
		for _, n := range held {
			if e, ok := ts.Resources[n]; ok {
				sub.held.versions.put(n, e.Version)
			}
		}
		req := &discovery.DiscoveryRequest{TypeUrl: EndpointType, ResourceNames: names, VersionInfo: "1", ResponseNonce: "1"}
		cancel, err := c.watchSotw(req, sub, sotwQueue{ch: make(chan *sotwResponse, 1)})
		if err != nil {
			t.Fatal(err)
		}
		var w *watch
		for o := range ts.watches {
			if w == nil || o.id > w.id {
				w = o
			}
		}
		return w, cancel
	}
	wa, cancelA := watchOf("a")
	wab, cancelAB := watchOf("a", "b")
	wide, cancelWide := watchOf("a", "b", "c")
	wild, cancelWild := watchOf()
	if len(ts.watches) != 4 {
		t.Fatalf("%d watches open, want 4", len(ts.watches))
	}
	for _, tc := range []struct {
		changed []string
		want    []*watch
	}{
		{[]string{"a"}, []*watch{wa, wab, wide, wild}},
		{[]string{"b"}, []*watch{wab, wide, wild}},
		{[]string{"c", "d"}, []*watch{wide, wild}},
		{[]string{"a", "b"}, []*watch{wa, wab, wide, wild}},
	} {
		c.mu.Lock()
		got := ts.interest.woken(tc.changed)
		c.mu.Unlock()
		if !slices.Equal(got, tc.want) {
			t.Errorf("a commit of %q wakes %v, want %v", tc.changed, ids(got), ids(tc.want))
		}
	}
	for _, cancel := range []func(){cancelA, cancelAB, cancelWide, cancelWild} {
		cancel()
	}
	if len(ts.interest.broad)+len(ts.interest.byName) != 0 {
		t.Fatalf("cancelled watches left in the index: %d broad, %d names", len(ts.interest.broad), len(ts.interest.byName))
	}
}

func ids(ws []*watch) []uint64 {
	var out []uint64
	for _, w := range ws {
		out = append(out, w.id)
	}
	return out
}
