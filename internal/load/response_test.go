package load

import (
	"slices"
	"strings"
	"testing"
	"unsafe"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestDeltaResponseReadAsRuntime reads responses the protobuf runtime
// encodes, with the fields the clients use and those they skip, and
// compares with the runtime's reading; a reading changed after the fact is
// told apart.
func TestDeltaResponseReadAsRuntime(t *testing.T) {
	cla := []byte("\x0a\x05svc-1")
	msgs := []*discovery.DeltaDiscoveryResponse{
		{},
		{TypeUrl: edsType, Nonce: "7"},
		{
			SystemVersionInfo: "sys", TypeUrl: cdsType, Nonce: "n-1",
			Resources: []*discovery.Resource{
				{Name: "svc-1", Version: "v1", Resource: &anypb.Any{TypeUrl: cdsType, Value: cla}},
				{Name: "svc-2", Version: "", Aliases: []string{"a", "b"}, Ttl: durationpb.New(5)},
				{Name: "", Version: "v3", Resource: &anypb.Any{}},
			},
			RemovedResources: []string{"svc-9", "svc-10"},
			ControlPlane:     &core.ControlPlane{Identifier: "cp"},
		},
	}
	fl := newFleet(11)
	for i, m := range msgs {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		var r deltaResponse
		if err := r.read(b, fl); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if err := r.check(); err != nil {
			t.Errorf("message %d: %v", i, err)
		}
		if len(m.GetResources()) > 0 {
			r.resources[0].version += "x"
			if err := r.check(); err == nil || !strings.Contains(err.Error(), "runtime reads") {
				t.Errorf("message %d: a changed version is not told apart: %v", i, err)
			}
		}
		r.release()
		if r.raw != nil || len(r.resources) != 0 {
			t.Errorf("message %d: released, still holds %d bytes, %d resources", i, len(r.raw), len(r.resources))
		}
	}

	// Two readings of one response share the versions, which are copies,
	// not the response's bytes; the names give the services.
	b, _ := proto.Marshal(msgs[2])
	var r1, r2 deltaResponse
	_ = r1.read(b, fl)
	_ = r2.read(append([]byte(nil), b...), fl)
	v1, v2 := r1.resources[0].version, r2.resources[0].version
	if v1 != "v1" || unsafe.StringData(v1) != unsafe.StringData(v2) {
		t.Errorf("versions %q and %q are not one shared string", v1, v2)
	}
	b[len(b)-1] = 0 // the response's bytes may be reused
	if r1.resources[2].version != "v3" {
		t.Errorf("a version points into the response: %q", r1.resources[2].version)
	}
	if got := []int{r1.resources[0].svc, r1.resources[1].svc, r1.resources[2].svc}; !slices.Equal(got, []int{1, 2, -1}) {
		t.Errorf("services %v, want [1 2 -1]", got)
	}

	if err := new(deltaResponse).read([]byte{0x12, 0x05, 0x0a}, fl); err == nil {
		t.Errorf("a truncated response is read without an error")
	}
}

// TestACKEncodesAsRuntime compares the hand-encoded ACK with the message.
func TestACKEncodesAsRuntime(t *testing.T) {
	for _, n := range []string{"", "1", strings.Repeat("n", 200)} {
		got := appendACK(nil, edsType, n)
		var m discovery.DeltaDiscoveryRequest
		if err := proto.Unmarshal(got, &m); err != nil {
			t.Fatal(err)
		}
		want := &discovery.DeltaDiscoveryRequest{TypeUrl: edsType, ResponseNonce: n}
		if !proto.Equal(&m, want) {
			t.Errorf("ACK of nonce %q reads %v", n, &m)
		}
	}
}

// TestServiceIndexOfName parses names as svcIndex does.
func TestServiceIndexOfName(t *testing.T) {
	for _, n := range []string{"svc-0", "svc-42", "svc-123456789", "svc-", "svc-x", "svc-1x", "svc--1", "svc-1234567890", "other", ""} {
		want := svcIndex(n)
		if len(n) > len("svc-")+9 {
			want = -1 // (no service has ten digits)
		}
		if got := svcIndexOf([]byte(n)); got != want {
			t.Errorf("svcIndexOf(%q) = %d, want %d", n, got, want)
		}
	}
}

// TestDeltaResponseReleaseDropsRemovedNames: once released, a reading
// keeps no slice into the response's bytes, the removed names included,
// so that an idle client does not hold its last response.
func TestDeltaResponseReleaseDropsRemovedNames(t *testing.T) {
	b, err := proto.Marshal(&discovery.DeltaDiscoveryResponse{
		TypeUrl: cdsType, Nonce: "1",
		Resources:        []*discovery.Resource{{Name: "svc-1", Version: "v1", Resource: &anypb.Any{Value: []byte("x")}}},
		RemovedResources: []string{"svc-2", "svc-3"},
	})
	if err != nil {
		t.Fatal(err)
	}
	var r deltaResponse
	if err := r.read(b, newFleet(4)); err != nil {
		t.Fatal(err)
	}
	r.release()
	for i, n := range r.removed[:cap(r.removed)] {
		if n != nil {
			t.Errorf("released: removed name %d still points into the response (%q)", i, n)
		}
	}
	for i, res := range r.resources[:cap(r.resources)] {
		if res.name != nil || res.value != nil {
			t.Errorf("released: resource %d still points into the response (%q)", i, res.name)
		}
	}
}

// TestDeltaResponseResourceAnyAsRuntime: a resource whose Any comes in two
// parts is one Any, as the runtime merges it (a value set by the first part
// and not by the second stays); a malformed Any is an error, as it is to
// the runtime.
func TestDeltaResponseResourceAnyAsRuntime(t *testing.T) {
	part := func(a *anypb.Any) []byte {
		b, err := proto.Marshal(&discovery.Resource{Resource: a})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	res := append(part(&anypb.Any{TypeUrl: cdsType, Value: []byte("cla")}), part(&anypb.Any{TypeUrl: edsType})...)
	res = append(res, part(&anypb.Any{Value: []byte("cla2")})...)
	res = append(res, part(&anypb.Any{TypeUrl: cdsType})...)
	res = append(res, 0x1a, 0x05, 's', 'v', 'c', '-', '1') // name
	b := protowire.AppendBytes([]byte{0x12}, res)
	fl := newFleet(4)
	var r deltaResponse
	if err := r.read(b, fl); err != nil {
		t.Fatal(err)
	}
	if err := r.check(); err != nil {
		t.Error(err)
	}
	if got := string(r.resources[0].value); got != "cla2" {
		t.Errorf("the Any in parts reads value %q, want %q", got, "cla2")
	}

	bad := []byte{0x12, 0x04, 0x12, 0x02, 0x12, 0x05} // the Any's value truncated
	if err := proto.Unmarshal(bad, new(discovery.DeltaDiscoveryResponse)); err == nil {
		t.Fatal("the runtime reads the malformed Any")
	}
	if err := new(deltaResponse).read(bad, fl); err == nil {
		t.Errorf("a malformed Any is read without an error")
	}
}
