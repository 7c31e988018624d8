package xds_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/proto"

	"github.com/xdsbridge/xdsbridge/xds"
)

// TestPaddedRequestFrames: a delta request sent in padded DATA frames, each
// over gRPC's pooling threshold (so read into the server's pool, which does
// not clear what it hands out, then joined into one of its buffers to be
// decoded), is decoded as sent: the response carries exactly the served
// names it subscribes to. Run with XDSBRIDGE_POISON_POOL=1 too.
func TestPaddedRequestFrames(t *testing.T) {
	c := xds.NewCache()
	c.MarkReady()
	all, names := services(60)
	if err := c.PublishServices(all, nil); err != nil {
		t.Fatal(err)
	}
	addr := runServer(t, xds.NewServer(c, xds.Options{}))

	sub := slices.Clone(names)
	for i := range 100 {
		sub = append(sub, fmt.Sprintf("not-served-%03d-%s", i, bytes.Repeat([]byte{'x'}, 30)))
	}
	msg, err := proto.Marshal(&discovery.DeltaDiscoveryRequest{TypeUrl: xds.EndpointType, ResourceNamesSubscribe: sub})
	if err != nil {
		t.Fatal(err)
	}
	framed := append([]byte{0, 0, 0, 0, 0}, msg...)
	binary.BigEndian.PutUint32(framed[1:], uint32(len(msg)))

	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"},
		{":path", "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources"},
		{":authority", addr}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	pad := make([]byte, 211)
	for rest := framed; len(rest) > 0; {
		k := min(len(rest), 1500)
		if len(rest)-k < 1100 {
			k = len(rest) // the last frame over the threshold too
		}
		if err := fr.WriteDataPadded(1, false, rest[:k], pad); err != nil {
			t.Fatal(err)
		}
		rest = rest[k:]
	}

	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	var got []byte
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading the response: %v", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.RSTStreamFrame:
			t.Fatalf("stream reset: %v", f.ErrCode)
		case *http2.MetaHeadersFrame:
			if f.StreamEnded() {
				t.Fatalf("stream ended: %v", f.Fields)
			}
		case *http2.DataFrame:
			if f.StreamID != 1 {
				continue
			}
			got = append(got, f.Data()...)
		}
		if len(got) >= 5 && len(got) >= 5+int(binary.BigEndian.Uint32(got[1:])) {
			break
		}
	}
	var resp discovery.DeltaDiscoveryResponse
	if err := proto.Unmarshal(got[5:5+binary.BigEndian.Uint32(got[1:])], &resp); err != nil {
		t.Fatal(err)
	}
	var sent []string
	for _, r := range resp.GetResources() {
		sent = append(sent, r.GetName())
	}
	slices.Sort(sent)
	if !slices.Equal(sent, names) {
		t.Fatalf("the response carries %d names %q, want the %d subscribed and served %q", len(sent), sent, len(names), names)
	}
}
