package xds

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// sotwAcctModel is a sotw stream's accounting as a plain model: per type,
// the distinct names of its last request and the bytes of that request
// that are not those names.
type sotwAcctModel struct {
	defType string
	types   map[string]*acctModelType
}

func (m *sotwAcctModel) apply(b []byte) {
	typeURL, namesBytes, extra := "", 0, 0
	set := map[string]bool{}
	ok := fields(b, func(num protowire.Number, v []byte, size int) {
		switch num {
		case sotwTypeURL:
			typeURL = string(v)
		case sotwResourceNames:
			namesBytes += size
			if set[string(v)] {
				extra += size
			}
			set[string(v)] = true
		}
	})
	if !ok {
		return // not well formed: refused, nothing held
	}
	if typeURL == "" {
		typeURL = m.defType
	}
	m.types[typeURL] = &acctModelType{set: set, other: len(b) - namesBytes + extra}
}

func (m *sotwAcctModel) held() (names, bytes int64) {
	for _, tn := range m.types {
		names += int64(1 + len(tn.set))
		bytes += int64(tn.other)
		for n := range tn.set {
			bytes += int64(len(n))
		}
	}
	return names, bytes
}

// randomSotwRequest is a sotw request as clients send them: most often the
// type's last names again (an ACK, with a version and a nonce), else other
// names (some repeated, some not UTF-8), a NACK, a node, or fields twice.
func randomSotwRequest(r *rand.Rand, last map[string][]string) *discovery.DiscoveryRequest {
	types := []string{EndpointType, ClusterType, ""}
	typeURL := types[r.IntN(len(types))]
	req := &discovery.DiscoveryRequest{TypeUrl: typeURL, VersionInfo: fmt.Sprint(r.IntN(3)), ResponseNonce: fmt.Sprint(r.IntN(5))}
	names, ok := last[typeURL]
	if !ok || r.IntN(4) == 0 {
		pool := []string{"a", "b", "cluster-c", "d\xff", "", "eeeeeeeeeeeeeeeeeeeeeeeeeeee"}
		names = nil
		for range r.IntN(8) {
			names = append(names, pool[r.IntN(len(pool))])
		}
		last[typeURL] = names
	}
	req.ResourceNames = slices.Clone(names)
	switch r.IntN(12) {
	case 0:
		req.ErrorDetail = &status.Status{Code: 3, Message: "no"}
	case 1:
		req.Node = &core.Node{Id: "n"}
	case 2:
		req.ResponseNonce = "\xff"
	}
	return req
}

// TestGuardSotwRequestsMatchModelAndRuntime: over random histories of
// sotw requests, mostly ACKs that list the last names again, on streams
// of one type and ADS streams, each request decodes as the protobuf
// runtime decodes it (or fails where it fails), and the stream's names
// and bytes are the model's after every request.
func TestGuardSotwRequestsMatchModelAndRuntime(t *testing.T) {
	g := newGuard(Limits{}.WithDefaults(), newGuardMetrics())
	r := rand.New(rand.NewPCG(3, 11))
	repeats := 0
	for h := range 200 {
		a := newTestStreamAcct(g)
		m := &sotwAcctModel{types: map[string]*acctModelType{}}
		if h%2 == 0 {
			a.defType, m.defType = []byte(EndpointType), EndpointType
		}
		last := map[string][]string{}
		for step := range 1 + r.IntN(30) {
			b, err := proto.MarshalOptions{Deterministic: true}.Marshal(randomSotwRequest(r, last))
			if err != nil {
				// Invalid UTF-8 is refused by the marshaler: write it
				// by hand.
				b = appendSotwRequestRaw(r, last)
			}
			if r.IntN(10) == 0 {
				b = append(b, b[:r.IntN(len(b)+1)]...) // fields twice, or cut short
			}
			var want discovery.DiscoveryRequest
			wantErr := proto.Unmarshal(b, &want)
			if err := a.checkWireScan(&discovery.DiscoveryRequest{}, b, nil); err != nil {
				t.Fatalf("history %d step %d: %v", h, step, err)
			}
			if a.repeat != nil {
				repeats++
			}
			var got discovery.DiscoveryRequest
			gotErr := a.decodeSotw(b, &got)
			if (gotErr != nil) != (wantErr != nil) || (wantErr == nil && !proto.Equal(&got, &want)) {
				t.Fatalf("history %d step %d, request %x: decoded %v (%v); the runtime %v (%v)", h, step, b, &got, gotErr, &want, wantErr)
			}
			m.apply(b)
			if names, bytes := m.held(); a.names.Load() != names || a.bytes.Load() != bytes {
				t.Fatalf("history %d step %d, request %x: held %d names, %d bytes; the model %d, %d", h, step, b, a.names.Load(), a.bytes.Load(), names, bytes)
			}
		}
		a.release()
	}
	if repeats < 100 {
		t.Errorf("only %d requests listed their type's last names again", repeats)
	}
}

// appendSotwRequestRaw encodes what the marshaler refuses: an ACK of the
// type's last names whose nonce is not UTF-8.
func appendSotwRequestRaw(r *rand.Rand, last map[string][]string) []byte {
	var b []byte
	str := func(num protowire.Number, s string) {
		b = protowire.AppendString(protowire.AppendTag(b, num, protowire.BytesType), s)
	}
	typeURL := []string{EndpointType, ClusterType}[r.IntN(2)]
	str(sotwVersionInfo, "1")
	for _, n := range last[typeURL] {
		str(sotwResourceNames, n)
	}
	str(sotwTypeURL, typeURL)
	str(sotwResponseNonce, "\xfe")
	return b
}

// TestSotwRepeatedNamesDecodeWithoutCopies: an ACK that lists the last
// names again is decoded with the kept list, without a string per name.
func TestSotwRepeatedNamesDecodeWithoutCopies(t *testing.T) {
	g := newGuard(Limits{}.WithDefaults(), newGuardMetrics())
	a := newTestStreamAcct(g)
	names := make([]string, 500)
	for i := range names {
		names[i] = fmt.Sprintf("cluster-%04d", i)
	}
	req := func(nonce string) []byte {
		b, _ := proto.Marshal(&discovery.DiscoveryRequest{TypeUrl: EndpointType, ResourceNames: names, ResponseNonce: nonce, VersionInfo: "v"})
		return b
	}
	decode := func(b []byte) *discovery.DiscoveryRequest {
		var m discovery.DiscoveryRequest
		if err := a.checkWireScan(&m, b, nil); err != nil {
			t.Fatal(err)
		}
		if err := a.decodeSotw(b, &m); err != nil {
			t.Fatal(err)
		}
		return &m
	}
	first := decode(req(""))
	ack := req("1")
	allocs := testing.AllocsPerRun(50, func() { decode(ack) })
	if allocs > 4 {
		t.Errorf("an ACK of 500 names: %.0f allocations", allocs)
	}
	if m := decode(ack); !slices.Equal(m.ResourceNames, names) || m.ResponseNonce != "1" || m.VersionInfo != "v" || unsafeSame(m.ResourceNames, first.ResourceNames) {
		t.Errorf("decoded %v", m)
	}
	// The same names with a nonce that is not UTF-8: refused, as the
	// runtime refuses it.
	bad := slices.Clone(ack)
	bad[len(bad)-1] = 0xff // the nonce "1", last
	var m discovery.DiscoveryRequest
	if err := a.checkWireScan(&m, bad, nil); err != nil {
		t.Fatal(err)
	}
	if err := a.decodeSotw(bad, &m); err == nil {
		t.Errorf("a nonce not UTF-8 decoded: %q", m.ResponseNonce)
	}
}

// TestSotwAccountingKeepsTheSharedList: the accounting of a stream whose
// request lists the names another stream's subscription listed, in the
// same order, keeps the subscription's shared copy of the list
// (sotwSub.listed), not one of its own; other names, its own copy.
func TestSotwAccountingKeepsTheSharedList(t *testing.T) {
	g := newGuard(Limits{}.WithDefaults(), newGuardMetrics())
	names := make([]string, 300)
	for i := range names {
		names[i] = fmt.Sprintf("shared-list-%04d", i)
	}
	sub := newSotwSub(slices.Clone(names)) // another stream's, alive
	kept := func(list []string) []string {
		a := newTestStreamAcct(g)
		b, _ := proto.Marshal(&discovery.DiscoveryRequest{TypeUrl: EndpointType, ResourceNames: list})
		var m discovery.DiscoveryRequest
		if err := a.checkWireScan(&m, b, nil); err != nil {
			t.Fatal(err)
		}
		if err := a.decodeSotw(b, &m); err != nil {
			t.Fatal(err)
		}
		return a.types.at(EndpointType).list
	}
	if got := kept(names); !unsafeSame(got, sub.listed) || !slices.Equal(got, names) {
		t.Errorf("the same names in the same order: the accounting keeps its own list (shared: %v)", unsafeSame(got, sub.listed))
	}
	reversed := slices.Clone(names)
	slices.Reverse(reversed)
	if got := kept(reversed); unsafeSame(got, sub.listed) || !slices.Equal(got, reversed) {
		t.Errorf("the same names in another order: kept %d names, shared %v", len(got), unsafeSame(got, sub.listed))
	}
	runtime.KeepAlive(sub.names)
}

// unsafeSame reports whether two slices share their first element: the
// kept list is a copy, not the first request's own slice.
func unsafeSame(a, b []string) bool { return len(a) > 0 && len(b) > 0 && &a[0] == &b[0] }

// FuzzDecodeSotwRepeat: a request that lists the names of the one before
// (as the runtime decoded it) and that decodeSotwRepeat takes decodes as
// the runtime decodes it.
func FuzzDecodeSotwRepeat(f *testing.F) {
	prev, _ := proto.Marshal(&discovery.DiscoveryRequest{TypeUrl: EndpointType, ResourceNames: []string{"a", "b", "a"}, Node: &core.Node{Id: "n"}})
	ack, _ := proto.Marshal(&discovery.DiscoveryRequest{TypeUrl: EndpointType, ResourceNames: []string{"a", "b", "a"}, ResponseNonce: "1", VersionInfo: "2"})
	nack, _ := proto.Marshal(&discovery.DiscoveryRequest{TypeUrl: EndpointType, ResourceNames: []string{"a", "b", "a"}, ResponseNonce: "1", ErrorDetail: &status.Status{Message: "no"}})
	f.Add(prev, ack)
	f.Add(prev, nack)
	f.Add(prev, append(slices.Clone(ack), ack...))
	f.Add(prev, append(slices.Clone(ack), 0x2a, 0x01, 0xff)) // a nonce not UTF-8
	f.Add(prev, append(slices.Clone(ack), 0x28, 0x01))       // field 5 a varint
	f.Add(prev, append([]byte{0x2a, 0x01, 0xff}, ack...))    // a nonce not UTF-8, then a nonce
	f.Add(ack, prev)
	f.Fuzz(func(t *testing.T, prev, b []byte) {
		var p discovery.DiscoveryRequest
		if proto.Unmarshal(prev, &p) != nil || len(p.ResourceNames) == 0 {
			return
		}
		list := slices.Clone(p.ResourceNames)
		if !sameNames(b, list) {
			return
		}
		var got discovery.DiscoveryRequest
		if !decodeSotwRepeat(b, &got, list) {
			return
		}
		var want discovery.DiscoveryRequest
		if err := proto.Unmarshal(b, &want); err != nil {
			t.Fatalf("decoded %v; the runtime refuses it: %v", &got, err)
		}
		if !proto.Equal(&got, &want) {
			t.Fatalf("decoded %v; the runtime %v", &got, &want)
		}
	})
}
