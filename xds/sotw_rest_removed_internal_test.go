package xds

import (
	"fmt"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"

	"github.com/xdsbridge/xdsbridge/xds/store"
)

// TestSotwRestDropsDeletedNames: a restricted wildcard sotw EDS client
// (its version_info is computed from its state, sotwVersion) holds svc-9,
// which is deleted while its watch is open: the pass that finds it no
// longer held sends nothing (sotw cannot remove an assignment), and the
// commit that wakes the watch next changes every other name, so its
// response is cut by the bound, and so is the part that follows. Then
// svc-9 comes back, after the names of the rest. Each response, version_info included, is the one a full check on
// every request sends (before the rest, the cut response left the state
// incomplete, and the next request's full check dropped svc-9; kept
// complete with its rest, the state keeps svc-9, deleted, and counts its
// new version in the version_info of parts that do not carry it).
func TestSotwRestDropsDeletedNames(t *testing.T) {
	name := func(i int) string { return fmt.Sprintf("svc-%d", i) }
	var caches [2]*Cache
	var s [2]*diffSotwStream
	for k := range caches {
		caches[k] = NewCache(WithTypes(EndpointType), WithMaxResponseBytes(400))
		var res []store.Resource
		for i := range 10 {
			res = append(res, testAssignment(name(i), 0))
		}
		if err := caches[k].Apply(store.Change{TypeURL: EndpointType, Upserts: res}); err != nil {
			t.Fatal(err)
		}
		caches[k].MarkReady()
		s[k] = newDiffSotwStream(caches[k], 1)
		s[k].everyRequest = k == 1 // the reference: a full check on every request
		caches[k].openStream(s[k].key, &visibility{patterns: []string{"svc-*"}})
	}
	apply := func(ch store.Change) {
		for _, c := range caches {
			cp := store.Change{TypeURL: ch.TypeURL, Deletes: ch.Deletes}
			for _, u := range ch.Upserts {
				u.Msg = proto.Clone(u.Msg)
				cp.Upserts = append(cp.Upserts, u)
			}
			if err := c.Apply(cp); err != nil {
				t.Fatal(err)
			}
		}
	}
	// take compares the responses queued since and reports how many.
	take := func(what string) int {
		a, b := s[0].takeAll(), s[1].takeAll()
		if len(a) != len(b) {
			t.Fatalf("%s: %d responses, a full check sends %d", what, len(a), len(b))
		}
		for i := range a {
			if !proto.Equal(a[i], b[i]) {
				t.Fatalf("%s: response\n%v\na full check sends\n%v", what, a[i], b[i])
			}
			for k := range s {
				s[k].lastVersion[EndpointType] = a[i].GetVersionInfo()
			}
		}
		return len(a)
	}
	ack := func() {
		for k := range s {
			s[k].request(t, &discovery.DiscoveryRequest{TypeUrl: EndpointType,
				ResponseNonce: s[k].lastNonce[EndpointType], VersionInfo: s[k].lastVersion[EndpointType]})
		}
	}
	// The first sync, in parts, each ACKed; the last ACK's watch stays open.
	ack()
	parts := 0
	for take(fmt.Sprintf("first sync, part %d", parts+1)) > 0 {
		parts++
		ack()
	}
	if parts < 3 {
		t.Fatalf("first sync in %d parts: the bound did not split it", parts)
	}
	apply(store.Change{TypeURL: EndpointType, Deletes: []string{name(9)}})
	if n := take("svc-9 deleted"); n != 0 {
		t.Fatalf("svc-9 deleted: %d responses, want none (sotw cannot remove an assignment)", n)
	}
	var ups []store.Resource
	for i := range 9 {
		ups = append(ups, testAssignment(name(i), 1))
	}
	apply(store.Change{TypeURL: EndpointType, Upserts: ups})
	if take("every other name changed") != 1 {
		t.Fatal("every other name changed: no response")
	}
	ack()
	if take("every other name changed, part 2") != 1 {
		t.Fatal("every other name changed: no second part")
	}
	apply(store.Change{TypeURL: EndpointType, Upserts: []store.Resource{testAssignment(name(9), 2)}})
	for i := 0; ; i++ {
		ack()
		if take(fmt.Sprintf("svc-9 back, part %d", i+2)) == 0 {
			break
		}
	}
}
