package load

import (
	"context"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
)

// TestFloorSotwNamesAddedAfterACK: a sotw client that adds a name after
// it ACKed the last response sends the new names with that response's
// nonce (the latest the server sent: not stale). The server must answer
// with the added assignment.
func TestFloorSotwNamesAddedAfterACK(t *testing.T) {
	_, cc := startTestFloor(t, 3)
	st, err := discovery.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	names := []string{svcName(0)}
	if err := st.Send(&discovery.DiscoveryRequest{Node: &core.Node{Id: "n"}, TypeUrl: edsType, ResourceNames: names}); err != nil {
		t.Fatal(err)
	}
	first := recvWithin(t, st.Recv)
	if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: edsType, ResourceNames: names, VersionInfo: first.GetVersionInfo(), ResponseNonce: first.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the ACK is handled
	names = []string{svcName(0), svcName(1)}
	if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: edsType, ResourceNames: names, VersionInfo: first.GetVersionInfo(), ResponseNonce: first.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	next := recvWithin(t, st.Recv)
	if got := claMarkers(t, next.GetResources()); len(got) != 1 {
		t.Fatalf("after adding %s: markers %v, want its assignment", svcName(1), got)
	}
}

// TestFloorSotwWildcardCDSKeptOnNACK: a sotw client with wildcard CDS (no
// names in its first request) stays wildcard when a later request of
// the type has no names either (here a NACK, which the floor takes as an
// ACK): a cluster changed afterwards is sent to it.
func TestFloorSotwWildcardCDSKeptOnNACK(t *testing.T) {
	f, cc := startTestFloor(t, 3)
	st, err := discovery.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&discovery.DiscoveryRequest{Node: &core.Node{Id: "n"}, TypeUrl: cdsType}); err != nil {
		t.Fatal(err)
	}
	first := recvWithin(t, st.Recv)
	if len(first.GetResources()) != 3 {
		t.Fatalf("first CDS response: %d clusters, want 3", len(first.GetResources()))
	}
	if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: cdsType, ResponseNonce: first.GetNonce(), ErrorDetail: &status.Status{Code: 3, Message: "rejected"}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the NACK is handled
	// A cluster changes (the harness's never do; a control plane's do):
	// what apply does for a changed cluster.
	f.res[floorCDS][1].Store(f.encode(floorCDS, 1, f.res[floorCDS][1].Load().value))
	var changed [floorTypes][]int
	changed[floorCDS] = []int{1}
	f.mu.Lock()
	for s := range f.streams {
		s.changed(&changed)
	}
	f.mu.Unlock()
	next := recvWithin(t, st.Recv)
	if len(next.GetResources()) != 3 {
		t.Fatalf("after a cluster changed: %d clusters, want the full state (3)", len(next.GetResources()))
	}
}

// TestFloorDeltaResubscribeResends: a delta client that subscribes again
// to a name it is subscribed to must be sent the resource (xDS protocol:
// the client may have forgotten it).
func TestFloorDeltaResubscribeResends(t *testing.T) {
	_, cc := startTestFloor(t, 3)
	st, err := discovery.NewAggregatedDiscoveryServiceClient(cc).DeltaAggregatedResources(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	sub := []string{svcName(0)}
	if err := st.Send(&discovery.DeltaDiscoveryRequest{Node: &core.Node{Id: "n"}, TypeUrl: edsType, ResourceNamesSubscribe: sub}); err != nil {
		t.Fatal(err)
	}
	first := recvWithin(t, st.Recv)
	if err := st.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: edsType, ResponseNonce: first.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: edsType, ResourceNamesSubscribe: sub}); err != nil {
		t.Fatal(err)
	}
	next := recvWithin(t, st.Recv)
	if len(next.GetResources()) != 1 || next.GetResources()[0].GetName() != svcName(0) {
		t.Fatalf("after subscribing again: %v, want %s", next.GetResources(), svcName(0))
	}
}
