package xds_test

import (
	"context"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/xdsbridge/xdsbridge/translate"
	"github.com/xdsbridge/xdsbridge/xds"
)

// TestCommitNotBlockedByForgedACK: over gRPC, a client that stops reading
// once sent an assignment larger than its flow-control windows (so the
// server's write quota for the stream is spent) and answers the response's
// nonce anyway. A commit that changes another assignment it subscribes to
// returns at once (its response waits in the stream's own goroutine, not
// in the committing one), and a client that reads gets the change.
func TestCommitNotBlockedByForgedACK(t *testing.T) {
	h := newHarness(t, true, xds.WithMaxResponseBytes(0)) // one response
	many := make([]uint32, 8000)
	for i := range many {
		many[i] = uint32(1000 + i)
	}
	h.publish([]translate.Resources{svc("big", many...), svc("small", 1)})

	// The stuck client: windows at gRPC's least, and no reads.
	conn, err := grpc.NewClient(h.conn.Target(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
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
		h.publish([]translate.Resources{svc("small", 2)})
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
