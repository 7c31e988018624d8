// The LinearCache baseline: go-control-plane's per-type LinearCache (one
// for clusters, one for assignments, behind a MuxCache), what a competent
// engineer would pick for EDS: per-resource versions, delta-capable, each
// change applied as an update of only the resources it changed.

package load

import (
	"context"
	"net"
	"sync"
	"unsafe"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/protobuf/proto"

	"github.com/xdsbridge/xdsbridge/translate"
)

// linear serves clusters and assignments from one LinearCache each. A
// LinearCache is shared by every node (no per-node snapshots); its sotw
// responses carry the requested names only (every requested cluster, since
// CDS responses are full state; the changed assignments only), its delta
// responses the resources whose version (a hash of the encoding) the
// stream does not hold. Each resource version is encoded once, lazily, and
// its bytes shared by every response.
type linear struct {
	endpoints int
	cds, eds  *cache.LinearCache
	last      []translate.Resources // owned by the applier

	// encoded are the distinct encodings seen in responses: the Any
	// values of the same resource version share one byte array.
	mu      sync.Mutex
	encoded map[*byte]struct{}
}

func startLinear(ctx context.Context, lis net.Listener, services, endpoints int, done chan<- error) (*linear, error) {
	l := &linear{endpoints: endpoints, last: make([]translate.Resources, services), encoded: map[*byte]struct{}{}}
	clusters := make(map[string]types.Resource, services)
	loads := make(map[string]types.Resource, services)
	for i := range services {
		r, _ := translate.Service(service(i, endpoints, 0))
		l.last[i] = r
		clusters[r.Cluster.GetName()], loads[r.Load.GetClusterName()] = r.Cluster, r.Load
	}
	l.cds = cache.NewLinearCache(resource.ClusterType, cache.WithInitialResources(clusters))
	l.eds = cache.NewLinearCache(resource.EndpointType, cache.WithInitialResources(loads))
	mux := &cache.MuxCache{
		Classify:      func(r *cache.Request) string { return r.GetTypeUrl() },
		ClassifyDelta: func(r *cache.DeltaRequest) string { return r.GetTypeUrl() },
		Caches:        map[string]cache.Cache{resource.ClusterType: l.cds, resource.EndpointType: l.eds},
	}
	cb := serverv3.CallbackFuncs{
		StreamResponseFunc: func(_ context.Context, _ int64, _ *discovery.DiscoveryRequest, r *discovery.DiscoveryResponse) {
			l.mu.Lock()
			for _, a := range r.GetResources() {
				l.encoded[unsafe.SliceData(a.GetValue())] = struct{}{}
			}
			l.mu.Unlock()
		},
		StreamDeltaResponseFunc: func(_ int64, _ *discovery.DeltaDiscoveryRequest, r *discovery.DeltaDiscoveryResponse) {
			l.mu.Lock()
			for _, res := range r.GetResources() {
				l.encoded[unsafe.SliceData(res.GetResource().GetValue())] = struct{}{}
			}
			l.mu.Unlock()
		},
	}
	serveGRPC(ctx, lis, serverv3.NewServer(ctx, mux, cb), done)
	return l, nil
}

// apply translates the touched services again and updates, in each cache,
// only the resources that changed.
func (l *linear) apply(_ context.Context, touched, markers []int, _ int) error {
	clusters := map[string]types.Resource{}
	loads := map[string]types.Resource{}
	for _, svc := range touched {
		r, _ := translate.Service(service(svc, l.endpoints, markers[svc]))
		if !proto.Equal(r.Cluster, l.last[svc].Cluster) {
			clusters[r.Cluster.GetName()] = r.Cluster
		}
		if !proto.Equal(r.Load, l.last[svc].Load) {
			loads[r.Load.GetClusterName()] = r.Load
		}
		l.last[svc] = r
	}
	// Clusters before their assignments.
	if len(clusters) > 0 {
		if err := l.cds.UpdateResources(clusters, nil); err != nil {
			return err
		}
	}
	if len(loads) > 0 {
		return l.eds.UpdateResources(loads, nil)
	}
	return nil
}

func (l *linear) encodings() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return uint64(len(l.encoded))
}
