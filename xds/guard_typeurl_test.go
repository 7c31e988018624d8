package xds_test

import (
	"context"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	endpointservice "github.com/envoyproxy/go-control-plane/envoy/service/endpoint/v3"
	"google.golang.org/grpc/codes"

	"github.com/xdsbridge/xdsbridge/translate"
	"github.com/xdsbridge/xdsbridge/xds"
)

// TestGuardNamesPerStreamTypeURLAlias: on a stream of one type (here
// DeltaEndpoints), a request without a type URL is of the stream's type,
// so the server holds the names of "" and of the explicit type URL in one
// subscription: 120 names over max_names_per_stream 100 must end the
// stream, not be counted as two types of 60.
func TestGuardNamesPerStreamTypeURLAlias(t *testing.T) {
	h := newLimitHarness(t, xds.Options{Limits: xds.Limits{MaxNamesPerStream: 100}})
	h.publish([]translate.Resources{svc("a", 1001)})
	n := madeUpNames(120, 16, "rv3")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := endpointservice.NewEndpointDiscoveryServiceClient(h.conn).DeltaEndpoints(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&discovery.DeltaDiscoveryRequest{ResourceNamesSubscribe: n[:60]}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: n[60:]}); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		for {
			if _, err := st.Recv(); err != nil {
				errc <- err
				return
			}
		}
	}()
	select {
	case err := <-errc:
		wantLimit(t, err, codes.ResourceExhausted, "max_names_per_stream")
	case <-time.After(3 * time.Second):
		t.Fatal("a stream subscribed to 120 assignments (60 without a type URL, 60 with) was served under max_names_per_stream 100")
	}
}
