// A delta client's resume requests, encoded without the protobuf runtime:
// a reconnect storm sends 1,000 of them with ~5,000 versions each, and
// marshalling those maps through the runtime would cost the harness more
// CPU than the server spends reading them, on the same cores.

package load

import (
	"math/rand/v2"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc/encoding"
	protoenc "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// DeltaDiscoveryRequest's fields a resume carries, and a map entry's.
const (
	fieldNode      protowire.Number = 1
	fieldTypeURL   protowire.Number = 2
	fieldSubscribe protowire.Number = 3
	fieldVersions  protowire.Number = 5
	fieldMapKey    protowire.Number = 1
	fieldMapValue  protowire.Number = 2
)

// rawRequest is a request already encoded, sent as it is (rawCodec).
type rawRequest []byte

// resumeRequest is a delta resume request being encoded.
type resumeRequest struct{ b []byte }

func newResumeRequest(node *core.Node, typeURL string) (*resumeRequest, error) {
	r := &resumeRequest{}
	if node != nil {
		n, err := proto.Marshal(node)
		if err != nil {
			return nil, err
		}
		r.b = protowire.AppendTag(r.b, fieldNode, protowire.BytesType)
		r.b = protowire.AppendBytes(r.b, n)
	}
	r.b = protowire.AppendTag(r.b, fieldTypeURL, protowire.BytesType)
	r.b = protowire.AppendString(r.b, typeURL)
	return r, nil
}

func (r *resumeRequest) subscribe(name string) {
	r.b = protowire.AppendTag(r.b, fieldSubscribe, protowire.BytesType)
	r.b = protowire.AppendString(r.b, name)
}

// version adds an initial_resource_versions entry: a map entry message of
// key and value, both written even when empty, as the runtime writes it.
func (r *resumeRequest) version(name, version string) {
	n := protowire.SizeTag(fieldMapKey) + protowire.SizeBytes(len(name)) +
		protowire.SizeTag(fieldMapValue) + protowire.SizeBytes(len(version))
	r.b = protowire.AppendTag(r.b, fieldVersions, protowire.BytesType)
	r.b = protowire.AppendVarint(r.b, uint64(n))
	r.b = protowire.AppendTag(r.b, fieldMapKey, protowire.BytesType)
	r.b = protowire.AppendString(r.b, name)
	r.b = protowire.AppendTag(r.b, fieldMapValue, protowire.BytesType)
	r.b = protowire.AppendString(r.b, version)
}

// mapOrder is an order of n services for a request's map entries: a map
// has none, and Envoy's (a hash map's) is arbitrary, so the harness does
// not send them sorted.
func mapOrder(n int) []int {
	return rand.New(rand.NewPCG(1, 2)).Perm(n)
}

// rawCodec is the proto codec, which also sends a rawRequest as it is.
type rawCodec struct{ encoding.CodecV2 }

func newRawCodec() rawCodec { return rawCodec{encoding.GetCodecV2(protoenc.Name)} }

func (c rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	if r, ok := v.(rawRequest); ok {
		return mem.BufferSlice{mem.SliceBuffer(r)}, nil
	}
	return c.CodecV2.Marshal(v)
}
