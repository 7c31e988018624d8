package xds

import (
	"os"

	"google.golang.org/grpc/mem"
)

// poisonPool wraps the server's pool when XDSBRIDGE_POISON_POOL=1, to
// check that nothing reads pooled bytes it did not write, or reads a
// buffer after it was put back (bufferPool does not clear the buffers it
// hands out, so either would show another client's bytes): a buffer
// handed out is filled with 0xDD over its whole capacity, and one put back
// with 0xEE (under -race, a reader after the Put is also a data race).
//
//	XDSBRIDGE_POISON_POOL=1 go test -race ./xds/
type poisonPool struct{ inner mem.BufferPool }

func (p poisonPool) Get(size int) *[]byte {
	b := p.inner.Get(size)
	full := (*b)[:cap(*b)]
	for i := range full {
		full[i] = 0xDD
	}
	return b
}

func (p poisonPool) Put(b *[]byte) {
	full := (*b)[:cap(*b)]
	for i := range full {
		full[i] = 0xEE
	}
	p.inner.Put(b)
}

func init() {
	if os.Getenv("XDSBRIDGE_POISON_POOL") == "1" {
		bufferPool = poisonPool{inner: bufferPool}
	}
}
