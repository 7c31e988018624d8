package xds

import (
	"bytes"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// FuzzDeltaResponseEncoding: the codec's encoding of a delta response
// (encode.go) is proto.Marshal's, byte for byte, or both refuse it, for
// responses of any strings (not UTF-8, empty, long) and resources with or
// without their Any.
func FuzzDeltaResponseEncoding(f *testing.F) {
	f.Add("7", EndpointType, "12", []byte("a\x00b"), []byte("\x01x\x001\x00"+EndpointType+"\x00value\x00\x00y\x00\x00\x00"))
	f.Add("7", EndpointType, "12", []byte("a\x00b\x00\xff"), []byte("\x01x\x001\x00"+EndpointType+"\x00value"))
	f.Add("", "", "", []byte{}, []byte("\x00\x00\x00\x00"))
	f.Add("\xfe", ClusterType, "1", []byte("gone"), []byte("\x02n\x00v\x00t\x00"))
	f.Fuzz(func(t *testing.T, sys, typ, nonce string, removed, res []byte) {
		m := &discovery.DeltaDiscoveryResponse{SystemVersionInfo: sys, TypeUrl: typ, Nonce: nonce}
		if len(removed) > 0 {
			for _, s := range bytes.Split(removed, []byte{0}) {
				m.RemovedResources = append(m.RemovedResources, string(s))
			}
		}
		// Resources: a flag byte (bit 0: an Any; bit 1: a nil Any's
		// place left empty), then name, version, type URL and value,
		// separated by zero bytes.
		for len(res) > 0 {
			flag := res[0]
			parts := bytes.SplitN(res[1:], []byte{0}, 5)
			for len(parts) < 5 {
				parts = append(parts, nil)
			}
			r := &discovery.Resource{Name: string(parts[0]), Version: string(parts[1])}
			if flag&1 != 0 {
				r.Resource = &anypb.Any{TypeUrl: string(parts[2]), Value: parts[3]}
			}
			m.Resources = append(m.Resources, r)
			res = parts[4]
		}
		want, wantErr := proto.Marshal(m)
		got, gotErr := codec{}.Marshal(m)
		if (gotErr != nil) != (wantErr != nil) {
			t.Fatalf("error %v, proto.Marshal's %v", gotErr, wantErr)
		}
		if wantErr != nil {
			return
		}
		if b := got.Materialize(); !bytes.Equal(b, want) {
			t.Fatalf("encoded %x, proto.Marshal %x", b, want)
		}
	})
}
