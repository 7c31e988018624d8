package xds_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/xdsbridge/xdsbridge/translate"
	"github.com/xdsbridge/xdsbridge/xds"
)

// BenchmarkSotwChangeRoundTrip is BenchmarkDeltaChangeRoundTrip for sotw
// ADS clients (as grpc-go's proxyless clients are): one op is one
// assignment changed, sent to each of the clients (each subscribed to
// every assignment by name) and acknowledged by each, the ACK listing the
// names again as a sotw request does. The clients run in this process, so CPU/reach
// (the process's CPU per client reached) counts them too; allocations and
// CPU compared between two builds show what the server's share became.
func BenchmarkSotwChangeRoundTrip(b *testing.B) {
	const services, clients = 200, 64
	c, names := benchCache(b, services)
	// Requests not paced: a client ACKs each change.
	s := xds.NewServer(c, xds.Options{Limits: xds.Limits{MaxStreamsPerConnection: 256, RequestsPerSecond: 1e9}})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, lis) }()
	// Connections of 16 streams, as the load harness's.
	var conns []*grpc.ClientConn
	var wg sync.WaitGroup
	defer func() {
		cancel() // the clients' streams, then the server
		for _, cc := range conns {
			cc.Close()
		}
		wg.Wait()
		<-done
	}()
	received := make(chan struct{}, clients)
	for i := range clients {
		if i%16 == 0 {
			cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				b.Fatal(err)
			}
			conns = append(conns, cc)
		}
		str, err := discovery.NewAggregatedDiscoveryServiceClient(conns[len(conns)-1]).StreamAggregatedResources(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := str.Send(&discovery.DiscoveryRequest{Node: &core.Node{Id: fmt.Sprintf("n%d", i)}, TypeUrl: xds.EndpointType, ResourceNames: names}); err != nil {
			b.Fatal(err)
		}
		synced := make(chan struct{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			got := 0
			for {
				r, err := str.Recv()
				if err != nil {
					return
				}
				if got < services {
					if got += len(r.GetResources()); got == services {
						close(synced)
					}
				} else {
					received <- struct{}{}
				}
				if str.Send(&discovery.DiscoveryRequest{TypeUrl: r.GetTypeUrl(), VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce(), ResourceNames: names}) != nil {
					return
				}
			}
		}()
		select {
		case <-synced:
		case <-time.After(10 * time.Second):
			b.Fatal("a client's first sync took over 10s")
		}
	}
	variants := [2][]translate.Resources{}
	b.ReportAllocs()
	start := cpuTime()
	i := 0
	for b.Loop() {
		svc := i % services
		variants[i%2] = []translate.Resources{benchResources(svc, 10, uint32(1000+i))}
		if err := c.PublishServices(variants[i%2], nil); err != nil {
			b.Fatal(err)
		}
		i++
		for range clients {
			<-received
		}
	}
	b.ReportMetric(float64(cpuTime()-start)/1e3/float64(i*clients), "cpu-µs/reach")
}
