package store

import (
	"slices"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"
)

// An index of route configurations: Entry.Clusters.

// RouteClusters returns the clusters the routes of a RouteConfiguration
// name (a route's cluster, its weighted clusters), sorted.
func RouteClusters(m proto.Message) []string {
	rc, ok := m.(*route.RouteConfiguration)
	if !ok {
		return nil
	}
	var out []string
	for _, vh := range rc.GetVirtualHosts() {
		for _, r := range vh.GetRoutes() {
			a := r.GetRoute()
			if n := a.GetCluster(); n != "" {
				out = append(out, n)
			}
			for _, wc := range a.GetWeightedClusters().GetClusters() {
				if wc.GetName() != "" {
					out = append(out, wc.GetName())
				}
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
