package xds_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/xdsbridge/xdsbridge/translate"
	"github.com/xdsbridge/xdsbridge/xds"
)

// TestSotwStreamsConvergeUnderChurn: sotw ADS clients (CDS wildcard, EDS
// by name) ACK every response while assignments change and while some of
// them drop their stream and reconnect; once changes stop, every client
// holds every assignment's latest version. Then the server is stopped
// with the streams live (no panic on a closed response channel).
func TestSotwStreamsConvergeUnderChurn(t *testing.T) {
	const services, clients, changes = 30, 24, 400
	c := xds.NewCache()
	all := make([]translate.Resources, services)
	names := make([]string, services)
	for i := range all {
		all[i] = benchResources(i, 4, 1000)
		names[i] = all[i].Cluster.GetName()
	}
	if err := c.PublishServices(all, nil); err != nil {
		t.Fatal(err)
	}
	c.MarkReady()
	s := xds.NewServer(c, xds.Options{Limits: xds.Limits{MaxStreamsPerConnection: 256, RequestsPerSecond: 1e9}})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, lis) }()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()

	var mu sync.Mutex
	want := map[string]uint32{}
	for _, n := range names {
		want[n] = 1000
	}
	held := make([]map[string]uint32, clients) // per client: cluster → port of its endpoint 0
	churn := make(chan struct{})               // closed: no more reconnects
	var wg sync.WaitGroup
	var sessions, responses atomic.Int64
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for session := 0; ; session++ {
				sessions.Add(1)
				sctx, scancel := context.WithCancel(ctx)
				str, err := discovery.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(sctx)
				if err != nil {
					scancel()
					return
				}
				node := &core.Node{Id: fmt.Sprintf("n%d-%d", i, session)}
				mine := map[string]uint32{}
				mu.Lock()
				held[i] = mine
				mu.Unlock()
				_ = str.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: xds.ClusterType})
				_ = str.Send(&discovery.DiscoveryRequest{TypeUrl: xds.EndpointType, ResourceNames: names})
				reconnect := false
				for {
					r, err := str.Recv()
					if err != nil {
						scancel()
						return
					}
					responses.Add(1)
					if r.GetTypeUrl() == xds.EndpointType {
						mu.Lock()
						for _, a := range r.GetResources() {
							var cla endpoint.ClusterLoadAssignment
							if err := a.UnmarshalTo(&cla); err != nil {
								t.Error(err)
								continue
							}
							var port uint32
							for _, le := range cla.GetEndpoints() {
								for _, e := range le.GetLbEndpoints() {
									port = max(port, e.GetEndpoint().GetAddress().GetSocketAddress().GetPortValue())
								}
							}
							mine[cla.GetClusterName()] = port
						}
						mu.Unlock()
					}
					req := &discovery.DiscoveryRequest{TypeUrl: r.GetTypeUrl(), VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()}
					if r.GetTypeUrl() == xds.EndpointType {
						req.ResourceNames = names
					}
					if str.Send(req) != nil {
						scancel()
						return
					}
					select {
					case <-churn:
					default:
						if rand.IntN(60) == 0 {
							reconnect = true
						}
					}
					if reconnect {
						break
					}
				}
				scancel()
			}
		}()
	}
	for k := range changes {
		svc := rand.IntN(services)
		port := uint32(1001 + k)
		if err := c.PublishServices([]translate.Resources{benchResources(svc, 4, port)}, nil); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		want[names[svc]] = port
		mu.Unlock()
		if rand.IntN(4) == 0 {
			time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
		}
	}
	close(churn)
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		var bad []string
		for i, m := range held {
			for n, p := range want {
				if m[n] != p {
					bad = append(bad, fmt.Sprintf("client %d: %s at %d, want %d", i, n, m[n], p))
				}
			}
		}
		mu.Unlock()
		if len(bad) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d stale assignments, e.g. %v", len(bad), bad[:min(5, len(bad))])
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("%d sessions, %d responses", sessions.Load(), responses.Load())
	cancel()
	wg.Wait()
	if err := <-done; err != nil {
		t.Log(err)
	}
}
