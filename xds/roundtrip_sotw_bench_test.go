package xds_test

import (
	"context"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"

	"github.com/xdsbridge/xdsbridge/xds"
)

// BenchmarkSotwChangeRoundTrip is BenchmarkDeltaChangeRoundTrip for sotw
// ADS clients (as grpc-go's proxyless clients are): one op is one
// assignment changed, sent to each of the clients (each subscribed to
// every assignment by name) and acknowledged by each, the ACK listing the
// names again as a sotw request does.
func BenchmarkSotwChangeRoundTrip(b *testing.B) {
	benchChangeRoundTrip(b, func(ctx context.Context, cc *grpc.ClientConn, node string, names []string) (roundTripClient, error) {
		str, err := discovery.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
		if err != nil {
			return nil, err
		}
		err = str.Send(&discovery.DiscoveryRequest{Node: &core.Node{Id: node}, TypeUrl: xds.EndpointType, ResourceNames: names})
		return func() (int, error) {
			r, err := str.Recv()
			if err != nil {
				return 0, err
			}
			return len(r.GetResources()), str.Send(&discovery.DiscoveryRequest{TypeUrl: r.GetTypeUrl(), VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce(), ResourceNames: names})
		}, err
	})
}
