// The baseline: go-control-plane's SnapshotCache as most control planes use
// it, one snapshot of every cluster and assignment rebuilt with a new
// version and set for every node on each change.

package load

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync/atomic"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"

	"github.com/xdsbridge/xdsbridge/translate"
)

type baseline struct {
	services, endpoints int
	nodes               []string
	sc                  cache.SnapshotCache

	sent   atomic.Uint64 // resources in responses
	hashed atomic.Uint64 // resources hashed for delta
}

func startBaseline(ctx context.Context, lis net.Listener, services, endpoints, clients int, done chan<- error) (*baseline, error) {
	b := &baseline{services: services, endpoints: endpoints}
	for i := range clients {
		b.nodes = append(b.nodes, nodeID(i))
	}
	// ads=false: in ADS mode the snapshot cache answers a sotw request
	// only if it names every resource of the type in the snapshot, which
	// grpc-go-like clients using a few clusters never do.
	b.sc = cache.NewSnapshotCache(false, cache.IDHash{}, nil)
	if err := b.setSnapshot(ctx, make([]int, services), 0); err != nil {
		return nil, err
	}
	cb := serverv3.CallbackFuncs{
		StreamResponseFunc: func(_ context.Context, _ int64, _ *discovery.DiscoveryRequest, r *discovery.DiscoveryResponse) {
			b.sent.Add(uint64(len(r.GetResources())))
		},
		StreamDeltaResponseFunc: func(_ int64, _ *discovery.DeltaDiscoveryRequest, r *discovery.DeltaDiscoveryResponse) {
			b.sent.Add(uint64(len(r.GetResources())))
		},
	}
	serveGRPC(ctx, lis, serverv3.NewServer(ctx, b.sc, cb), done)
	return b, nil
}

// serveGRPC serves an ADS server on lis until ctx is done; done gets
// Serve's error (nil once stopped).
func serveGRPC(ctx context.Context, lis net.Listener, xs serverv3.Server, done chan<- error) {
	gs := grpc.NewServer(grpc.MaxConcurrentStreams(1 << 20))
	discovery.RegisterAggregatedDiscoveryServiceServer(gs, xs)
	runGRPC(ctx, gs, lis, done)
}

// runGRPC serves gs on lis until ctx is done; done gets Serve's error
// (nil once stopped).
func runGRPC(ctx context.Context, gs *grpc.Server, lis net.Listener, done chan<- error) {
	go func() {
		err := gs.Serve(lis)
		if errors.Is(err, grpc.ErrServerStopped) {
			err = nil
		}
		done <- err
	}()
	go func() { <-ctx.Done(); gs.Stop() }()
}

// apply is the baseline's update: every service translated again, a new
// snapshot with a new version, set for every node.
func (b *baseline) apply(ctx context.Context, _, markers []int, last int) error {
	return b.setSnapshot(ctx, markers, last)
}

func (b *baseline) setSnapshot(ctx context.Context, markers []int, seq int) error {
	clusters := make([]types.Resource, b.services)
	loads := make([]types.Resource, b.services)
	for i := range b.services {
		r, _ := translate.Service(service(i, b.endpoints, markers[i]))
		clusters[i], loads[i] = r.Cluster, r.Load
	}
	snap, err := cache.NewSnapshot("s"+strconv.Itoa(seq), map[resource.Type][]types.Resource{
		resource.ClusterType:  clusters,
		resource.EndpointType: loads,
	})
	if err != nil {
		return err
	}
	for _, n := range b.nodes {
		if err := b.sc.SetSnapshot(ctx, n, snap); err != nil {
			return err
		}
	}
	if snap.VersionMap != nil {
		b.hashed.Add(uint64(2 * b.services))
	}
	return nil
}

func (b *baseline) encodings() uint64 { return b.sent.Load() + b.hashed.Load() }
