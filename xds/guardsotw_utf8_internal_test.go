package xds

import (
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// FuzzSotwAcctSequence: any sequence of requests a stream
// decodes (the stream ends at the first the runtime refuses) decodes as
// the runtime decodes it and leaves the model's names and bytes, each
// request sent twice so that the second takes the kept list.
func FuzzSotwAcctSequence(f *testing.F) {
	mk := func(r *discovery.DiscoveryRequest) []byte { b, _ := proto.Marshal(r); return b }
	a1 := mk(&discovery.DiscoveryRequest{TypeUrl: EndpointType, ResourceNames: []string{"a", "b", "a"}, VersionInfo: "1", ResponseNonce: "1"})
	a2 := mk(&discovery.DiscoveryRequest{TypeUrl: EndpointType, ResourceNames: []string{"a", "c"}, Node: &core.Node{Id: "x"}})
	a3 := mk(&discovery.DiscoveryRequest{ResourceNames: []string{"a", "b", "a"}})
	f.Add(a1, a2, a3, true)
	f.Add(a3, a1, a2, false)
	f.Add(a1, append(a1, 0x22, 0x00), a1, true)
	f.Fuzz(func(t *testing.T, r1, r2, r3 []byte, single bool) {
		g := newGuard(Limits{}.WithDefaults(), newGuardMetrics())
		a := newTestStreamAcct(g)
		m := &sotwAcctModel{types: map[string]*acctModelType{}}
		if single {
			a.defType, m.defType = []byte(EndpointType), EndpointType
		}
		for i, b := range [][]byte{r1, r1, r2, r2, r3, r1, r3, r3} {
			var want discovery.DiscoveryRequest
			wantErr := proto.Unmarshal(b, &want)
			if err := a.checkWireScan(&discovery.DiscoveryRequest{}, b, nil); err != nil {
				return // over a limit: the stream ends
			}
			var got discovery.DiscoveryRequest
			gotErr := a.decodeSotw(b, &got)
			if (gotErr != nil) != (wantErr != nil) || (wantErr == nil && !proto.Equal(&got, &want)) {
				t.Fatalf("step %d %x: decoded %v (%v); the runtime %v (%v)", i, b, &got, gotErr, &want, wantErr)
			}
			if wantErr != nil {
				return // the stream ends
			}
			m.apply(b)
			if names, bytes := m.held(); a.names.Load() != names || a.bytes.Load() != bytes {
				t.Fatalf("step %d %x: held %d names, %d bytes; the model %d, %d", i, b, a.names.Load(), a.bytes.Load(), names, bytes)
			}
		}
	})
}

// TestDecodeSotwRepeatRefusesAnyFieldNotUTF8: a string field
// given twice, the first not UTF-8, is refused by the runtime (it checks
// every occurrence, not only the last, which the message keeps); so must
// the repeat decoder be, and the stream's decoding.
func TestDecodeSotwRepeatRefusesAnyFieldNotUTF8(t *testing.T) {
	list := []string{"a", "b"}
	for _, num := range []protowire.Number{sotwVersionInfo, sotwTypeURL, sotwResponseNonce} {
		var b []byte
		str := func(num protowire.Number, s string) {
			b = protowire.AppendString(protowire.AppendTag(b, num, protowire.BytesType), s)
		}
		str(num, "\xff")
		for _, n := range list {
			str(sotwResourceNames, n)
		}
		str(num, EndpointType)
		var want discovery.DiscoveryRequest
		wantErr := proto.Unmarshal(b, &want)
		if wantErr == nil {
			t.Fatalf("field %d: the runtime decoded %x", num, b)
		}
		var got discovery.DiscoveryRequest
		if sameNames(b, list) && decodeSotwRepeat(b, &got, list) {
			t.Errorf("field %d: decodeSotwRepeat took %x (%v), the runtime refuses it: %v", num, b, &got, wantErr)
		}
	}
}
