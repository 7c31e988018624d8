package xds

import (
	"hash/maphash"
	"maps"
	"slices"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
)

// TestDeriveAddedKeepsNoList: the accounting hands deriveAdded a list of
// hashes it then reuses for the next request (addsPool); the set derived,
// and the derivation remembered by its arguments, must not read that list
// again. The table's hash is constant, so that every list of as many
// hashes has the same call key and only the arguments kept tell the
// derivations apart.
func TestDeriveAddedKeepsNoList(t *testing.T) {
	tab := newSetTable(func(uint64) uint64 { return 0 })
	list := []uint64{3, 4, 5}
	first := tab.empty.deriveAdded(list)
	copy(list, []uint64{7, 8, 9}) // the list reused for another request
	if got := slices.Sorted(maps.Keys(first.m)); !slices.Equal(got, []uint64{3, 4, 5}) {
		t.Fatalf("the set derived holds %v after its list was reused, want [3 4 5]", got)
	}
	second := tab.empty.deriveAdded(list)
	if got := slices.Sorted(maps.Keys(second.m)); !slices.Equal(got, []uint64{7, 8, 9}) {
		t.Errorf("deriving [7 8 9] with the reused list gave %v", got)
	}
	if again := tab.empty.deriveAdded([]uint64{3, 4, 5}); again != first {
		t.Errorf("deriving [3 4 5] again gave %v, not the set derived first", slices.Sorted(maps.Keys(again.m)))
	}
	_ = first.m // first kept alive to here, so that its derivation is remembered
}

// TestSubscribeOnlyReusedListsAccountEachRequest: streams applying first
// requests one after another, the list of added hashes reused from one to
// the next (addsPool), each hold the set of their own names, charged
// their own bytes.
func TestSubscribeOnlyReusedListsAccountEachRequest(t *testing.T) {
	g := newGuard(Limits{}.WithDefaults(), newGuardMetrics())
	sets := [][]string{{"a", "b", "c"}, {"dd", "ee", "ff"}, {"a", "b"}, {"g", "h", "i", "j"}}
	var accts []*streamAcct
	for _, names := range sets {
		a := newTestStreamAcct(g)
		accts = append(accts, a)
		b, err := proto.Marshal(&discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResourceNamesSubscribe: names})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.checkWire(&discovery.DeltaDiscoveryRequest{}, b); err != nil {
			t.Fatal(err)
		}
	}
	for i, a := range accts {
		tn := a.types.at(EndpointType)
		bytes := 0
		for _, n := range sets[i] {
			bytes += len(n)
			if !tn.set.has(maphash.String(g.seed, n)) {
				t.Errorf("stream %d: %q not in its set", i, n)
			}
		}
		if tn.set.len() != len(sets[i]) || tn.bytes != bytes {
			t.Errorf("stream %d: a set of %d names of %d bytes; want %d of %d", i, tn.set.len(), tn.bytes, len(sets[i]), bytes)
		}
	}
	for _, a := range accts {
		a.release()
	}
}

// TestSubscribeOnlyRememberedStepReadsNoSet: a request that only
// subscribes, with the same names as a derivation the stream's set
// remembers (a fleet's next step), is applied from the remembered result,
// without a lookup in the set. The set's map is made to disagree with
// what it remembers (it holds "c", which the derivation added), so that
// the result tells which of the two was read: the remembered step, two
// names added; a lookup would find "c" subscribed already.
func TestSubscribeOnlyRememberedStepReadsNoSet(t *testing.T) {
	g := newGuard(Limits{}.WithDefaults(), newGuardMetrics())
	tab := newSetTable(func(h uint64) uint64 { return h })
	hashes := func(names ...string) []uint64 {
		var hs []uint64
		for _, n := range names {
			hs = append(hs, maphash.String(g.seed, n))
		}
		return hs
	}
	base := tab.empty.derive(hashes("a", "b"), nil)
	step := base.derive(hashes("c", "d"), nil)
	base.m = map[uint64]struct{}{hashes("b")[0]: {}, hashes("c")[0]: {}}

	a := newTestStreamAcct(g)
	a.types.set(EndpointType, &typeNames{set: base, bytes: 2})
	b, err := proto.Marshal(&discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResourceNamesSubscribe: []string{"c", "d"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.checkWire(&discovery.DeltaDiscoveryRequest{}, b); err != nil {
		t.Fatal(err)
	}
	tn := a.types.at(EndpointType)
	if tn.set != step || a.names.Load() != 2 || tn.bytes != 4 {
		t.Errorf("the stream holds %v (%d names added, %d bytes); want the remembered step %v (2 names added, 4 bytes)",
			slices.Sorted(maps.Keys(tn.set.m)), a.names.Load(), tn.bytes, slices.Sorted(maps.Keys(step.m)))
	}
	a.release()
}
