package xds

import (
	"fmt"
	"slices"
	"testing"
	"unsafe"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/xdsbridge/xdsbridge/xds/store"
)

// TestDeltaSubscribeLooksAtTheSubscribedCopy: a request that only
// subscribes to names (an Envoy's EDS request after each CDS part of its
// first sync) looks at the sorted copy of them its state keeps, not at
// another; with names changed since the client's generation too, it
// looks at both.
func TestDeltaSubscribeLooksAtTheSubscribedCopy(t *testing.T) {
	c := NewCache(WithTypes(EndpointType))
	put := func(names ...string) {
		var ch store.Change
		ch.TypeURL = EndpointType
		for _, n := range names {
			ch.Upserts = append(ch.Upserts, store.Resource{Name: n, Msg: &endpoint.ClusterLoadAssignment{ClusterName: n + fmt.Sprint(c.types[EndpointType].Gen)}})
		}
		if err := c.Apply(ch); err != nil {
			t.Fatal(err)
		}
	}
	var names []string
	for i := range 100 {
		names = append(names, fmt.Sprintf("svc-%03d", i))
	}
	put(names...)
	ts := c.types[EndpointType]
	subs := slices.Clone(names[40:60])
	slices.Reverse(subs)
	subs = append(subs, names[45]) // a name twice

	ds := deltaState{complete: true, gen: ts.Gen}
	ds.newSub = slices.Compact(slices.Sorted(slices.Values(subs)))
	ds.lookAt(ts, nil, nil, "", false, ds.newSub, nil)
	if !slices.Equal(ds.seq, names[40:60]) {
		t.Fatalf("looks at %q, want %q", ds.seq, names[40:60])
	}
	if unsafe.SliceData(ds.seq) != unsafe.SliceData(ds.newSub) {
		t.Error("the names looked at are another copy of those subscribed")
	}

	gen := ts.Gen
	put(names[0], names[50])
	ds = deltaState{complete: true, gen: gen}
	ds.newSub = slices.Compact(slices.Sorted(slices.Values(subs)))
	ds.lookAt(ts, nil, nil, "", false, ds.newSub, nil)
	want := append([]string{names[0]}, names[40:60]...)
	if !slices.Equal(ds.seq, want) {
		t.Fatalf("with names changed: looks at %q, want %q", ds.seq, want)
	}
}
