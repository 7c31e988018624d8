package xds

import (
	"fmt"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/xdsbridge/xdsbridge/xds/store"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// codec is gRPC's proto codec with three differences. A message is encoded
// into a buffer from the server's own pool, whose tiers are powers of two:
// gRPC's default pool hands any message over 32 KiB a 1 MiB buffer and
// keeps it across a garbage collection; a thousand Envoys receiving their
// first state in parts would hold a gigabyte of such buffers. Pooling
// still matters: those first states are ~2 GB of encoded responses. And a
// delta request's names and initial_resource_versions are decoded by
// decode.go, not through reflection, with the strings of the names and
// versions the store serves (wire); a guarded stream's resume is compared
// with the store as it is decoded (resumed.go), and an ACK without the
// runtime (decodeack.go). And a delta response is encoded by encode.go,
// which appends its resources' encodings instead of walking them. A
// response a guarded stream sends carries its bytes' charge in the
// unwritten budget (unwritten.go), which its buffer gives back.
type codec struct {
	wire *store.WireIndex // nil: copies
	// out is the pool of the encodings (nil: bufferPool); a test's counts
	// what is held.
	out mem.BufferPool
}

// outPool is the pool responses are encoded into.
func (c codec) outPool() mem.BufferPool {
	if c.out != nil {
		return c.out
	}
	return bufferPool
}

var _ encoding.CodecV2 = codec{}

func (codec) Name() string { return "proto" }

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	pool := c.outPool()
	switch d := v.(type) {
	case *wiredDelta:
		if size, ok := d.size(); ok {
			bufs := encodeDeltaResponseIn(d.room, pool, size, d.DeltaDiscoveryResponse, d.wire, d.charge)
			if d.written != nil {
				// Last: gRPC puts it back after every byte before it
				// was written (writtenPool).
				bufs = append(bufs, d.written.sentinel())
			}
			return bufs, nil
		}
		if d.written != nil {
			d.written.untracked()
		}
		v = d.DeltaDiscoveryResponse
	case *sizedMsg:
		return marshalSized(pool, d.Message, d.size, d.charge)
	}
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("xds codec: cannot encode %T", v)
	}
	if r, ok := m.(*discovery.DeltaDiscoveryResponse); ok {
		if size, ok := deltaResponseSize(r); ok {
			return encodeDeltaResponse(pool, size, r, nil, nil), nil
		}
	}
	return marshalSized(pool, m, proto.Size(m), nil)
}

// marshalSized encodes m, whose size proto.Size just found (it is cached
// in m), into a buffer from pool; charge as encodeDeltaResponse's.
func marshalSized(pool mem.BufferPool, m proto.Message, size int, charge *unwrittenCharge) (mem.BufferSlice, error) {
	opts := proto.MarshalOptions{UseCachedSize: true}
	if mem.IsBelowBufferPoolingThreshold(size) {
		b, err := opts.Marshal(m)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	buf := pool.Get(size)
	b, err := opts.MarshalAppend((*buf)[:0], m)
	if err != nil {
		pool.Put(buf)
		return nil, err
	}
	*buf = b
	if charge != nil {
		pool = charge.pool(pool)
	}
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

// encodeDeltaResponse encodes r, of size bytes (encode.go), into a buffer
// from pool. wire: as appendDeltaResponse's. charge: r's bytes in the
// unwritten budget (nil: none), given back with the buffer.
func encodeDeltaResponse(pool mem.BufferPool, size int, r *discovery.DeltaDiscoveryResponse, wire [][]byte, charge *unwrittenCharge) mem.BufferSlice {
	return encodeDeltaResponseIn(nil, pool, size, r, wire, charge)
}

// encodeDeltaResponseIn is encodeDeltaResponse, handing the encoding over
// from room (nil or used: from allocations of its own).
func encodeDeltaResponseIn(room *encodedRoom, pool mem.BufferPool, size int, r *discovery.DeltaDiscoveryResponse, wire [][]byte, charge *unwrittenCharge) mem.BufferSlice {
	if room != nil && room.used {
		room = nil
	}
	if mem.IsBelowBufferPoolingThreshold(size) {
		b := mem.SliceBuffer(appendDeltaResponse(make([]byte, 0, size), r, wire))
		if room == nil {
			return mem.BufferSlice{b}
		}
		room.used, room.small = true, b
		room.bufs[0] = &room.small // a pointer: no allocation for the interface
		return room.bufs[:1]
	}
	buf := pool.Get(size)
	*buf = appendDeltaResponse((*buf)[:0], r, wire)
	if charge != nil {
		pool = charge.pool(pool)
	}
	if room == nil {
		return mem.BufferSlice{mem.NewBuffer(buf, pool)}
	}
	room.used, room.bufs[0] = true, mem.NewBuffer(buf, pool)
	return room.bufs[:1]
}

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	gm, guarded := v.(*guardedMsg)
	if guarded {
		v = gm.m
	}
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("xds codec: cannot decode into %T", v)
	}
	buf := data.MaterializeToBuffer(bufferPool)
	defer func() { buf.Free() }()
	var sc deltaScan
	if guarded {
		// A request over a limit is not decoded; the guarded stream
		// returns the limit's error.
		gm.checked = true
		if gm.a.checkWireScan(m, buf.ReadOnlyData(), &sc) != nil {
			return nil
		}
	}
	if dr, ok := m.(*discovery.DeltaDiscoveryRequest); ok {
		b := buf.ReadOnlyData()
		if !sc.valid {
			if sc, ok = scanDelta(b); !ok {
				return proto.Unmarshal(b, m) // its error
			}
		}
		var defType []byte
		if guarded {
			defType = gm.a.defType
		}
		if guarded && sc.entries > 0 {
			// A resume is decoded with a place in the resume gate
			// (resumegate.go); one that waits for it waits without
			// this copy (gRPC holds the bytes meanwhile).
			g := gm.a.g
			took := g.resumes.tryEnter()
			if !took {
				buf.Free()
				took = g.resumes.enter()
				outcome := "place"
				if !took {
					outcome = "none"
				}
				g.m.resumesWaited.WithLabelValues(outcome).Inc()
				buf = data.MaterializeToBuffer(bufferPool)
				b = buf.ReadOnlyData()
				sc, _ = scanDelta(b) // its type URL is read from b
			}
			if took {
				gm.a.tookResume()
			}
		}
		// A guarded stream's resume is compared with the store as it is
		// decoded (resumed.go); the stream's handler takes what was
		// current from the stream's accounting.
		r, err := decodeScanned(b, sc, dr, c.wire, defType, guarded)
		if r != nil && err == nil {
			gm.a.keepResumed(dr, r)
		}
		return err
	}
	if sr, ok := m.(*discovery.DiscoveryRequest); ok && guarded {
		return gm.a.decodeSotw(buf.ReadOnlyData(), sr)
	}
	return proto.Unmarshal(buf.ReadOnlyData(), m)
}
