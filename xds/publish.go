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
//
// A service's subsets (translate.Resources.Subsets) are clusters and
// assignments of their own. The cache remembers which subsets each service
// published: a changed service's subsets that are gone, and a removed
// service's, are removed with it. Calls are serialised.
func (c *Cache) PublishServices(changed []translate.Resources, removed []string) error {
	c.pubMu.Lock()
	defer c.pubMu.Unlock()
	var clusters, loads, listeners, routes []Resource
	var goneSubsets []string
	next := map[string][]string{} // service → its subsets' names, once applied
	for _, r := range changed {
		if r.Listener != nil {
			listeners = append(listeners, Resource{Name: r.Listener.GetName(), Msg: r.Listener})
		}
		if r.Route != nil {
			routes = append(routes, Resource{Name: r.Route.GetName(), Msg: r.Route})
		}
		service := ""
		if r.Cluster != nil {
			service = r.Cluster.GetName()
			clusters = append(clusters, Resource{Name: service, Msg: r.Cluster})
		}
		if r.Load != nil {
			service = r.Load.GetClusterName()
			loads = append(loads, Resource{
				Name:      r.Load.GetClusterName(),
				Msg:       r.Load,
				DependsOn: &Dep{TypeURL: ClusterType, Name: r.Load.GetClusterName()},
			})
		}
		names := make([]string, 0, len(r.Subsets))
		for _, s := range r.Subsets {
			name := s.Cluster.GetName()
			names = append(names, name)
			clusters = append(clusters, Resource{Name: name, Msg: s.Cluster})
			loads = append(loads, Resource{Name: name, Msg: s.Load, DependsOn: &Dep{TypeURL: ClusterType, Name: name}})
		}
		if service == "" {
			continue
		}
		next[service] = names
		for _, old := range c.subsets[service] {
			if !contains(names, old) {
				goneSubsets = append(goneSubsets, old)
			}
		}
	}
	for _, svc := range removed {
		goneSubsets = append(goneSubsets, c.subsets[svc]...)
	}
	err := c.Apply(
		Change{TypeURL: ClusterType, Upserts: clusters},
		Change{TypeURL: EndpointType, Upserts: loads},
		Change{TypeURL: ListenerType, Upserts: listeners},
		Change{TypeURL: RouteType, Upserts: routes},
		Change{TypeURL: RouteType, Deletes: removed},
		Change{TypeURL: ListenerType, Deletes: removed},
		Change{TypeURL: EndpointType, Deletes: append(append([]string(nil), removed...), goneSubsets...)},
		Change{TypeURL: ClusterType, Deletes: append(append([]string(nil), removed...), goneSubsets...)},
	)
	if err != nil {
		return err
	}
	if c.subsets == nil {
		c.subsets = map[string][]string{}
	}
	for svc, names := range next {
		if len(names) == 0 {
			delete(c.subsets, svc)
		} else {
			c.subsets[svc] = names
		}
	}
	for _, svc := range removed {
		delete(c.subsets, svc)
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
