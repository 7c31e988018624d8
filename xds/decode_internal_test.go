package xds

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"unsafe"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/xdsbridge/xdsbridge/xds/store"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// entryBytes is a map entry with the given fields appended raw.
func entryBytes(parts ...func([]byte) []byte) []byte {
	var e []byte
	for _, p := range parts {
		e = p(e)
	}
	return protowire.AppendBytes(protowire.AppendTag(nil, deltaInitialVersions, protowire.BytesType), e)
}

func str(num protowire.Number, s string) func([]byte) []byte {
	return func(b []byte) []byte {
		return protowire.AppendString(protowire.AppendTag(b, num, protowire.BytesType), s)
	}
}

// FuzzDecode: the delta request decoder gives what proto.Unmarshal gives,
// message and refusal alike, for any bytes.
func FuzzDecode(f *testing.F) {
	req := &discovery.DeltaDiscoveryRequest{
		Node:                     &core.Node{Id: "envoy-1", Cluster: "edge"},
		TypeUrl:                  EndpointType,
		ResourceNamesSubscribe:   []string{"a", "b"},
		ResourceNamesUnsubscribe: []string{"c"},
		InitialResourceVersions:  map[string]string{"a": "1", "b": "2", "": ""},
		ResponseNonce:            "7",
		ErrorDetail:              &status.Status{Code: 3, Message: "bad"},
	}
	full, _ := proto.MarshalOptions{Deterministic: true}.Marshal(req)
	f.Add(full)
	f.Add(full[:len(full)-3])
	noMap, _ := proto.Marshal(&discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType, ResponseNonce: "1"})
	f.Add(noMap)
	// Entries: a duplicate key (the last wins), no key or value, an
	// unknown field, a key of the wrong wire type, invalid UTF-8, a field
	// 5 that is a varint, and the map between other fields.
	var odd []byte
	odd = append(odd, entryBytes(str(1, "x"), str(2, "1"))...)
	odd = append(odd, entryBytes(str(2, "2"), str(1, "x"))...)
	odd = append(odd, entryBytes()...)
	odd = append(odd, entryBytes(str(1, "y"), str(9, "?"), str(2, "3"))...)
	odd = append(odd, entryBytes(func(b []byte) []byte {
		return protowire.AppendVarint(protowire.AppendTag(b, 1, protowire.VarintType), 5)
	}, str(2, "4"))...)
	odd = protowire.AppendVarint(protowire.AppendTag(odd, deltaInitialVersions, protowire.VarintType), 1)
	odd = append(odd, noMap...)
	odd = append(odd, entryBytes(str(1, "z"), str(2, "5"))...)
	f.Add(odd)
	f.Add(entryBytes(str(1, "\xff"), str(2, "1")))
	f.Add(entryBytes(str(1, "k"), str(2, "\xc3")))
	f.Add(append(entryBytes(str(1, "k")), 0x2a, 0x05, 0x0a))
	// A key or value repeated within an entry: the last one is the
	// entry's, and every one must be UTF-8.
	f.Add(append(entryBytes(str(1, "x"), str(1, "a"), str(2, "1")), entryBytes(str(1, "b"), str(2, "2"), str(2, "1"))...))
	f.Add(entryBytes(str(1, "\xff"), str(1, "a"), str(2, "1")))
	f.Add(entryBytes(str(1, "a"), str(2, "\xc3"), str(2, "1")))
	// Entries at the bounds of the decoder's common form (key then value,
	// lengths of one byte, nothing else): a key of 127 and of 128 bytes,
	// a value then a key, a field after the value.
	f.Add(entryBytes(str(1, strings.Repeat("k", 127)), str(2, "1")))
	f.Add(entryBytes(str(1, strings.Repeat("k", 128)), str(2, "1")))
	f.Add(entryBytes(str(2, "1"), str(1, "a")))
	f.Add(entryBytes(str(1, "a"), str(2, "1"), str(3, "")))
	// Names: invalid UTF-8, a name of the wrong wire type, names before
	// the type URL.
	f.Add(str(deltaSubscribe, "a\xff")(nil))
	f.Add(str(deltaUnsubscribe, "\xc3")(nil))
	f.Add(protowire.AppendVarint(protowire.AppendTag(str(deltaSubscribe, "a")(nil), deltaSubscribe, protowire.VarintType), 3))
	f.Add(str(deltaTypeURL, EndpointType)(append(str(deltaSubscribe, "b")(nil), entryBytes(str(1, "x"), str(2, "1"))...)))

	// More names and entries than the decoder looks up at once: served,
	// unknown, stale, repeated across the batches' bounds, and one not
	// UTF-8 or malformed after several batches.
	long := str(deltaTypeURL, EndpointType)(nil)
	names := []string{"a", "b", "x", "", "k", "zz", "a", "y"}
	for i := range 80 {
		n := names[i%len(names)]
		long = str(deltaSubscribe, n)(long)
		long = append(long, entryBytes(str(1, n), str(2, []string{"1", "2", "1"}[i%5%3]))...)
		if i%7 == 0 {
			long = str(deltaUnsubscribe, names[(i+3)%len(names)])(long)
		}
	}
	f.Add(long)
	f.Add(str(deltaSubscribe, "b\xff")(slices.Clone(long)))
	f.Add(append(entryBytes(str(1, "a"), str(2, "\xc3")), long...))
	f.Add(append(slices.Clone(long), 0x2a, 0x05, 0x0a))

	// ACKs (decodeACK): a type URL repeated, the first not UTF-8; a nonce
	// not UTF-8; an empty nonce; a nonce of the wrong wire type; an error
	// detail; a type URL the server does not serve.
	f.Add(str(deltaNonce, "3")(str(deltaTypeURL, EndpointType)(str(deltaTypeURL, "\xff")(nil))))
	f.Add(str(deltaNonce, "\xc3")(str(deltaTypeURL, ClusterType)(nil)))
	f.Add(str(deltaNonce, "")(str(deltaTypeURL, RouteType)(nil)))
	f.Add(protowire.AppendVarint(protowire.AppendTag(str(deltaTypeURL, ListenerType)(nil), deltaNonce, protowire.VarintType), 6))
	f.Add(str(7, "\x10\x03")(str(deltaNonce, "4")(str(deltaTypeURL, EndpointType)(nil))))
	f.Add(str(deltaNonce, "5")(str(deltaTypeURL, "type.example/other")(nil)))

	// The store's names and versions, which the decoder hands out as its
	// own strings.
	x := store.NewWireIndex()
	for _, u := range []string{EndpointType, ClusterType} {
		indexEntries(x, u, &store.Entry{Name: "a", Version: "1"}, &store.Entry{Name: "b", Version: "1"}, &store.Entry{Name: "x", Version: "1"}, &store.Entry{Name: "", Version: "1"},
			// Not UTF-8: not the decoder's to hand out.
			&store.Entry{Name: "\xff", Version: "1"}, &store.Entry{Name: "k", Version: "\xc3"}, &store.Entry{Name: "a\xff", Version: "1"})
	}
	g := newGuard(Limits{}.WithDefaults(), newGuardMetrics())
	f.Fuzz(func(t *testing.T, b []byte) {
		decodesAsUnmarshal(t, b, x, g)
	})
}

// decodesAsUnmarshal checks that b decodes to what proto.Unmarshal
// decodes, or is refused as it refuses it, with and without the wire
// index x, a stream's type and the comparison of a resume; and that the
// limits' pass (on guard g) finds what scanDelta finds.
func decodesAsUnmarshal(t *testing.T, b []byte, x *store.WireIndex, g *guard) {
	t.Helper()
	want := &discovery.DeltaDiscoveryRequest{}
	wantErr := proto.Unmarshal(b, want)
	// The limits' pass finds what scanDelta finds.
	if sc, ok := scanDelta(b); ok {
		var got deltaScan
		a := newTestStreamAcct(g)
		if a.checkWireScan(&discovery.DeltaDiscoveryRequest{}, b, &got) == nil &&
			(got.subs != sc.subs || got.unsubs != sc.unsubs || got.entries != sc.entries || string(got.typeURL) != string(sc.typeURL) || got.other < sc.other || !got.valid) {
			t.Fatalf("the limits' pass found %+v, scanDelta %+v", got, sc)
		}
		a.release()
	}
	for _, wire := range []*store.WireIndex{nil, x} {
		for _, defType := range [][]byte{nil, []byte(EndpointType)} {
			for _, compare := range []bool{false, true} {
				got := &discovery.DeltaDiscoveryRequest{}
				var r *resumedVersions
				var gotErr error
				if compare {
					if sc, ok := scanDelta(b); ok {
						r, gotErr = decodeScanned(b, sc, got, wire, defType, true)
					} else {
						gotErr = decodeDeltaRequest(b, got, wire, defType)
					}
				} else {
					gotErr = decodeDeltaRequest(b, got, wire, defType)
				}
				if (gotErr != nil) != (wantErr != nil) {
					t.Fatalf("error %v, proto.Unmarshal's %v", gotErr, wantErr)
				}
				if wantErr != nil {
					continue
				}
				// The versions found current join the map's.
				if r != nil {
					// Never a name of both.
					for _, e := range r.cur {
						if v, ok := got.InitialResourceVersions[e.Name]; ok {
							t.Fatalf("%q current at %q, and in the map at %q", e.Name, e.Version, v)
						}
					}
					h := &deltaHeld{versions: got.InitialResourceVersions, resumed: r}
					h.explicit()
					got.InitialResourceVersions = h.versions
				}
				if !proto.Equal(got, want) {
					t.Fatalf("decoded (compared %v)\n%v\nproto.Unmarshal decodes\n%v", compare, got, want)
				}
			}
		}
	}
}

// indexEntries puts entries of typeURL in x, as a commit of them does
// (each its own slot).
func indexEntries(x *store.WireIndex, typeURL string, entries ...*store.Entry) {
	ts := &store.Type{URL: typeURL, Resources: map[string]*store.Entry{}}
	var names []string
	for i, e := range entries {
		e.Slot = int32(i)
		ts.Resources[e.Name] = e
		names = append(names, e.Name)
	}
	x.Follow(ts, names)
}

// TestDecodeResumeCompared: a resume's versions that are the ones served
// are kept as the store's entries, the others in the map; a key repeated
// counts as its last entry, as in the map proto.Unmarshal makes.
func TestDecodeResumeCompared(t *testing.T) {
	x := store.NewWireIndex()
	a := &store.Entry{Name: "a", Version: "1"}
	b := &store.Entry{Name: "b", Version: "1"}
	c := &store.Entry{Name: "c", Version: "1"}
	indexEntries(x, EndpointType, a, b, c)
	entry := func(k, v string) []byte { return entryBytes(str(1, k), str(2, v)) }
	decode := func(t *testing.T, parts ...[]byte) (*discovery.DeltaDiscoveryRequest, *resumedVersions) {
		t.Helper()
		wire := str(deltaTypeURL, EndpointType)(nil)
		for _, p := range parts {
			wire = append(wire, p...)
		}
		want := &discovery.DeltaDiscoveryRequest{}
		if err := proto.Unmarshal(wire, want); err != nil {
			t.Fatal(err)
		}
		sc, _ := scanDelta(wire)
		m := &discovery.DeltaDiscoveryRequest{}
		r, err := decodeScanned(wire, sc, m, x, nil, true)
		if err != nil {
			t.Fatal(err)
		}
		got := proto.Clone(m).(*discovery.DeltaDiscoveryRequest)
		h := &deltaHeld{versions: got.InitialResourceVersions, resumed: r}
		h.explicit()
		got.InitialResourceVersions = h.versions
		if !proto.Equal(got, want) {
			t.Fatalf("decoded with the entries\n%v\nwant\n%v", got, want)
		}
		return m, r
	}
	names := func(r *resumedVersions) (out []string) {
		if r != nil {
			for _, e := range r.cur {
				out = append(out, e.Name)
			}
		}
		slices.Sort(out)
		return out
	}

	// Current, stale, not served.
	m, r := decode(t, entry("a", "1"), entry("b", "0"), entry("z", "1"), str(deltaSubscribe, "a")(nil), str(deltaSubscribe, "b")(nil))
	if got := names(r); !slices.Equal(got, []string{"a"}) {
		t.Errorf("entries %v, want [a]", got)
	}
	if want := map[string]string{"b": "0", "z": "1"}; !maps.Equal(m.InitialResourceVersions, want) {
		t.Errorf("map %v, want %v", m.InitialResourceVersions, want)
	}
	if r.subsCur {
		t.Error("subscribes to the entries: b is not one")
	}
	// Subscribed to exactly the entries' names, repeated.
	_, r = decode(t, str(deltaSubscribe, "b")(nil), entry("a", "1"), entry("b", "1"), str(deltaSubscribe, "a")(nil), str(deltaSubscribe, "b")(nil))
	if !r.subsCur || !slices.Equal(names(r), []string{"a", "b"}) {
		t.Errorf("entries %v, subscribed to them %v; want [a b], true", names(r), r.subsCur)
	}
	// A stale version, then the current one: the current one.
	m, r = decode(t, entry("a", "0"), entry("a", "1"))
	if !slices.Equal(names(r), []string{"a"}) || len(m.InitialResourceVersions) != 0 {
		t.Errorf("entries %v, map %v; want [a], none", names(r), m.InitialResourceVersions)
	}
	// The current one, then a stale one: the stale one, in the map with
	// every other.
	m, r = decode(t, entry("b", "1"), entry("a", "1"), entry("a", "0"), entry("c", "1"))
	if r != nil || !maps.Equal(m.InitialResourceVersions, map[string]string{"a": "0", "b": "1", "c": "1"}) {
		t.Errorf("entries %v, map %v; want none, all of them", names(r), m.InitialResourceVersions)
	}
	// Nothing current: no entries.
	if _, r = decode(t, entry("a", "0")); r != nil {
		t.Errorf("entries %v for no current version", names(r))
	}
}

// TestDecodeStoreStrings: a name and version the store serves are
// decoded as the store's strings, from wherever in the request they
// come; others are copies.
func TestDecodeStoreStrings(t *testing.T) {
	x := store.NewWireIndex()
	a := &store.Entry{Name: "svc-a", Version: "v1"}
	indexEntries(x, EndpointType, a)
	req := &discovery.DeltaDiscoveryRequest{
		TypeUrl:                  EndpointType,
		ResourceNamesSubscribe:   []string{"svc-a", "svc-b"},
		ResourceNamesUnsubscribe: []string{"svc-a"},
		InitialResourceVersions:  map[string]string{"svc-a": "v1", "svc-b": "v1"},
	}
	b, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	same := func(s, store string) bool { return unsafe.StringData(s) == unsafe.StringData(store) }
	got := &discovery.DeltaDiscoveryRequest{}
	if err := decodeDeltaRequest(b, got, x, nil); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got, req) {
		t.Fatalf("decoded %v, want %v", got, req)
	}
	if !same(got.ResourceNamesSubscribe[0], a.Name) || !same(got.ResourceNamesUnsubscribe[0], a.Name) {
		t.Error("a name the store serves is a copy")
	}
	if same(got.ResourceNamesSubscribe[1], a.Name) {
		t.Error("a name the store does not serve is the store's")
	}
	for k, v := range got.InitialResourceVersions {
		if want := k == "svc-a"; same(k, a.Name) != want || same(v, a.Version) != want {
			t.Errorf("entry %q: %q: store's key %v, store's version %v; want %v", k, v, same(k, a.Name), same(v, a.Version), want)
		}
	}
	// Of another type, or a stream's default type, none.
	got = &discovery.DeltaDiscoveryRequest{}
	b2, _ := proto.Marshal(&discovery.DeltaDiscoveryRequest{ResourceNamesSubscribe: []string{"svc-a"}})
	if err := decodeDeltaRequest(b2, got, x, []byte(EndpointType)); err != nil || !same(got.ResourceNamesSubscribe[0], a.Name) {
		t.Errorf("stream of the type: %v, store's %v", err, err == nil && same(got.ResourceNamesSubscribe[0], a.Name))
	}
	got = &discovery.DeltaDiscoveryRequest{}
	if err := decodeDeltaRequest(b2, got, x, []byte(ClusterType)); err != nil || same(got.ResourceNamesSubscribe[0], a.Name) {
		t.Errorf("stream of another type: %v, store's %v", err, err == nil && same(got.ResourceNamesSubscribe[0], a.Name))
	}
}

// TestStoreKeepsNameString: every version of a resource keeps the name
// string of its first, the one the decoder hands out and subscription
// sets hold; a name deleted and served again is forgotten, then new.
func TestStoreKeepsNameString(t *testing.T) {
	c := NewCache()
	put := func(port uint32) *store.Entry {
		t.Helper()
		name := string([]byte("svc-a")) // a new string each time
		cla := &endpoint.ClusterLoadAssignment{ClusterName: name, Endpoints: []*endpoint.LocalityLbEndpoints{{
			LbEndpoints: []*endpoint.LbEndpoint{{HostIdentifier: &endpoint.LbEndpoint_Endpoint{Endpoint: &endpoint.Endpoint{
				Address: &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
					Address: "10.0.0.1", PortSpecifier: &core.SocketAddress_PortValue{PortValue: port}}}}}}}}}}}
		if err := c.Apply(store.Change{TypeURL: EndpointType, Upserts: []store.Resource{{Name: name, Msg: cla}}}); err != nil {
			t.Fatal(err)
		}
		return c.types[EndpointType].Resources["svc-a"]
	}
	first := put(80)
	second := put(81)
	if second.Version == first.Version {
		t.Fatal("the second version is the first")
	}
	if unsafe.StringData(second.Name) != unsafe.StringData(first.Name) {
		t.Error("a new version of a resource has a name string of its own")
	}
	var got *store.Entry
	c.store.Wire().Read([]byte(EndpointType), func(t *store.WireType) { got = t.Entry("svc-a") })
	if got != second {
		t.Errorf("the decoder reads %+v, want the version served", got)
	}
	if err := c.Apply(store.Change{TypeURL: EndpointType, Deletes: []string{"svc-a"}}); err != nil {
		t.Fatal(err)
	}
	c.store.Wire().Read([]byte(EndpointType), func(t *store.WireType) { got = t.Entry("svc-a") })
	if got != nil {
		t.Error("the decoder still reads a deleted resource")
	}
}
