package xds

import (
	"fmt"
	"testing"
	"unsafe"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/xdsbridge/xdsbridge/xds/store"
)

// TestDeltaPassesReuseTheirRoomCleared: the passes of a first sync in parts
// collect the names they send in one room the cache keeps between them,
// not in one made per pass, and the room holds no name once a pass is
// done.
func TestDeltaPassesReuseTheirRoomCleared(t *testing.T) {
	c := NewCache(WithTypes(EndpointType), WithMaxResponseBytes(2000))
	var ch store.Change
	ch.TypeURL = EndpointType
	names := make([]string, 300)
	for i := range names {
		names[i] = fmt.Sprintf("svc-%03d", i)
		ch.Upserts = append(ch.Upserts, store.Resource{Name: names[i], Msg: &endpoint.ClusterLoadAssignment{ClusterName: names[i]}})
	}
	if err := c.Apply(ch); err != nil {
		t.Fatal(err)
	}
	c.MarkReady()
	d := NewDeltaDriver(c, 4)
	if _, err := d.Watch(&discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResourceNamesSubscribe: names}); err != nil {
		t.Fatal(err)
	}
	var room *string
	parts, sent := 0, 0
	for {
		r := d.Take()
		if r == nil {
			break
		}
		parts++
		sent += len(r.GetResources())
		b := c.passNames
		if len(b) != 0 || cap(b) == 0 {
			t.Fatalf("part %d: the cache keeps room of %d names holding %d", parts, cap(b), len(b))
		}
		for i, n := range b[:cap(b)] {
			if n != "" {
				t.Fatalf("part %d: the room holds %q at %d after the pass", parts, n, i)
			}
		}
		if room == nil {
			room = unsafe.SliceData(b)
		} else if unsafe.SliceData(b) != room {
			t.Fatalf("part %d: the pass made room of its own", parts)
		}
		if _, err := d.Watch(&discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResponseNonce: r.GetNonce()}); err != nil {
			t.Fatal(err)
		}
	}
	if parts < 3 || sent != len(names) {
		t.Fatalf("%d names sent in %d parts, want %d in 3 or more", sent, parts, len(names))
	}
}
