package xds_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	_ "google.golang.org/grpc/encoding/gzip" // registers gzip, which the server would compress with

	"github.com/xdsbridge/xdsbridge/sources"
	"github.com/xdsbridge/xdsbridge/translate"
	"github.com/xdsbridge/xdsbridge/xds"
)

// TestCommitNotBlockedByForgedACK: over gRPC, a client that stops reading
// once sent an assignment larger than its flow-control windows (so the
// server's write quota for the stream is spent) answers the response's
// nonce anyway. A commit that changes another assignment it subscribes to
// returns at once (its response waits in the stream's own goroutine, not
// in the committing one), and a client that reads gets the change. With
// gzip the client asks for compressed responses (this test binary
// registers gzip, and gRPC compresses with any compressor registered):
// a compressed message goes from gRPC's own buffers, so the server sends
// its delta responses uncompressed.
func TestCommitNotBlockedByForgedACK(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	big := sources.Service{Name: "big"}
	for range 30000 { // incompressible: random addresses and ports
		a := r.Uint32()
		big.Endpoints = append(big.Endpoints, sources.Endpoint{
			Address: fmt.Sprintf("10.%d.%d.%d", a>>16&0xff, a>>8&0xff, a&0xff), Port: 1 + r.Uint32N(65000)})
	}
	bigRes, diags := translate.Service(big)
	if len(diags) > 0 {
		t.Fatal(diags)
	}
	for _, tc := range []struct {
		name string
		call []grpc.CallOption
	}{{"uncompressed", nil}, {"gzip", []grpc.CallOption{grpc.UseCompressor("gzip")}}} {
		t.Run(tc.name, func(t *testing.T) { commitWithForgedACK(t, bigRes, tc.call...) })
	}
}

func commitWithForgedACK(t *testing.T, big translate.Resources, call ...grpc.CallOption) {
	h := newHarness(t, true, xds.WithMaxResponseBytes(0)) // one response
	h.publish([]translate.Resources{big, svc("small", 1)})

	// The stuck client: windows at gRPC's least, and no reads.
	conn, err := grpc.NewClient(h.conn.Target(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10), grpc.WithDefaultCallOptions(call...))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stuck, err := discovery.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stuck.Send(&discovery.DeltaDiscoveryRequest{Node: &core.Node{Id: "stuck"}, TypeUrl: eds, ResourceNamesSubscribe: []string{"big", "small"}}); err != nil {
		t.Fatal(err)
	}

	honest := h.delta("honest")
	honest.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: []string{"small"}})
	honest.ack(honest.recv())
	h.waitWatches(1, eds) // the honest client's; the stuck one's was answered
	// The nonce of the response it never read: the stream's first.
	if err := stuck.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResponseNonce: "1"}); err != nil {
		t.Fatal(err)
	}
	h.waitWatches(2, eds) // the forged ACK re-armed its watch

	published := make(chan struct{})
	go func() {
		defer close(published)
		h.publish([]translate.Resources{big, svc("small", 2)})
	}()
	select {
	case <-published:
	case <-time.After(5 * time.Second):
		t.Fatal("the commit is blocked in a send to the stream that reads nothing")
	}
	if got := names(honest.recv()); len(got) != 1 || got[0] != "small" {
		t.Fatalf("the reading client was sent %v, want small", got)
	}
}
