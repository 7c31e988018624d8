package xds

import (
	"reflect"
	"slices"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/xdsbridge/xdsbridge/xds/store"
)

// TestSotwClientsOfTheSameNamesShareTheirState: sotw clients that list
// the same assignments, in the same order, and are sent them (in parts)
// share their subscription's set, the list it was read from and the base
// of the versions they hold; after a change each holds the one name
// changed on its own, and a client listing other names shares none of it.
func TestSotwClientsOfTheSameNamesShareTheirState(t *testing.T) {
	const services = 400
	c, names := cacheOfAssignments(t, services, 4096)
	name := func(i int) string { return names[i] }
	sync := func(s *diffSotwStream, names []string) {
		t.Helper()
		s.request(t, &discovery.DiscoveryRequest{TypeUrl: EndpointType, ResourceNames: slices.Clone(names)})
		for {
			got := s.takeAll()
			if len(got) == 0 {
				return
			}
			r := got[len(got)-1]
			s.request(t, &discovery.DiscoveryRequest{TypeUrl: EndpointType, ResourceNames: slices.Clone(names), ResponseNonce: r.Nonce, VersionInfo: r.VersionInfo})
		}
	}
	a, b, other := newDiffSotwStream(c, 1), newDiffSotwStream(c, 2), newDiffSotwStream(c, 3)
	sync(a, names)
	sync(b, names)
	sync(other, names[:services/2])
	same := func(x, y any) bool { return reflect.ValueOf(x).UnsafePointer() == reflect.ValueOf(y).UnsafePointer() }
	sa, sb, so := a.subs[EndpointType], b.subs[EndpointType], other.subs[EndpointType]
	if sa.names != sb.names || sa.names.len() != services {
		t.Errorf("the subscriptions of the same %d names are different sets (%d and %d names)", services, sa.names.len(), sb.names.len())
	}
	if !same(sa.listed, sb.listed) {
		t.Error("the same list of names is held twice")
	}
	if sa.names == so.names || same(sa.listed, so.listed) {
		t.Error("a client listing other names shares the subscription")
	}
	va, vb, vo := sa.held.versions, sb.held.versions, so.held.versions
	if va.len() != services || vb.len() != services || vo.len() != services/2 {
		t.Fatalf("held %d, %d and %d versions, want %d, %d and %d", va.len(), vb.len(), vo.len(), services, services, services/2)
	}
	if va.base == nil || !same(va.base, vb.base) || len(va.over) > 0 || len(vb.over) > 0 {
		t.Errorf("the states of the same versions are not one base (bases %d and %d names, %d and %d over)", len(va.base), len(vb.base), len(va.over), len(vb.over))
	}
	if same(va.base, vo.base) {
		t.Error("a client holding other names shares the base")
	}
	// The record of the assignments sent is the subscription's set.
	c.lock()
	ea, eb := c.streams[streamKey{false, 1}].edsSent, c.streams[streamKey{false, 2}].edsSent
	c.unlock()
	if ea.set != sa.names || eb.set != sb.names || ea.extra.len() != 0 || eb.extra.len() != 0 {
		t.Errorf("the assignments sent are recorded apart: sets of %d and %d names (the subscription's: %v, %v), %d and %d names beside", ea.set.len(), eb.set.len(), ea.set == sa.names, eb.set == sb.names, ea.extra.len(), eb.extra.len())
	}
	if err := c.Apply(store.Change{TypeURL: EndpointType, Upserts: []store.Resource{testAssignment(name(7), 1)}}); err != nil {
		t.Fatal(err)
	}
	sync(a, names)
	sync(b, names)
	va, vb = a.subs[EndpointType].held.versions, b.subs[EndpointType].held.versions
	if !same(va.base, vb.base) || len(va.over) != 1 || len(vb.over) != 1 {
		t.Errorf("after one change: bases shared %v, over %d and %d names, want shared and 1 each", same(va.base, vb.base), len(va.over), len(vb.over))
	}
	if va.at(name(7)) == vb.base[name(7)] || va.at(name(7)) != vb.at(name(7)) {
		t.Errorf("after one change: %s held at %q and %q (base %q)", name(7), va.at(name(7)), vb.at(name(7)), vb.base[name(7)])
	}
}
