package xds

import (
	"github.com/xdsbridge/xdsbridge/translate"
)

// PublishServices puts the resources of changed services into the cache and
// removes those of removed services, ordered make before break: clusters
// first, then their endpoints, then listeners and routes (for gRPC clients);
// removals in reverse: routes, listeners, endpoints, and a removed service's
// cluster last. Each ClusterLoadAssignment depends on its cluster, so a
// changed cluster re-sends its endpoints (cluster warming completes).
func (c *Cache) PublishServices(changed []translate.Resources, removed []string) error {
	var clusters, loads, listeners, routes []Resource
	for _, r := range changed {
		if r.Listener != nil {
			listeners = append(listeners, Resource{Name: r.Listener.GetName(), Msg: r.Listener})
		}
		if r.Route != nil {
			routes = append(routes, Resource{Name: r.Route.GetName(), Msg: r.Route})
		}
		if r.Cluster != nil {
			clusters = append(clusters, Resource{Name: r.Cluster.GetName(), Msg: r.Cluster})
		}
		if r.Load != nil {
			loads = append(loads, Resource{
				Name:      r.Load.GetClusterName(),
				Msg:       r.Load,
				DependsOn: &Dep{TypeURL: ClusterType, Name: r.Load.GetClusterName()},
			})
		}
	}
	return c.Apply(
		Change{TypeURL: ClusterType, Upserts: clusters},
		Change{TypeURL: EndpointType, Upserts: loads},
		Change{TypeURL: ListenerType, Upserts: listeners},
		Change{TypeURL: RouteType, Upserts: routes},
		Change{TypeURL: RouteType, Deletes: removed},
		Change{TypeURL: ListenerType, Deletes: removed},
		Change{TypeURL: EndpointType, Deletes: removed},
		Change{TypeURL: ClusterType, Deletes: removed},
	)
}
