package translate

import (
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// MakeBeforeBreakRuntimeKey is the runtime key of the route
// MakeBeforeBreakRoute adds: one no Envoy is expected to set (unset, the
// route matches 0% of requests; grpc-go ignores runtime keys).
const MakeBeforeBreakRuntimeKey = "xdsbridge.make_before_break"

// MakeBeforeBreakRouteName names the added route.
const MakeBeforeBreakRouteName = "xdsbridge-make-before-break"

// MakeBeforeBreakRoute returns a copy of rc with one more route at the end
// of each virtual host, that never matches (prefix "/" matched by 0/100
// of requests: runtime_fraction with default 0 under
// MakeBeforeBreakRuntimeKey), whose action sends to clusters in equal
// shares. A client that makes the clusters its routes name active (grpc-go
// adds each to its cluster manager) has them before a version routes to
// them (see xds/mbb.go); none of its requests takes that route. clusters
// must not be empty.
func MakeBeforeBreakRoute(rc *route.RouteConfiguration, clusters []string) *route.RouteConfiguration {
	out := proto.Clone(rc).(*route.RouteConfiguration)
	wc := &route.WeightedCluster{}
	for _, c := range clusters {
		wc.Clusters = append(wc.Clusters, &route.WeightedCluster_ClusterWeight{Name: c, Weight: wrapperspb.UInt32(1)})
	}
	r := &route.Route{
		Name: MakeBeforeBreakRouteName,
		Match: &route.RouteMatch{
			PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"},
			RuntimeFraction: &core.RuntimeFractionalPercent{
				DefaultValue: &typev3.FractionalPercent{Numerator: 0, Denominator: typev3.FractionalPercent_HUNDRED},
				RuntimeKey:   MakeBeforeBreakRuntimeKey,
			},
		},
		Action: &route.Route_Route{Route: &route.RouteAction{
			ClusterSpecifier: &route.RouteAction_WeightedClusters{WeightedClusters: wc},
		}},
	}
	for _, vh := range out.GetVirtualHosts() {
		vh.Routes = append(vh.Routes, proto.Clone(r).(*route.Route))
	}
	return out
}
