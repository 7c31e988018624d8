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
	_ "google.golang.org/grpc/encoding/gzip" // registers "gzip": the server compresses for a client asking it

	"github.com/xdsbridge/xdsbridge/sources"
	"github.com/xdsbridge/xdsbridge/translate"
	"github.com/xdsbridge/xdsbridge/xds"
)

// TestCommitNotBlockedByForgedACKCompressed is TestCommitNotBlockedByForgedACK
// with a client that asks for gzip-compressed responses (grpc-encoding: gzip;
// the server compresses with any compressor registered in the process). gRPC
// compresses the codec's buffers into new ones and frees the codec's (the
// sentinel with them) when SendMsg returns, before a byte is written: the
// stream is found written out while its write quota is spent.
func TestCommitNotBlockedByForgedACKCompressed(t *testing.T) {
	h := newHarness(t, true, xds.WithMaxResponseBytes(0)) // one response
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
	h.publish([]translate.Resources{bigRes, svc("small", 1)})

	conn, err := grpc.NewClient(h.conn.Target(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10),
		grpc.WithDefaultCallOptions(grpc.UseCompressor("gzip")))
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
	h.waitWatches(1, eds)
	if err := stuck.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResponseNonce: "1"}); err != nil {
		t.Fatal(err)
	}
	h.waitWatches(2, eds)

	published := make(chan struct{})
	go func() {
		defer close(published)
		h.publish([]translate.Resources{bigRes, svc("small", 2)})
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
