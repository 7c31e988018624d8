package load

import (
	"bytes"
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/anypb"
)

// TestFloorTargetConverges plays a small large-shaped scenario (delta
// clients with wildcard CDS and EDS for every cluster, sotw clients with
// a few clusters each, a reconnect storm) against the floor, in this
// process and in a child process: every client converges and observes
// every change it follows, each resource version is encoded once, and
// the report names the floor and its ratios.
func TestFloorTargetConverges(t *testing.T) {
	eachServingSide(t, func(t *testing.T, sc Scenario) {
		sc.Services, sc.Clients, sc.Rate, sc.Duration = 200, 40, 200, time.Second
		sc.Targets = []string{"bridge", "floor"}
		rep, err := Run(sc, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		fl := rep.target(TargetFloor)
		if fl == nil {
			t.Fatalf("no floor target in %d targets", len(rep.Targets))
		}
		for _, tr := range rep.Targets {
			t.Logf("%s: %d changes, %d applied in %d batches, %d responses, %d (change, client) pairs, %d missing, ack p50 %.1f ms p99 %.1f ms, %d encodings for %d versions",
				tr.Target, tr.Changes, tr.Applied, tr.Batches, tr.Responses, tr.Ack.N, tr.Ack.Missing, tr.Ack.P50, tr.Ack.P99, tr.Encodings, tr.Versions)
		}
		checkTargetRun(t, fl)
		if fl.Storm == nil || !fl.Storm.Converged {
			t.Errorf("floor: the storm did not converge")
		}
		if fl.Versions == 0 || fl.Encodings != fl.Versions {
			t.Errorf("floor: %d encodings for %d resource versions, want one each", fl.Encodings, fl.Versions)
		}
		back := reportRoundTrip(t, rep)
		if back.RatiosFloor["cpu_per_change"] == 0 {
			t.Errorf("report JSON: ratios_floor %v", back.RatiosFloor)
		}
		for k := range back.RatiosFloor {
			// The floor resends everything on a resume: its storm
			// is no lower bound to compare with.
			if strings.HasPrefix(k, "storm_") {
				t.Errorf("report JSON: ratios_floor has %s", k)
			}
		}
		var out bytes.Buffer
		PrintTable(&out, rep)
		if !strings.Contains(out.String(), "\nbridge / floor: ") || !strings.Contains(out.String(), "\nfloor     sotw ") {
			t.Errorf("table without the floor target:\n%s", out.String())
		}
	})
}

// startTestFloor serves a floor of services on loopback and returns it
// and a client connection to it.
func startTestFloor(t *testing.T, services int) (*floor, *grpc.ClientConn) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	f, err := startFloor(ctx, lis, services, 2, done)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cc.Close()
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return f, cc
}

// claMarkers are the change markers of a response's assignments, by
// service.
func claMarkers(t *testing.T, anys []*anypb.Any) map[int]int32 {
	t.Helper()
	out := map[int]int32{}
	for _, a := range anys {
		var cla endpoint.ClusterLoadAssignment
		if err := a.UnmarshalTo(&cla); err != nil {
			t.Fatal(err)
		}
		out[svcIndex(cla.GetClusterName())] = markerOf(&cla)
	}
	return out
}

// recvWithin receives the next message of st, failing the test if none
// comes within a second.
func recvWithin[M any](t *testing.T, recv func() (*M, error)) *M {
	t.Helper()
	type got struct {
		m   *M
		err error
	}
	ch := make(chan got, 1)
	go func() { m, err := recv(); ch <- got{m, err} }()
	select {
	case g := <-ch:
		if g.err != nil {
			t.Fatal(g.err)
		}
		return g.m
	case <-time.After(time.Second):
		t.Fatal("no response within a second")
		return nil
	}
}

// TestFloorDeltaStreamSendsChangesPendingOnACK: a delta stream with an EDS
// response unanswered is sent nothing more of EDS; the changes made
// meanwhile go out together with the ACK; a change with nothing in
// flight goes out at once.
func TestFloorDeltaStreamSendsChangesPendingOnACK(t *testing.T) {
	f, cc := startTestFloor(t, 3)
	st, err := discovery.NewAggregatedDiscoveryServiceClient(cc).DeltaAggregatedResources(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&discovery.DeltaDiscoveryRequest{Node: &core.Node{Id: "n"}, TypeUrl: cdsType}); err != nil {
		t.Fatal(err)
	}
	cds := recvWithin(t, st.Recv)
	if cds.GetTypeUrl() != cdsType || len(cds.GetResources()) != 3 {
		t.Fatalf("first CDS response: %v", cds)
	}
	if err := st.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: cdsType, ResponseNonce: cds.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: edsType, ResourceNamesSubscribe: []string{svcName(0), svcName(1), svcName(2)}}); err != nil {
		t.Fatal(err)
	}
	eds := recvWithin(t, st.Recv)
	if eds.GetTypeUrl() != edsType || len(eds.GetResources()) != 3 {
		t.Fatalf("first EDS response: %v", eds)
	}
	markers := make([]int, 3)
	markers[0], markers[1] = 1, 2
	if err := f.apply(context.Background(), []int{0, 1}, markers, 2); err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: edsType, ResponseNonce: eds.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	next := recvWithin(t, st.Recv)
	var anys []*anypb.Any
	for _, r := range next.GetResources() {
		anys = append(anys, r.GetResource())
	}
	if got := claMarkers(t, anys); len(got) != 2 || got[0] != 1 || got[1] != 2 {
		t.Fatalf("after the ACK: %s, markers %v; want the two changes made while the first response was unanswered", next.GetTypeUrl(), got)
	}
	if err := st.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: edsType, ResponseNonce: next.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	markers[2] = 3
	if err := f.apply(context.Background(), []int{2}, markers, 3); err != nil {
		t.Fatal(err)
	}
	last := recvWithin(t, st.Recv)
	anys = anys[:0]
	for _, r := range last.GetResources() {
		anys = append(anys, r.GetResource())
	}
	if got := claMarkers(t, anys); len(got) != 1 || got[2] != 3 {
		t.Fatalf("a change with nothing in flight: markers %v, want service 2's change 3", got)
	}
}

// TestFloorSotwStreamSendsChangesPendingOnACK: a sotw stream following
// two assignments is sent a change of one it follows on the ACK of the
// response in flight when it was made, and nothing of one it does not
// follow.
func TestFloorSotwStreamSendsChangesPendingOnACK(t *testing.T) {
	f, cc := startTestFloor(t, 3)
	st, err := discovery.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	names := []string{svcName(0), svcName(1)}
	if err := st.Send(&discovery.DiscoveryRequest{Node: &core.Node{Id: "n"}, TypeUrl: edsType, ResourceNames: names}); err != nil {
		t.Fatal(err)
	}
	first := recvWithin(t, st.Recv)
	if got := claMarkers(t, first.GetResources()); len(got) != 2 {
		t.Fatalf("first EDS response: markers %v, want services 0 and 1", got)
	}
	markers := []int{0, 1, 2}
	if err := f.apply(context.Background(), []int{1, 2}, markers, 2); err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: edsType, ResourceNames: names, VersionInfo: first.GetVersionInfo(), ResponseNonce: first.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	next := recvWithin(t, st.Recv)
	if got := claMarkers(t, next.GetResources()); len(got) != 1 || got[1] != 1 {
		t.Fatalf("after the ACK: markers %v, want service 1's change 1 only", got)
	}
	if next.GetVersionInfo() == first.GetVersionInfo() || next.GetNonce() == first.GetNonce() {
		t.Errorf("version %q nonce %q, as the first response's", next.GetVersionInfo(), next.GetNonce())
	}
}
