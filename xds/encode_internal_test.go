package xds

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/xdsbridge/xdsbridge/xds/store"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestDeltaResponseEncoding: the codec's encoding of a delta response
// (encode.go) is proto.Marshal's, byte for byte, for the responses the
// server builds (resources from the store, removed names, a response
// above the pool's threshold) and for those it hands to the runtime (a
// field the encoder does not write, a string that is not UTF-8).
func TestDeltaResponseEncoding(t *testing.T) {
	c, res, _ := storedAssignments(t, 300)
	resp := func(r []*discovery.Resource, removed ...string) *discovery.DeltaDiscoveryResponse {
		return &discovery.DeltaDiscoveryResponse{TypeUrl: EndpointType, SystemVersionInfo: "7", Nonce: "12", Resources: r, RemovedResources: removed}
	}
	cases := map[string]*discovery.DeltaDiscoveryResponse{
		"empty":                        {},
		"one resource":                 resp(res[:1]),
		"removed names, one empty":     resp(nil, "a", "", "b"),
		"above the pooling threshold":  resp(res, "gone"),
		"a resource without its Any":   resp([]*discovery.Resource{{Name: "x", Version: "1"}}),
		"an empty Any":                 resp([]*discovery.Resource{{Name: "x", Resource: &anypb.Any{}}}),
		"a control plane (runtime)":    {Nonce: "1", ControlPlane: &core.ControlPlane{Identifier: "id"}},
		"a resource's ttl (runtime)":   resp([]*discovery.Resource{{Name: "x", Ttl: durationpb.New(5)}}),
		"a resource's alias (runtime)": resp([]*discovery.Resource{{Name: "x", Aliases: []string{"y"}}}),
		"removed resource names":       {RemovedResourceNames: []*discovery.ResourceName{{Name: "x"}}},
		"a long name":                  resp([]*discovery.Resource{{Name: strings.Repeat("n", 300), Version: "v"}}),
		"a last resource's Any with unknown fields (runtime)": resp(append(slices.Clone(res), &discovery.Resource{Name: "x", Resource: withUnknown(&anypb.Any{TypeUrl: "t"})})),
		"a last resource with unknown fields (runtime)":       resp(append(slices.Clone(res), withUnknown(&discovery.Resource{Name: "x"}))),
	}
	for name, m := range cases {
		t.Run(name, func(t *testing.T) {
			want, err := proto.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			got, err := codec{}.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			if b := got.Materialize(); !bytes.Equal(b, want) {
				t.Fatalf("encoded %x, proto.Marshal %x", b, want)
			}
		})
	}
	// The store's resources sent with their Wire: the same bytes; a wire
	// that does not match the resources in number is not used.
	var wire [][]byte
	for _, n := range names(c, EndpointType) {
		wire = append(wire, c.types[EndpointType].Resources[n].Wire)
	}
	for name, d := range map[string]*wiredDelta{
		"wired, one resource":                 {DeltaDiscoveryResponse: resp(res[:1]), wire: wire[:1]},
		"wired, above the pooling threshold":  {DeltaDiscoveryResponse: resp(res, "gone"), wire: wire},
		"wired, one resource, in its room":    {DeltaDiscoveryResponse: resp(res[:1]), wire: wire[:1], room: &encodedRoom{}},
		"wired, above the threshold, in room": {DeltaDiscoveryResponse: resp(res, "gone"), wire: wire, room: &encodedRoom{}},
		"wired, a resource more":              {DeltaDiscoveryResponse: resp(append(slices.Clone(res), &discovery.Resource{Name: "x"})), wire: wire},
	} {
		t.Run(name, func(t *testing.T) {
			want, err := proto.Marshal(d.DeltaDiscoveryResponse)
			if err != nil {
				t.Fatal(err)
			}
			// gRPC's own codec (handlers on a server of the user's)
			// encodes the response embedded.
			for _, cd := range []encoding.CodecV2{codec{}, encoding.GetCodecV2("proto")} {
				got, err := cd.Marshal(d)
				if err != nil {
					t.Fatal(err)
				}
				if b := got.Materialize(); !bytes.Equal(b, want) {
					t.Fatalf("%T encoded %x, proto.Marshal %x", cd, b, want)
				}
			}
		})
	}
	t.Run("not UTF-8", func(t *testing.T) {
		for _, m := range []*discovery.DeltaDiscoveryResponse{resp(nil, "\xff"), resp([]*discovery.Resource{{Name: "\xff"}}), {Nonce: "\xfe"},
			resp(append(slices.Clone(res), &discovery.Resource{Name: "x", Version: "\xff"})),
			resp(append(slices.Clone(res), &discovery.Resource{Name: "x", Resource: &anypb.Any{TypeUrl: "\xfe"}}))} {
			if _, err := (codec{}).Marshal(m); err == nil {
				t.Errorf("%v: encoded", m)
			}
		}
	})
}

// TestDeltaResponseEncoderKnowsEveryField: every field of the messages the
// encoder writes is one it writes or one it hands to the runtime, so that
// a field a newer go-control-plane adds is not dropped.
func TestDeltaResponseEncoderKnowsEveryField(t *testing.T) {
	for _, tc := range []struct {
		m      proto.Message
		fields []string
	}{
		{&discovery.DeltaDiscoveryResponse{}, []string{"control_plane", "nonce", "removed_resource_names", "removed_resources", "resource_errors", "resources", "system_version_info", "type_url"}},
		{&discovery.Resource{}, []string{"aliases", "cache_control", "metadata", "name", "resource", "resource_name", "ttl", "version"}},
		{&anypb.Any{}, []string{"type_url", "value"}},
	} {
		var got []string
		fs := tc.m.ProtoReflect().Descriptor().Fields()
		for i := range fs.Len() {
			got = append(got, string(fs.Get(i).Name()))
		}
		slices.Sort(got)
		if !slices.Equal(got, tc.fields) {
			t.Errorf("%s: fields %v, the encoder knows %v", tc.m.ProtoReflect().Descriptor().FullName(), got, tc.fields)
		}
	}
}

// withUnknown gives m an unknown field (number 99, varint 1).
func withUnknown[M proto.Message](m M) M {
	m.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 1))
	return m
}

// TestWiredDeltaEncodesIntoItsRoom: a small delta response's encoding is
// handed to gRPC from the response's room, in one allocation (its bytes),
// not three; a room already used is left as it is, for gRPC may still be
// reading it.
func TestWiredDeltaEncodesIntoItsRoom(t *testing.T) {
	c := NewCache(WithTypes(EndpointType))
	setAssignmentA(t, c, 1)
	e := c.types[EndpointType].Resources["a"]
	r := &discovery.DeltaDiscoveryResponse{TypeUrl: EndpointType, Nonce: "3", Resources: []*discovery.Resource{e.Delta}}
	want, err := proto.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	d := &wiredDelta{DeltaDiscoveryResponse: r, wire: [][]byte{e.Wire}, room: &encodedRoom{}}
	allocs := testing.AllocsPerRun(100, func() {
		d.room.used = false
		if _, err := (codec{}).Marshal(d); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 1 {
		t.Errorf("%v allocations, want 1", allocs)
	}
	first, _ := (codec{}).Marshal(d)
	held := d.room.small
	again, _ := (codec{}).Marshal(d)
	if &first[0] == &again[0] || &d.room.small[0] != &held[0] {
		t.Error("a used room was encoded into again")
	}
	for _, got := range []mem.BufferSlice{first, again} {
		if b := got.Materialize(); !bytes.Equal(b, want) {
			t.Fatalf("encoded %x, proto.Marshal %x", b, want)
		}
	}
}

// storedAssignments is a cache of n assignments, and their delta
// resources and encodings as the store keeps them, in name order.
func storedAssignments(t *testing.T, n int) (*Cache, []*discovery.Resource, [][]byte) {
	t.Helper()
	c := NewCache(WithTypes(EndpointType))
	var ups []store.Resource
	for i := range n {
		ups = append(ups, store.Resource{Name: fmt.Sprintf("svc-%03d", i), Msg: &endpoint.ClusterLoadAssignment{ClusterName: fmt.Sprintf("svc-%03d", i)}})
	}
	if err := c.Apply(store.Change{TypeURL: EndpointType, Upserts: ups}); err != nil {
		t.Fatal(err)
	}
	var res []*discovery.Resource
	var wire [][]byte
	for _, name := range names(c, EndpointType) {
		e := c.types[EndpointType].Resources[name]
		res = append(res, e.Delta)
		wire = append(wire, e.Wire)
	}
	return c, res, wire
}
