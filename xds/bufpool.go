package xds

import (
	"math/bits"
	"sync"

	"google.golang.org/grpc/mem"
)

// bufferPool is the gRPC buffer pool of every Server, for the messages
// it reads and the responses it encodes: powers of two from 256 B to
// 4 MiB (larger buffers are not pooled).
var bufferPool mem.BufferPool = newTieredPool(8, 22)

// tieredPool is a mem.BufferPool of buffers whose capacities are powers
// of two, one sync.Pool per power. Unlike gRPC's tiered pools, it does not
// clear a buffer when it hands it out: every use writes the bytes it reads
// (gRPC reads a frame's bytes into them; the codec appends an encoding
// from the buffer's start and keeps its length), and clearing a tier's
// whole capacity, up to twice a response's size, cost a first sync as
// much as copying the responses. Safe for concurrent use.
type tieredPool struct {
	min, max uint8 // exponents of the smallest and largest tiers
	tiers    []sync.Pool
}

func newTieredPool(minExp, maxExp uint8) *tieredPool {
	return &tieredPool{min: minExp, max: maxExp, tiers: make([]sync.Pool, maxExp-minExp+1)}
}

// tier is the exponent of the smallest tier that holds size bytes.
func (p *tieredPool) tier(size int) uint8 {
	if size <= 1<<p.min {
		return p.min
	}
	return uint8(bits.Len(uint(size - 1)))
}

// Get returns a buffer of length size, its bytes as its last use left
// them.
func (p *tieredPool) Get(size int) *[]byte {
	e := p.tier(size)
	if e > p.max {
		b := make([]byte, size)
		return &b
	}
	if b, ok := p.tiers[e-p.min].Get().(*[]byte); ok {
		*b = (*b)[:size]
		return b
	}
	b := make([]byte, size, 1<<e)
	return &b
}

// Put takes back a buffer Get returned (a prefix of it); a buffer of
// another capacity is left to the collector.
func (p *tieredPool) Put(b *[]byte) {
	c := cap(*b)
	if c < 1<<p.min || c > 1<<p.max || c&(c-1) != 0 {
		return
	}
	p.tiers[bits.Len(uint(c))-1-int(p.min)].Put(b)
}
