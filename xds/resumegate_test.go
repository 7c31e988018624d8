package xds_test

import (
	"context"
	"sync"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/xdsbridge/xdsbridge/translate"
	"github.com/xdsbridge/xdsbridge/xds"
)

// TestResumeGatePlacesGoBack: every way a request with
// initial_resource_versions can go (its watch made; the stream cancelled
// before or after; a map the decoder refuses; many at once) gives its
// place in the resume gate back: after 200 such streams none is held,
// streams that stay open hold none once answered, and a resume after them
// is answered at once.
func TestResumeGatePlacesGoBack(t *testing.T) {
	h := newLimitHarness(t, xds.Options{})
	h.publish([]translate.Resources{svc("a", 1001), svc("b", 1002)})
	versions := map[string]string{"a": "stale", "b": "stale"}
	conns := make([]*grpc.ClientConn, 25) // 8 streams each (max_streams_per_connection: 16)
	for i := range conns {
		conns[i] = h.dial()
	}
	var wg sync.WaitGroup
	for i := range 200 {
		conn := conns[i%len(conns)]
		wg.Go(func() {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			req := &discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: []string{"a", "b"}, InitialResourceVersions: versions}
			switch i % 4 {
			case 0: // answered
				if _, err := rawDelta(ctx, conn, req); err != nil {
					t.Errorf("stream %d: %v", i, err)
				}
			case 1: // cancelled right after sending
				st, err := discovery.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
				if err == nil {
					st.Send(req)
				}
			case 2: // a map entry that is not UTF-8: refused, the stream ends
				b, _ := proto.Marshal(&discovery.DeltaDiscoveryRequest{TypeUrl: eds})
				e := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "\xff")
				b = protowire.AppendBytes(protowire.AppendTag(b, 5, protowire.BytesType), e)
				rawDeltaWire(ctx, conn, wire{mem.SliceBuffer(b)})
			case 3: // a second resume on an answered stream
				st, err := rawDelta(ctx, conn, req)
				if err == nil {
					st.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: cds, InitialResourceVersions: versions})
					st.Recv()
				}
			}
		})
	}
	wg.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for h.srv.ResumePlacesHeld() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d places of the resume gate still held after every stream ended", h.srv.ResumePlacesHeld())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Streams that stay open give their place back once answered.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := range 20 {
		if _, err := rawDelta(ctx, conns[i%len(conns)], &discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: []string{"a"}, InitialResourceVersions: versions}); err != nil {
			t.Fatal(err)
		}
	}
	if n := h.srv.ResumePlacesHeld(); n != 0 {
		t.Fatalf("20 open streams whose resumes were answered hold %d places", n)
	}
	start := time.Now()
	if _, err := rawDelta(ctx, h.conn, &discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: []string{"a"}, InitialResourceVersions: versions}); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("a resume after the others took %v (waited for a place?)", d)
	}
}
