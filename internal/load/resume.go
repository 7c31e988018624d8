// A delta client's resume requests, encoded without the protobuf runtime
// and shared: a reconnect storm sends 1,000 of them with ~5,000 versions
// each, and marshalling those maps through the runtime cost the harness
// more CPU than the server spends reading them, on the same cores;
// encoding each by hand still cost it ~2 CPU s. The clients of a fleet
// mostly hold the same versions, so the body of a request (everything but
// the node) is encoded once per state held and order of the entries, and
// a client sends its node and that shared body.

package load

import (
	"math/rand/v2"
	"sync"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc/encoding"
	protoenc "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// DeltaDiscoveryRequest's fields a resume or an ACK carries, and a map
// entry's.
const (
	fieldNode      protowire.Number = 1
	fieldTypeURL   protowire.Number = 2
	fieldSubscribe protowire.Number = 3
	fieldVersions  protowire.Number = 5
	fieldNonce     protowire.Number = 6
	fieldMapKey    protowire.Number = 1
	fieldMapValue  protowire.Number = 2
)

// rawRequest is a request already encoded, in parts sent one after the
// other as they are (rawCodec): the parts are not copied, and may be
// shared between clients.
type rawRequest [][]byte

// bytes is the request's encoding in one slice.
func (r rawRequest) bytes() []byte {
	var b []byte
	for _, p := range r {
		b = append(b, p...)
	}
	return b
}

// nodeField is node encoded as a request's first field (none if nil).
func nodeField(node *core.Node) ([]byte, error) {
	if node == nil {
		return nil, nil
	}
	n, err := proto.Marshal(node)
	if err != nil {
		return nil, err
	}
	b := protowire.AppendTag(nil, fieldNode, protowire.BytesType)
	return protowire.AppendBytes(b, n), nil
}

// heldState is what a client holds of one type, as its resume request
// says it: the names it subscribes to (subs; nil: none, as for wildcard
// CDS) and the versions it holds (vers[i] where have[i]).
type heldState struct {
	subs, have []bool
	vers       []string
}

func (s heldState) equal(o heldState) bool {
	if len(s.have) != len(o.have) || (s.subs == nil) != (o.subs == nil) {
		return false
	}
	for i := range s.have {
		if s.have[i] != o.have[i] || s.have[i] && s.vers[i] != o.vers[i] || s.subs != nil && s.subs[i] != o.subs[i] {
			return false
		}
	}
	return true
}

// clone copies s, for a body that outlives the client's state.
func (s heldState) clone() heldState {
	c := heldState{have: append([]bool(nil), s.have...), vers: make([]string, len(s.vers))}
	if s.subs != nil {
		c.subs = append([]bool(nil), s.subs...)
	}
	for i, h := range s.have {
		if h {
			c.vers[i] = s.vers[i]
		}
	}
	return c
}

// resumeOrders is the number of orders of the map entries a state's body
// is encoded in: a map has none, and Envoy's (a hash map's) is arbitrary,
// so the harness sends neither a sorted one nor one order for all; a
// client sends the order of its id.
const resumeOrders = 4

// mapOrders are the orders of n services for a request's map entries.
func mapOrders(n int) [resumeOrders][]int {
	var o [resumeOrders][]int
	for k := range o {
		o[k] = rand.New(rand.NewPCG(1, uint64(k))).Perm(n)
	}
	return o
}

// resumeBodies are the bodies of the fleet's last resume requests: a
// request's fields after its node (type URL, subscriptions, versions).
type resumeBodies struct {
	mu   sync.Mutex
	last []*resumeBody // most recent first, at most maxResumeBodies
}

// maxResumeBodies bounds the states kept: a fleet whose clients hold
// different versions costs one encoding per client, as without sharing.
const maxResumeBodies = 8

type resumeBody struct {
	typeURL string
	state   heldState
	enc     [resumeOrders][]byte // built when first sent
}

// body returns the encoded body of a request of typeURL for state s, its
// entries in order k of fl.
func (rb *resumeBodies) body(fl *fleet, typeURL string, s heldState, k int) []byte {
	rb.mu.Lock()
	defer rb.mu.Unlock()
	var b *resumeBody
	for i, l := range rb.last {
		if l.typeURL == typeURL && l.state.equal(s) {
			b = l
			copy(rb.last[1:i+1], rb.last[:i])
			rb.last[0] = b
			break
		}
	}
	if b == nil {
		b = &resumeBody{typeURL: typeURL, state: s.clone()}
		rb.last = append([]*resumeBody{b}, rb.last[:min(len(rb.last), maxResumeBodies-1)]...)
	}
	if b.enc[k] == nil {
		b.enc[k] = encodeBody(fl, typeURL, b.state, fl.orders[k])
	}
	return b.enc[k]
}

// encodeBody encodes a request's type URL, its subscriptions (in the
// services' order) and its held versions (in order).
func encodeBody(fl *fleet, typeURL string, s heldState, order []int) []byte {
	n := 0
	for i, h := range s.have {
		if h {
			n += len(fl.names[i]) + len(s.vers[i]) + 8
		}
		if s.subs != nil && s.subs[i] {
			n += len(fl.names[i]) + 3
		}
	}
	b := make([]byte, 0, n+len(typeURL)+3)
	b = protowire.AppendTag(b, fieldTypeURL, protowire.BytesType)
	b = protowire.AppendString(b, typeURL)
	for i, sub := range s.subs {
		if sub {
			b = protowire.AppendTag(b, fieldSubscribe, protowire.BytesType)
			b = protowire.AppendString(b, fl.names[i])
		}
	}
	for _, i := range order {
		if s.have[i] {
			b = appendVersion(b, fl.names[i], s.vers[i])
		}
	}
	return b
}

// appendVersion appends an initial_resource_versions entry: a map entry
// message of key and value, both written even when empty, as the runtime
// writes it.
func appendVersion(b []byte, name, version string) []byte {
	n := protowire.SizeTag(fieldMapKey) + protowire.SizeBytes(len(name)) +
		protowire.SizeTag(fieldMapValue) + protowire.SizeBytes(len(version))
	b = protowire.AppendTag(b, fieldVersions, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(n))
	b = protowire.AppendTag(b, fieldMapKey, protowire.BytesType)
	b = protowire.AppendString(b, name)
	b = protowire.AppendTag(b, fieldMapValue, protowire.BytesType)
	return protowire.AppendString(b, version)
}

// rawCodec is the proto codec, which also sends a rawRequest as it is.
type rawCodec struct{ encoding.CodecV2 }

func newRawCodec() rawCodec { return rawCodec{encoding.GetCodecV2(protoenc.Name)} }

func (c rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	if r, ok := v.(rawRequest); ok {
		s := make(mem.BufferSlice, 0, len(r))
		for _, p := range r {
			if len(p) > 0 {
				s = append(s, mem.SliceBuffer(p))
			}
		}
		return s, nil
	}
	return c.CodecV2.Marshal(v)
}
