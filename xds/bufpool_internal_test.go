package xds

import (
	"bytes"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
)

// TestTieredPoolSizes: a buffer has the length asked for and the capacity
// of the smallest tier that holds it (none past the largest tier), also
// when it comes back from the pool; a buffer of another capacity is not
// taken back.
func TestTieredPoolSizes(t *testing.T) {
	p := newTieredPool(8, 22)
	for _, size := range []int{0, 1, 255, 256, 257, 1000, 1024, 1025, 32 << 10, 32<<10 + 7, 4 << 20, 4<<20 + 1, 5 << 20} {
		want := 256
		for want < size {
			want *= 2
		}
		if size > 4<<20 {
			want = size
		}
		for round := range 2 {
			b := p.Get(size)
			if len(*b) != size || cap(*b) != want {
				t.Fatalf("round %d: Get(%d): len %d cap %d, want len %d cap %d", round, size, len(*b), cap(*b), size, want)
			}
			*b = (*b)[:0] // a prefix goes back, as gRPC puts them
			p.Put(b)
		}
	}
	odd := make([]byte, 300)
	p.Put(&odd) // not a tier's capacity: left to the collector
	for range 100 {
		if b := p.Get(300); cap(*b) != 512 {
			t.Fatalf("Get(300) has capacity %d, want 512", cap(*b))
		}
	}
}

// dirtyPool hands out buffers full of 0xAB, as a pool that does not clear
// them may: what the codec encodes into one must not depend on what was
// there.
type dirtyPool struct{}

func (dirtyPool) Get(size int) *[]byte {
	b := bytes.Repeat([]byte{0xAB}, max(size, 1))[:size]
	return &b
}

func (dirtyPool) Put(*[]byte) {}

// TestEncodingIntoUsedBuffers: responses and messages encoded into pool
// buffers that hold earlier bytes are proto.Marshal's, byte for byte
// (bufferPool does not clear the buffers it hands out).
func TestEncodingIntoUsedBuffers(t *testing.T) {
	_, res, wire := storedAssignments(t, 300)
	delta := &discovery.DeltaDiscoveryResponse{TypeUrl: EndpointType, Nonce: "12", Resources: res, RemovedResources: []string{"gone"}}
	sotw := &discovery.DiscoveryResponse{TypeUrl: EndpointType, VersionInfo: "3", Nonce: "4"}
	for _, r := range res {
		sotw.Resources = append(sotw.Resources, r.GetResource())
	}
	cases := map[string]struct {
		v   any
		msg proto.Message
	}{
		"delta response (runtime)": {delta, delta},
		"delta response (wired)":   {&wiredDelta{DeltaDiscoveryResponse: delta, wire: wire}, delta},
		"sotw response":            {sotw, sotw},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			want, err := proto.Marshal(tc.msg)
			if err != nil {
				t.Fatal(err)
			}
			got, err := codec{out: dirtyPool{}}.Marshal(tc.v)
			if err != nil {
				t.Fatal(err)
			}
			if b := got.Materialize(); !bytes.Equal(b, want) {
				t.Fatalf("encoded %d bytes into a used buffer, proto.Marshal %d; they differ", len(b), len(want))
			}
		})
	}
}
