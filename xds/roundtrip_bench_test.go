package xds_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/xdsbridge/xdsbridge/translate"
	"github.com/xdsbridge/xdsbridge/xds"
)

// BenchmarkDeltaChangeRoundTrip is the cost of a change reaching delta
// clients over gRPC on loopback: one op is one assignment changed, sent to
// each of the clients (subscribed to every assignment, as Envoys are) and
// acknowledged by each. The clients run in this process, so CPU/reach
// (the process's CPU per client reached) counts them too; allocations and
// CPU compared between two builds show what the server's share became.
func BenchmarkDeltaChangeRoundTrip(b *testing.B) {
	benchChangeRoundTrip(b, func(ctx context.Context, cc *grpc.ClientConn, node string, names []string) (roundTripClient, error) {
		str, err := discovery.NewAggregatedDiscoveryServiceClient(cc).DeltaAggregatedResources(ctx)
		if err != nil {
			return nil, err
		}
		err = str.Send(&discovery.DeltaDiscoveryRequest{Node: &core.Node{Id: node}, TypeUrl: xds.EndpointType, ResourceNamesSubscribe: names})
		return func() (int, error) {
			r, err := str.Recv()
			if err != nil {
				return 0, err
			}
			return len(r.GetResources()), str.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: r.GetTypeUrl(), ResponseNonce: r.GetNonce()})
		}, err
	})
}

// roundTripClient reads a client's next response and answers it (an ACK);
// it returns how many resources the response carried.
type roundTripClient func() (int, error)

// benchChangeRoundTrip runs a change round trip benchmark of 64 clients,
// on connections of 16 streams as the load harness's, each subscribed
// (open) to the assignments of 200 services: one op is one assignment
// changed, and every client's response with it answered.
func benchChangeRoundTrip(b *testing.B, open func(ctx context.Context, cc *grpc.ClientConn, node string, names []string) (roundTripClient, error)) {
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
		next, err := open(ctx, conns[len(conns)-1], fmt.Sprintf("n%d", i), names)
		if err != nil {
			b.Fatal(err)
		}
		synced := make(chan struct{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			got := 0
			for {
				n, err := next()
				if err != nil {
					return
				}
				if got < services {
					if got += n; got == services {
						close(synced)
					}
				} else {
					received <- struct{}{}
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

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
