package xds_test

import (
	"context"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	endpointservice "github.com/envoyproxy/go-control-plane/envoy/service/endpoint/v3"
	"google.golang.org/genproto/googleapis/rpc/status"

	"github.com/xdsbridge/xdsbridge/translate"
	"github.com/xdsbridge/xdsbridge/xds"
)

// TestNACKLabelOfSingleTypeStream: a NACK on a stream of one type
// (DeltaEndpoints) whose request carries no type URL, as the protocol
// allows there, is counted under the stream's type, not "other".
func TestNACKLabelOfSingleTypeStream(t *testing.T) {
	h := newLimitHarness(t, xds.Options{})
	h.publish([]translate.Resources{svc("a", 1001)})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := endpointservice.NewEndpointDiscoveryServiceClient(h.conn).DeltaEndpoints(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&discovery.DeltaDiscoveryRequest{ResourceNamesSubscribe: []string{"a"}}); err != nil {
		t.Fatal(err)
	}
	r, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&discovery.DeltaDiscoveryRequest{ResponseNonce: r.GetNonce(), ErrorDetail: &status.Status{Code: 3, Message: "bad"}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for metricVec2(t, h.reg, "xdsbridge_xds_nacks_total", eds, "delta") != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("NACK counted under %s: %v, under other: %v; want 1 under %s", eds,
				metricVec2(t, h.reg, "xdsbridge_xds_nacks_total", eds, "delta"),
				metricVec2(t, h.reg, "xdsbridge_xds_nacks_total", "other", "delta"), eds)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := metricVec2(t, h.reg, "xdsbridge_xds_nacks_total", "other", "delta"); got != 0 {
		t.Fatalf("%v NACKs counted under other", got)
	}
}
