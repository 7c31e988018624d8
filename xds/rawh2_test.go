package xds_test

import (
	"bytes"
	"fmt"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// rawHeaderStreams opens a connection of its own to addr, speaking HTTP/2
// itself (ignoring the server's SETTINGS_MAX_HEADER_LIST_SIZE, which a
// grpc-go client obeys), and opens n delta ADS streams on it, each with
// headers that decode to about decoded bytes. Amplified, they are one
// 3,000-byte header repeated: HPACK sends it once, then as an index of a
// byte or two, of a binary header (which gRPC copies, decoding it from
// base64). The streams send no message. It returns how many the server
// reset within wait, whether it closed the connection, the bytes written,
// and the connection (the streams stay open until it is closed).
func rawHeaderStreams(t testing.TB, addr string, n, decoded int, amplified bool, wait time.Duration) (reset int, closed bool, wrote int, c net.Conn) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	cw := &countWriter{w: c}
	if _, err := cw.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(cw, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	val := make([]byte, 3000)
	for i := range val {
		val[i] = 'a' + byte(i%26)
	}
	for i := range n {
		buf.Reset()
		for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"},
			{":path", "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources"},
			{":authority", addr}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
			enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		for j := 0; j*(len(val)+40) < decoded; j++ {
			if amplified {
				// Binary: gRPC decodes each from base64 into a copy of
				// its own (a text header shares HPACK's table string).
				enc.WriteField(hpack.HeaderField{Name: "x-pad-bin", Value: string(val)})
			} else {
				enc.WriteField(hpack.HeaderField{Name: "x-pad", Value: fmt.Sprintf("%d-%d-%s", i, j, val)}) // never in the table
			}
		}
		block := buf.Bytes()
		id := uint32(2*i + 1)
		first := min(len(block), 16384)
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block[:first], EndHeaders: first == len(block)}); err != nil {
			closed = true
			break
		}
		for block = block[first:]; len(block) > 0; {
			k := min(len(block), 16384)
			if err := fr.WriteContinuation(id, k == len(block), block[:k]); err != nil {
				closed = true
				break
			}
			block = block[k:]
		}
	}
	resets := map[uint32]bool{}
	c.SetReadDeadline(time.Now().Add(wait))
	for len(resets) < n {
		f, err := fr.ReadFrame()
		if err != nil {
			if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
				closed = true
			}
			break
		}
		switch f := f.(type) {
		case *http2.RSTStreamFrame:
			resets[f.StreamID] = true
		case *http2.GoAwayFrame:
			closed = true
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		}
	}
	c.SetReadDeadline(time.Time{})
	return len(resets), closed, cw.n, c
}

type countWriter struct {
	w interface{ Write([]byte) (int, error) }
	n int
}

func (c *countWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += n
	return n, err
}
