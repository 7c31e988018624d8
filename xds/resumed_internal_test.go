package xds

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"

	"github.com/xdsbridge/xdsbridge/xds/store"
)

// TestResumeComparedAnswersAsExplicit: a reconnecting client's first
// request is answered the same whether its initial versions were compared
// with the store while decoded (resumed.go) or kept as a map: for wildcard
// and named subscriptions, versions current, stale, of names not served,
// subscriptions that are or are not the names resumed, an unsubscription
// in the request, and the store changing (a version, a removal, a new
// resource) between the decoding and the watch.
func TestResumeComparedAnswersAsExplicit(t *testing.T) {
	for seed := range uint64(600) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 32))
			typ := EndpointType
			if r.IntN(2) == 0 {
				typ = ClusterType
			}
			universe := make([]string, 5+r.IntN(40))
			for i := range universe {
				universe[i] = fmt.Sprintf("s%03d", i)
			}
			c := NewCache(WithTypes(typ))
			version := 0
			msg := func(n string) proto.Message {
				if typ == ClusterType {
					return &cluster.Cluster{Name: n, AltStatName: fmt.Sprint(version)}
				}
				return &endpoint.ClusterLoadAssignment{ClusterName: fmt.Sprintf("%s-%d", n, version)}
			}
			change := func(p int) {
				version++
				ch := store.Change{TypeURL: typ}
				for _, n := range universe {
					switch x := r.IntN(100); {
					case x < p:
						ch.Upserts = append(ch.Upserts, store.Resource{Name: n, Msg: msg(n)})
					case x < p+p/2:
						ch.Deletes = append(ch.Deletes, n)
					}
				}
				if err := c.Apply(ch); err != nil {
					t.Fatal(err)
				}
			}
			change(70)
			c.MarkReady()

			// Two resumes, the second of the same generation or not.
			for round := range 2 {
				resumeRound(t, r, c, typ, universe, change, round)
			}
		})
	}
}

// decodeResume encodes req and decodes it as a guarded stream does, its
// versions compared with x's (resumed.go).
func decodeResume(t testing.TB, x *store.WireIndex, req *discovery.DeltaDiscoveryRequest) (*discovery.DeltaDiscoveryRequest, *resumedVersions, []byte) {
	t.Helper()
	wire, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	m := &discovery.DeltaDiscoveryRequest{}
	sc, _ := scanDelta(wire)
	r, err := decodeScanned(wire, sc, m, x, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	return m, r, wire
}

// resumeRound is one resume of TestResumeComparedAnswersAsExplicit.
func resumeRound(t *testing.T, r *rand.Rand, c *Cache, typ string, universe []string, change func(int), round int) {
	t.Helper()
	ts := c.types[typ]
	// An Envoy's resume (the names it subscribes to, each at the version
	// served), then changed here and there.
	req := &discovery.DeltaDiscoveryRequest{TypeUrl: typ, InitialResourceVersions: map[string]string{}}
	wild := r.IntN(3) == 0
	for _, n := range universe {
		e, ok := ts.Resources[n]
		if !ok && r.IntN(4) != 0 || round > 0 && r.IntN(3) == 0 {
			continue
		}
		if !wild {
			req.ResourceNamesSubscribe = append(req.ResourceNamesSubscribe, n)
		}
		if ok && r.IntN(8) != 0 {
			req.InitialResourceVersions[n] = e.Version
		}
	}
	for n := range req.InitialResourceVersions {
		switch r.IntN(12) {
		case 0:
			req.InitialResourceVersions[n] = "stale"
		case 1:
			req.InitialResourceVersions[n] = ""
		case 2:
			delete(req.InitialResourceVersions, n)
		}
	}
	if r.IntN(6) == 0 {
		req.InitialResourceVersions["gone"] = "1"
	}
	if len(req.ResourceNamesSubscribe) > 0 && r.IntN(6) == 0 {
		req.ResourceNamesSubscribe = append(req.ResourceNamesSubscribe, "*")
	}
	if r.IntN(6) == 0 {
		req.ResourceNamesSubscribe = append(req.ResourceNamesSubscribe, "other")
	}
	if r.IntN(8) == 0 {
		req.ResourceNamesUnsubscribe = append(req.ResourceNamesUnsubscribe, universe[r.IntN(len(universe))])
	}
	compared, resumed, wire := decodeResume(t, c.store.Wire(), req)
	explicit := &discovery.DeltaDiscoveryRequest{}
	if err := decodeDeltaRequest(wire, explicit, c.store.Wire(), nil); err != nil {
		t.Fatal(err)
	}
	if r.IntN(2) == 0 {
		change(10) // after the decoding, before the watch
	}

	answer := func(m *discovery.DeltaDiscoveryRequest, resumed *resumedVersions) (deltaSub, *discovery.DeltaDiscoveryResponse) {
		t.Helper()
		ch := make(chan *deltaResponse, 2)
		sub := newDeltaSub(m.ResourceNamesSubscribe, m.ResourceNamesUnsubscribe, m.InitialResourceVersions, resumed)
		cancel, err := c.watchDelta(m, sub, deltaQueue{ch: ch})
		if err != nil {
			t.Fatal(err)
		}
		defer cancel()
		select {
		case resp := <-ch:
			return sub, resp.resp
		default:
			return sub, nil
		}
	}
	gotSub, got := answer(compared, resumed)
	wantSub, want := answer(explicit, nil)
	if gotSub.wildcard != wantSub.wildcard || gotSub.allowLegacyWildcard != wantSub.allowLegacyWildcard ||
		!maps.Equal(gotSub.SubscribedResources(), wantSub.SubscribedResources()) || gotSub.grewFrom != wantSub.grewFrom {
		t.Fatalf("round %d: subscribed to %v (wildcard %v), with the versions as a map to %v (wildcard %v)", round,
			slices.Sorted(maps.Keys(gotSub.SubscribedResources())), gotSub.wildcard, slices.Sorted(maps.Keys(wantSub.SubscribedResources())), wantSub.wildcard)
	}
	if (got == nil) != (want == nil) {
		t.Fatalf("round %d: answered %v, with the versions as a map %v", round, got != nil, want != nil)
	}
	if got == nil {
		return
	}
	names := func(resp *discovery.DeltaDiscoveryResponse) (out []string) {
		for _, res := range resp.Resources {
			out = append(out, res.Name+"@"+res.Version)
		}
		return out
	}
	if !slices.Equal(names(got), names(want)) || !slices.Equal(got.RemovedResources, want.RemovedResources) {
		t.Fatalf("round %d: sent %v, removed %v; with the versions as a map: sent %v, removed %v", round,
			names(got), got.RemovedResources, names(want), want.RemovedResources)
	}
}

// TestResumeBeforeReadySubscribesMore: a resume decoded before the cache
// is ready waits; the client's next request subscribes to more names and
// unsubscribes from none, so the state still holds the resume's entries,
// and the answer once ready sends the new names, and nothing the client
// holds current.
func TestResumeBeforeReadySubscribesMore(t *testing.T) {
	c := NewCache(WithTypes(EndpointType))
	var ups []store.Resource
	for _, n := range []string{"a", "b", "c"} {
		ups = append(ups, store.Resource{Name: n, Msg: &endpoint.ClusterLoadAssignment{ClusterName: n}})
	}
	if err := c.Apply(store.Change{TypeURL: EndpointType, Upserts: ups}); err != nil {
		t.Fatal(err)
	}
	ts := c.types[EndpointType]
	decode := func(req *discovery.DeltaDiscoveryRequest) (*discovery.DeltaDiscoveryRequest, *resumedVersions) {
		t.Helper()
		m, r, _ := decodeResume(t, c.store.Wire(), req)
		return m, r
	}
	first, r := decode(&discovery.DeltaDiscoveryRequest{
		TypeUrl:                 EndpointType,
		ResourceNamesSubscribe:  []string{"a", "b"},
		InitialResourceVersions: map[string]string{"a": ts.Resources["a"].Version, "b": ts.Resources["b"].Version},
	})
	if r == nil || !r.subsCur {
		t.Fatalf("resume %v: want its entries, subscribed to exactly", r)
	}
	ch := make(chan *deltaResponse, 2)
	sub := newDeltaSub(first.ResourceNamesSubscribe, first.ResourceNamesUnsubscribe, first.InitialResourceVersions, r)
	cancel, err := c.watchDelta(first, sub, deltaQueue{ch: ch})
	if err != nil {
		t.Fatal(err)
	}
	cancel() // not answered: the cache is not ready
	second, _ := decode(&discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResourceNamesSubscribe: []string{"c"}})
	sub.update(second.ResourceNamesSubscribe, second.ResourceNamesUnsubscribe)
	if _, err := c.watchDelta(second, sub, deltaQueue{ch: ch}); err != nil {
		t.Fatal(err)
	}
	c.MarkReady()
	var resp *deltaResponse
	select {
	case resp = <-ch:
	default:
		t.Fatal("not answered once ready")
	}
	var sent []string
	for _, res := range resp.resp.Resources {
		sent = append(sent, res.Name)
	}
	if !slices.Equal(sent, []string{"c"}) || len(resp.resp.RemovedResources) > 0 {
		t.Errorf("sent %v, removed %v; want [c], none", sent, resp.resp.RemovedResources)
	}
}

// TestResumeSetBySlotsOfItsGeneration: a resume's subscription set is
// found by the slots of its names at the generation decoded; a slot freed
// by a deletion and taken by a new name is another name at the next
// generation.
func TestResumeSetBySlotsOfItsGeneration(t *testing.T) {
	c := NewCache(WithTypes(EndpointType))
	apply := func(ch store.Change) {
		t.Helper()
		ch.TypeURL = EndpointType
		if err := c.Apply(ch); err != nil {
			t.Fatal(err)
		}
	}
	up := func(n string) store.Resource {
		return store.Resource{Name: n, Msg: &endpoint.ClusterLoadAssignment{ClusterName: n}}
	}
	ts := c.types[EndpointType]
	resume := func(n string) []string {
		t.Helper()
		m, r, _ := decodeResume(t, c.store.Wire(), &discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResourceNamesSubscribe: []string{n},
			InitialResourceVersions: map[string]string{n: ts.Resources[n].Version}})
		if r == nil {
			t.Fatal("no version found current")
		}
		sub := newDeltaSub(m.ResourceNamesSubscribe, m.ResourceNamesUnsubscribe, m.InitialResourceVersions, r)
		return slices.Sorted(maps.Keys(sub.SubscribedResources()))
	}
	apply(store.Change{Upserts: []store.Resource{up("a"), up("b")}})
	if got := resume("a"); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("subscribed to %v, want [a]", got)
	}
	slot := ts.Resources["a"].Slot
	apply(store.Change{Deletes: []string{"a"}})
	apply(store.Change{Upserts: []store.Resource{up("c")}})
	if ts.Resources["c"].Slot != slot {
		t.Fatalf("c has slot %d, not a's (%d): the case is not made", ts.Resources["c"].Slot, slot)
	}
	if got := resume("c"); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("subscribed to %v, want [c]", got)
	}
}
