package xds

import (
	"slices"

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
	var subClusters, subLoads []Resource
	var goneSubsets []string
	next := map[string][]string{} // service → its subsets' names, once applied
	changedServices := map[string]bool{}
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
			changedServices[service] = true
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
			subClusters = append(subClusters, Resource{Name: name, Msg: s.Cluster})
			subLoads = append(subLoads, Resource{Name: name, Msg: s.Load, DependsOn: &Dep{TypeURL: ClusterType, Name: name}})
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
	// Service names as they will be after this call: a subset never
	// takes a service's cluster, nor is a service's cluster deleted as a
	// subset gone.
	isService := func(n string) bool {
		if changedServices[n] {
			return true
		}
		return c.services[n] && !slices.Contains(removed, n)
	}
	for _, r := range subClusters {
		if !isService(r.Name) {
			clusters = append(clusters, r)
		}
	}
	for _, r := range subLoads {
		if !isService(r.Name) {
			loads = append(loads, r)
		}
	}
	gone := goneSubsets[:0]
	for _, n := range goneSubsets {
		if !isService(n) {
			gone = append(gone, n)
		}
	}
	goneSubsets = gone
	// A name deleted and upserted in one call (a removed service whose
	// name another service's subset takes) is upserted, not deleted.
	upserted := make(map[string]bool, len(clusters))
	for _, r := range clusters {
		upserted[r.Name] = true
	}
	var clusterDeletes []string
	for _, n := range append(append([]string(nil), removed...), goneSubsets...) {
		if !upserted[n] {
			clusterDeletes = append(clusterDeletes, n)
		}
	}
	err := c.Apply(
		Change{TypeURL: ClusterType, Upserts: clusters},
		Change{TypeURL: EndpointType, Upserts: loads},
		Change{TypeURL: ListenerType, Upserts: listeners},
		Change{TypeURL: RouteType, Upserts: routes},
		Change{TypeURL: RouteType, Deletes: removed},
		Change{TypeURL: ListenerType, Deletes: removed},
		Change{TypeURL: EndpointType, Deletes: clusterDeletes},
		Change{TypeURL: ClusterType, Deletes: clusterDeletes},
	)
	if c.subsets == nil {
		c.subsets = map[string][]string{}
		c.services = map[string]bool{}
	}
	if err != nil {
		// Apply keeps the changes before the one that failed: remember
		// every subset that may now be published, so none is left
		// behind when the next call leaves it out.
		for svc, names := range next {
			for _, n := range names {
				if !slices.Contains(c.subsets[svc], n) {
					c.subsets[svc] = append(c.subsets[svc], n)
				}
			}
		}
		return err
	}
	if c.subsets == nil {
		c.subsets = map[string][]string{}
		c.services = map[string]bool{}
	}
	for n := range changedServices {
		c.services[n] = true
	}
	for _, n := range removed {
		delete(c.services, n)
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
