package translate

import (
	"fmt"
	"slices"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ondemand "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/on_demand/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// The egress table over virtual host discovery (Egress.VHDS).
//
// A delta client is given, under the table's name, a RouteConfiguration
// without virtual hosts whose vhds field points at ADS (VHDSRoute). When
// a request's Host matches no virtual host, Envoy's on-demand filter asks
// for the VirtualHost resource "<route config>/<Host>" (lower-cased, port
// included) and holds the request until the answer; the server answers
// with the service's virtual host, named "<route config>/<service>",
// whose aliases include the name asked for, or with that name alone and
// no resource when no service has the host (Envoy then answers 404 at
// once). Each virtual host carries the on-demand filter's per-route
// configuration with on-demand CDS over ADS, so that Envoy then fetches
// the cluster the chosen route names if it does not hold it: an Envoy
// that calls 3 services of 5,000 holds 3 virtual hosts and 3 clusters.
//
// There is no catch-all virtual host: Envoy fetches virtual hosts only
// for a request no virtual host matches, which a "*" domain would
// prevent (and so there is no fallback either).

// OnDemandFilter is the name of Envoy's on-demand HTTP filter.
const OnDemandFilter = "envoy.filters.http.on_demand"

// OnDemandClusterTimeout is how long Envoy holds a request for a cluster
// it fetches on demand (the bridge answers at once, found or not).
const OnDemandClusterTimeout = 5 * time.Second

// VHDSResourceName is the name of service's VirtualHost resource in the
// table named routeConfig.
func VHDSResourceName(routeConfig, service string) string {
	return routeConfig + "/" + service
}

// VHDSStubName is the name under which the xDS store keeps VHDSRoute (a
// delta client receives it under the table's name). It is no service's
// name the bridge publishes (a service of that name keeps its cluster
// only, as for the table's own name).
func VHDSStubName(routeConfig string) string { return routeConfig + VHDSStubSuffix }

// VHDSStubSuffix ends VHDSStubName.
const VHDSStubSuffix = " (vhds)"

// VHDSRoute is the RouteConfiguration delta clients are given under the
// table's name: no virtual host, and virtual host discovery over ADS.
func (e Egress) VHDSRoute() *route.RouteConfiguration {
	return &route.RouteConfiguration{
		Name: e.RouteConfigName,
		Vhds: &route.Vhds{ConfigSource: adsSource()},
	}
}

// VHDSVirtualHosts are the VirtualHost resources of the table rc (as
// RouteTable builds it): each service's virtual host, named
// VHDSResourceName, with the on-demand filter's per-route configuration
// (on-demand CDS over ADS). The catch-all is not among them. rc is not
// modified.
func (e Egress) VHDSVirtualHosts(rc *route.RouteConfiguration) ([]*route.VirtualHost, error) {
	perRoute, err := anypb.New(&ondemand.PerRouteConfig{Odcds: &ondemand.OnDemandCds{
		Source:  adsSource(),
		Timeout: durationpb.New(OnDemandClusterTimeout),
	}})
	if err != nil {
		return nil, err
	}
	out := make([]*route.VirtualHost, 0, len(rc.GetVirtualHosts()))
	for _, vh := range rc.GetVirtualHosts() {
		if slices.Contains(vh.GetDomains(), "*") {
			continue
		}
		vh = proto.Clone(vh).(*route.VirtualHost)
		vh.Name = VHDSResourceName(rc.GetName(), vh.GetName())
		if vh.TypedPerFilterConfig == nil {
			vh.TypedPerFilterConfig = map[string]*anypb.Any{}
		}
		vh.TypedPerFilterConfig[OnDemandFilter] = perRoute
		out = append(out, vh)
	}
	return out, nil
}

// VHDSSplit is VHDSRoute and VHDSVirtualHosts of the table rc.
func (e Egress) VHDSSplit(rc *route.RouteConfiguration) (*route.RouteConfiguration, []*route.VirtualHost, error) {
	hosts, err := e.VHDSVirtualHosts(rc)
	return e.VHDSRoute(), hosts, err
}

// addOnDemand puts the on-demand filter (no configuration of its own:
// virtual host discovery, and on-demand CDS where a virtual host's
// per-route configuration asks for it) before m's router.
func (e Egress) addOnDemand(m *hcm.HttpConnectionManager) error {
	a, err := anypb.New(&ondemand.OnDemand{})
	if err != nil {
		return err
	}
	i := slices.IndexFunc(m.HttpFilters, func(f *hcm.HttpFilter) bool { return f.GetName() == "envoy.filters.http.router" })
	if i < 0 {
		return fmt.Errorf("egress listener: no router filter")
	}
	m.HttpFilters = slices.Insert(m.HttpFilters, i, &hcm.HttpFilter{Name: OnDemandFilter, ConfigType: &hcm.HttpFilter_TypedConfig{TypedConfig: a}})
	return nil
}

func adsSource() *core.ConfigSource {
	return &core.ConfigSource{
		ResourceApiVersion:    core.ApiVersion_V3,
		ConfigSourceSpecifier: &core.ConfigSource_Ads{Ads: &core.AggregatedConfigSource{}},
	}
}
