package load

import (
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// FuzzDeltaResponseReadAsRuntime: whatever bytes the protobuf runtime reads
// as a delta response, the clients' reader reads too, and alike.
func FuzzDeltaResponseReadAsRuntime(f *testing.F) {
	for _, m := range []*discovery.DeltaDiscoveryResponse{
		{TypeUrl: edsType, Nonce: "7", RemovedResources: []string{"svc-1"}},
		{TypeUrl: cdsType, Nonce: "n", Resources: []*discovery.Resource{
			{Name: "svc-1", Version: "v1", Resource: &anypb.Any{TypeUrl: cdsType, Value: []byte("\x0a\x05svc-1")}},
			{Name: "svc-2", Aliases: []string{"a"}},
		}},
	} {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	fl := newFleet(4)
	f.Fuzz(func(t *testing.T, b []byte) {
		if proto.Unmarshal(b, new(discovery.DeltaDiscoveryResponse)) != nil {
			return
		}
		var r deltaResponse
		if err := r.read(b, fl); err != nil {
			t.Fatalf("the runtime reads %x, the clients' reader: %v", b, err)
		}
		if err := r.check(); err != nil {
			t.Fatal(err)
		}
	})
}
