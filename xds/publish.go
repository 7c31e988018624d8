package xds

import (
	"slices"

	"github.com/xdsbridge/xdsbridge/translate"
	"github.com/xdsbridge/xdsbridge/xds/store"
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
	p := c.publication(changed, removed)
	routes, vhdsApplied := c.vhdsPublish(p.routes)
	err := c.Apply(publishSteps(
		map[string][]store.Resource{ClusterType: p.clusters, EndpointType: p.loads, ListenerType: p.listeners, RouteType: routes},
		map[string][]string{RouteType: removed, ListenerType: removed, EndpointType: p.clusterDeletes, ClusterType: p.clusterDeletes},
	)...)
	c.published(p, removed, err)
	if err == nil {
		vhdsApplied()
	}
	return err
}

// publication is what one PublishServices call upserts and removes.
type publication struct {
	clusters, loads, listeners, routes []store.Resource
	clusterDeletes                     []string            // clusters and assignments
	next                               map[string][]string // service → its subsets' names, once applied
	changedServices                    map[string]bool
}

// publication sorts the resources of the changed services by type, and
// finds the clusters to remove: the removed services' and the subsets
// that are gone. c.pubMu is held.
func (c *Cache) publication(changed []translate.Resources, removed []string) *publication {
	p := &publication{next: map[string][]string{}, changedServices: map[string]bool{}}
	var subClusters, subLoads []store.Resource
	var goneSubsets []string
	for _, r := range changed {
		if r.Listener != nil {
			p.listeners = append(p.listeners, store.Resource{Name: r.Listener.GetName(), Msg: r.Listener})
		}
		if r.Route != nil {
			p.routes = append(p.routes, store.Resource{Name: r.Route.GetName(), Msg: r.Route})
		}
		service := ""
		if r.Cluster != nil {
			service = r.Cluster.GetName()
			p.changedServices[service] = true
			p.clusters = append(p.clusters, store.Resource{Name: service, Msg: r.Cluster})
		}
		if r.Load != nil {
			service = r.Load.GetClusterName()
			p.loads = append(p.loads, store.Resource{
				Name:      r.Load.GetClusterName(),
				Msg:       r.Load,
				DependsOn: &store.Dep{TypeURL: ClusterType, Name: r.Load.GetClusterName()},
			})
		}
		names := make([]string, 0, len(r.Subsets))
		for _, s := range r.Subsets {
			name := s.Cluster.GetName()
			names = append(names, name)
			subClusters = append(subClusters, store.Resource{Name: name, Msg: s.Cluster})
			subLoads = append(subLoads, store.Resource{Name: name, Msg: s.Load, DependsOn: &store.Dep{TypeURL: ClusterType, Name: name}})
		}
		if service == "" {
			continue
		}
		p.next[service] = names
		for _, old := range c.subsets[service] {
			if !slices.Contains(names, old) {
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
		if p.changedServices[n] {
			return true
		}
		return c.services[n] && !slices.Contains(removed, n)
	}
	notService := func(r store.Resource) bool { return isService(r.Name) }
	p.clusters = append(p.clusters, slices.DeleteFunc(subClusters, notService)...)
	p.loads = append(p.loads, slices.DeleteFunc(subLoads, notService)...)
	goneSubsets = slices.DeleteFunc(goneSubsets, isService)
	// A name deleted and upserted in one call (a removed service whose
	// name another service's subset takes) is upserted, not deleted.
	upserted := make(map[string]bool, len(p.clusters))
	for _, r := range p.clusters {
		upserted[r.Name] = true
	}
	for _, n := range append(slices.Clone(removed), goneSubsets...) {
		if !upserted[n] {
			p.clusterDeletes = append(p.clusterDeletes, n)
		}
	}
	return p
}

// published remembers the services and subsets a publication left
// published. c.pubMu is held.
func (c *Cache) published(p *publication, removed []string, err error) {
	if c.subsets == nil {
		c.subsets = map[string][]string{}
		c.services = map[string]bool{}
	}
	if err != nil {
		// Apply keeps the changes before the one that failed: remember
		// every subset that may now be published, so none is left
		// behind when the next call leaves it out.
		for svc, names := range p.next {
			for _, n := range names {
				if !slices.Contains(c.subsets[svc], n) {
					c.subsets[svc] = append(c.subsets[svc], n)
				}
			}
		}
		return
	}
	for n := range p.changedServices {
		c.services[n] = true
	}
	for _, n := range removed {
		delete(c.services, n)
	}
	for svc, names := range p.next {
		if len(names) == 0 {
			delete(c.subsets, svc)
		} else {
			c.subsets[svc] = names
		}
	}
	for _, svc := range removed {
		delete(c.subsets, svc)
	}
}
