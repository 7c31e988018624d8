package xds

import (
	"fmt"
	"testing"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/xdsbridge/xdsbridge/xds/store"
)

// TestSotwPartsFollowTheRest: a sotw client's first sync split by the
// size bound is checked in full once; each ACK of a part looks at the
// names changed since and at the rest the part left, from where it ends,
// so every part looks at about its own names. Each name goes once, in
// order, and a change to a name already sent goes with the next part.
func TestSotwPartsFollowTheRest(t *testing.T) {
	const services = 2000
	c, names := cacheOfAssignments(t, services, 4096)
	name := func(i int) string { return names[i] }
	s := newDiffSotwStream(c, 1)
	// No names: the legacy wildcard, whose parts are of the cache's bound.
	s.request(t, &discovery.DiscoveryRequest{TypeUrl: EndpointType})
	sent := map[string]int{}
	last := ""
	parts := 0
	var prevRest []string
	for {
		got := s.takeAll()
		if len(got) == 0 {
			break
		}
		r := got[0]
		parts++
		for _, a := range r.Resources {
			var la endpoint.ClusterLoadAssignment
			if err := a.UnmarshalTo(&la); err != nil {
				t.Fatal(err)
			}
			n := la.GetClusterName()
			sent[n]++
			if sent[n] == 1 && n < last {
				t.Fatalf("part %d: %s after %s", parts, n, last)
			}
			last = max(last, n)
		}
		if parts == 3 {
			// A name of the first part changes: it goes with the next.
			if err := c.Apply(store.Change{TypeURL: EndpointType, Upserts: []store.Resource{testAssignment(name(0), 1)}}); err != nil {
				t.Fatal(err)
			}
		}
		s.request(t, &discovery.DiscoveryRequest{TypeUrl: EndpointType, ResponseNonce: r.Nonce, VersionInfo: r.VersionInfo})
		c.lock()
		w := c.streams[s.key].types.at(EndpointType).last
		full, looked, restNames := w.ss.full, len(w.ss.names), w.ss.rest
		c.unlock()
		rest := len(restNames)
		// The rest a part leaves is the tail of the one before, not a
		// copy: walked to the bound, not merged whole.
		if len(prevRest) > 0 && rest > 0 && &restNames[0] != &prevRest[len(prevRest)-rest] {
			t.Fatalf("the ACK of part %d: the rest is not the tail of the one before", parts)
		}
		prevRest = restNames
		if full {
			t.Fatalf("the ACK of part %d checks in full", parts)
		}
		if left := services - len(sent); rest != left || looked > 1 {
			t.Fatalf("the ACK of part %d: rest of %d names, %d changed since; want %d and at most 1", parts, rest, looked, left)
		}
	}
	if parts < 20 {
		t.Fatalf("%d parts: the bound did not split the sync", parts)
	}
	if len(sent) != services {
		t.Fatalf("%d of %d names sent", len(sent), services)
	}
	if sent[name(0)] != 2 {
		t.Fatalf("%s sent %d times, want 2 (once changed)", name(0), sent[name(0)])
	}
	for n, k := range sent {
		if k != 1 && n != name(0) {
			t.Fatalf("%s sent %d times", n, k)
		}
	}
}

// cacheOfAssignments returns a ready cache of n assignments c00000,
// c00001… at version 0, responses bound to maxBytes, and their names in
// order.
func cacheOfAssignments(t *testing.T, n, maxBytes int) (*Cache, []string) {
	t.Helper()
	c := NewCache(WithTypes(EndpointType), WithMaxResponseBytes(maxBytes))
	var res []store.Resource
	var names []string
	for i := range n {
		names = append(names, fmt.Sprintf("c%05d", i))
		res = append(res, testAssignment(names[i], 0))
	}
	if err := c.Apply(store.Change{TypeURL: EndpointType, Upserts: res}); err != nil {
		t.Fatal(err)
	}
	c.MarkReady()
	return c, names
}
