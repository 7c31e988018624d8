package xds

import (
	"sync/atomic"
	"unicode/utf8"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// A delta response is encoded here, not through the protobuf runtime: its
// fields are a few strings and the resources, whose Any each holds the
// resource encoded once by the store; the runtime walks each message twice
// (its size, then its bytes) through its generic coders, while here the
// sizes are read off the strings and the bytes appended. The bytes are
// those proto.Marshal writes (fields in number order; TestDeltaResponseEncoding
// compares them). A response with a field the encoder does not write (the
// server sets none of them) goes through the runtime. A response of the
// store's resources as they are (wiredDelta) copies each resource's
// encoding, which the store made once.

// deltaResponseSize returns the encoded size of r, and false if r has a
// field that only the runtime writes, or a string that is not UTF-8 (the
// runtime's error).
func deltaResponseSize(r *discovery.DeltaDiscoveryResponse) (int, bool) {
	n, ok := headerSize(r)
	if !ok {
		return 0, false
	}
	for _, res := range r.Resources {
		m, ok := resourceSize(res)
		if !ok {
			return 0, false
		}
		n += 1 + protowire.SizeBytes(m)
	}
	return n, true
}

// headerSize returns the encoded size of r's fields but its resources, and
// false as deltaResponseSize does.
func headerSize(r *discovery.DeltaDiscoveryResponse) (int, bool) {
	if r.ControlPlane != nil || len(r.RemovedResourceNames) > 0 || len(r.ResourceErrors) > 0 || len(r.ProtoReflect().GetUnknown()) > 0 {
		return 0, false
	}
	if !validUTF8(r.SystemVersionInfo, r.TypeUrl, r.Nonce) {
		return 0, false
	}
	n := stringSize(r.SystemVersionInfo) + stringSize(r.TypeUrl) + stringSize(r.Nonce)
	for _, s := range r.RemovedResources {
		if !utf8.ValidString(s) {
			return 0, false
		}
		n += 1 + protowire.SizeBytes(len(s))
	}
	return n, true
}

// wiredDelta is a delta response whose resources are the store's, each
// with its Wire (store/deltawire.go): wire[i] is the encoding of
// Resources[i]'s fields. The stream sends it (deltaStream.send) for the
// server's codec to copy those bytes; any other codec (a server that
// registers the handlers on its own gRPC server) encodes the response it
// embeds, a proto.Message.
type wiredDelta struct {
	*discovery.DeltaDiscoveryResponse
	wire [][]byte // nil: the resources are encoded from their messages
	// sized is the encoded size, once found (0: not yet); charge, the
	// response's bytes in the unwritten budget (unwritten.go), which its
	// buffer gives back.
	sized  int
	charge *unwrittenCharge
	// room: where the encoding is handed to gRPC from (nil: allocated).
	room *encodedRoom
	// written: the stream's count of encodings gRPC has not written out
	// (nil: not followed).
	written *writtenPool
}

// writtenPool follows a stream's encodings until gRPC has written them
// out: the codec ends each with a sentinel (sentinel), a buffer of no
// bytes whose pool this is, counted until gRPC puts it back. gRPC's
// writer puts a message's buffers back once it wrote the last byte, after
// it gave those bytes' write quota back to the stream, and a buffer of no
// bytes last in the message goes back then, not before (mem.Reader skips
// no empty buffer before the end). None counted: gRPC's flow control has
// the stream's whole write quota (64 KiB), and a send does not wait for
// it, whatever the client did or said (an ACK can name a nonce it never
// read). A message gRPC never puts back (dropped with its connection)
// stays counted, as does one the codec encoded without a sentinel
// (untracked).
type writtenPool struct {
	// followed: the server's codec encoded one of the stream's messages
	// (one with a codec of its own counts none). Under the stream's lock.
	followed  bool
	unwritten atomic.Int64
}

// sentinelRoom backs every sentinel: no bytes, and room over gRPC's
// pooling threshold, under which a buffer has no pool to go back to
// (mem.NewBuffer). Never written, and never given to a pool.
var sentinelRoom = make([]byte, 0, 1<<10+1)

// sentinel returns a counted sentinel, to end an encoding. Under the
// stream's lock (its messages are encoded one at a time).
func (p *writtenPool) sentinel() mem.Buffer {
	p.followed = true
	p.unwritten.Add(1)
	return mem.NewBuffer(&sentinelRoom, p)
}

// untracked counts, for good, a message encoded without a sentinel: from
// then on the stream is never found written out.
func (p *writtenPool) untracked() { p.unwritten.Add(1) }

// writtenOut reports whether gRPC has written out every message counted,
// and the stream's messages are followed. Under the stream's lock.
func (p *writtenPool) writtenOut() bool {
	return p.followed && p.unwritten.Load() == 0
}

// Get makes a buffer: gRPC takes none from a sentinel's pool (it is
// never split into pooled copies), but a pool must have one.
func (p *writtenPool) Get(n int) *[]byte {
	b := make([]byte, n)
	return &b
}

// Put takes a sentinel back.
func (p *writtenPool) Put(*[]byte) { p.unwritten.Add(-1) }

// encodedRoom is room for a response's encoding as gRPC is handed it (a
// buffer slice of one buffer, and a small encoding's buffer value) in the
// response's own allocation (deltaResponse), not in two of their own.
// gRPC reads them until the response is written, after SendMsg returns:
// a room is used once (a response is sent once; one sent again encodes
// into allocations of its own).
type encodedRoom struct {
	used bool
	// bufs: the encoding, and the stream's written-out sentinel after it
	// (writtenPool.sentinel).
	bufs  [2]mem.Buffer
	small mem.SliceBuffer
}

// size returns the encoded size of d, and false as deltaResponseSize does.
func (d *wiredDelta) size() (int, bool) {
	if d.sized > 0 {
		return d.sized, true
	}
	if d.wire == nil {
		return deltaResponseSize(d.DeltaDiscoveryResponse)
	}
	n, ok := headerSize(d.DeltaDiscoveryResponse)
	if !ok || len(d.wire) != len(d.Resources) {
		return 0, false
	}
	for _, w := range d.wire {
		n += 1 + protowire.SizeBytes(len(w))
	}
	return n, true
}

// resourceSize returns the encoded size of res's fields: its name, version
// and Any; false if it has any other.
func resourceSize(res *discovery.Resource) (int, bool) {
	if res == nil || res.ResourceName != nil || len(res.Aliases) > 0 || res.Ttl != nil || res.CacheControl != nil || res.Metadata != nil || len(res.ProtoReflect().GetUnknown()) > 0 {
		return 0, false
	}
	if !validUTF8(res.Version, res.Name) {
		return 0, false
	}
	if a := res.Resource; a != nil {
		if len(a.ProtoReflect().GetUnknown()) > 0 || !utf8.ValidString(a.TypeUrl) {
			return 0, false
		}
	}
	return fieldsSize(res), true
}

// fieldsSize is the encoded size of the fields of res, which resourceSize
// accepted.
func fieldsSize(res *discovery.Resource) int {
	n := stringSize(res.Version) + stringSize(res.Name)
	if a := res.Resource; a != nil {
		n += 1 + protowire.SizeBytes(anySize(a.TypeUrl, a.Value))
	}
	return n
}

// anySize is the encoded size of an Any's fields.
func anySize(typeURL string, value []byte) int {
	n := stringSize(typeURL)
	if len(value) > 0 {
		n += 1 + protowire.SizeBytes(len(value))
	}
	return n
}

func validUTF8(ss ...string) bool {
	for _, s := range ss {
		if !utf8.ValidString(s) {
			return false
		}
	}
	return true
}

// stringSize is the size of a string field of a one-byte tag: none if
// empty (proto3).
func stringSize(s string) int {
	if s == "" {
		return 0
	}
	return 1 + protowire.SizeBytes(len(s))
}

// appendDeltaResponse appends r, whose size deltaResponseSize or
// wiredDelta.size found, to b (their checks are not made again). With wire
// (wiredDelta's), each resource's encoding is copied from it.
func appendDeltaResponse(b []byte, r *discovery.DeltaDiscoveryResponse, wire [][]byte) []byte {
	b = appendString(b, 1, r.SystemVersionInfo)
	for i, res := range r.Resources {
		if wire != nil {
			b = protowire.AppendTag(b, 2, protowire.BytesType)
			b = protowire.AppendBytes(b, wire[i])
			continue
		}
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(fieldsSize(res)))
		b = appendString(b, 1, res.Version)
		if a := res.Resource; a != nil {
			b = protowire.AppendTag(b, 2, protowire.BytesType)
			b = protowire.AppendVarint(b, uint64(anySize(a.TypeUrl, a.Value)))
			b = appendString(b, 1, a.TypeUrl)
			b = appendBytes(b, 2, a.Value)
		}
		b = appendString(b, 3, res.Name)
	}
	b = appendString(b, 4, r.TypeUrl)
	b = appendString(b, 5, r.Nonce)
	for _, s := range r.RemovedResources {
		b = protowire.AppendTag(b, 6, protowire.BytesType)
		b = protowire.AppendString(b, s)
	}
	return b
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendBytes(b []byte, num protowire.Number, v []byte) []byte {
	if len(v) == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}
