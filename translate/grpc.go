package translate

import (
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	router "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

// Proxyless gRPC clients (grpc-go's `xds:///NAME` resolver) start from a
// Listener named after the target, whose API listener points at a
// RouteConfiguration over ADS; the route sends every RPC to the service's
// cluster. Envoys with static listeners never ask for these.

// APIListener is the Listener a gRPC client resolving xds:///name asks for.
func APIListener(name string) *listener.Listener {
	a, _ := anypb.New(rdsManager(name, name))
	return &listener.Listener{
		Name:        name,
		ApiListener: &listener.ApiListener{ApiListener: a},
	}
}

// rdsManager is an HTTP connection manager (codec AUTO: HTTP/1.1 and
// HTTP/2) whose routes are the RouteConfiguration routeConfig over RDS on
// ADS, with the router filter alone.
func rdsManager(statPrefix, routeConfig string) *hcm.HttpConnectionManager {
	rtr, _ := anypb.New(&router.Router{})
	return &hcm.HttpConnectionManager{
		StatPrefix: statPrefix,
		RouteSpecifier: &hcm.HttpConnectionManager_Rds{Rds: &hcm.Rds{
			RouteConfigName: routeConfig,
			ConfigSource: &core.ConfigSource{
				ResourceApiVersion:    core.ApiVersion_V3,
				ConfigSourceSpecifier: &core.ConfigSource_Ads{Ads: &core.AggregatedConfigSource{}},
			},
		}},
		HttpFilters: []*hcm.HttpFilter{{
			Name:       "envoy.filters.http.router",
			ConfigType: &hcm.HttpFilter_TypedConfig{TypedConfig: rtr},
		}},
	}
}

// RouteConfig routes every RPC for name to the cluster of the same name. Its
// one virtual host matches the target's authority (gRFC A28: gRPC picks the
// virtual host by domain, then the first matching route; a prefix of "/"
// matches every RPC).
func RouteConfig(name string) *route.RouteConfiguration {
	return &route.RouteConfiguration{
		Name: name,
		VirtualHosts: []*route.VirtualHost{{
			Name:    name,
			Domains: []string{name},
			Routes: []*route.Route{{
				Match: &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}},
				Action: &route.Route_Route{Route: &route.RouteAction{
					ClusterSpecifier: &route.RouteAction_Cluster{Cluster: name},
				}},
			}},
		}},
	}
}
