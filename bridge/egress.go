package bridge

import (
	"maps"
	"slices"
	"sort"
	"strings"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"

	"github.com/xdsbridge/xdsbridge/sources"
	"github.com/xdsbridge/xdsbridge/translate"
)

// The egress route table (Options.Egress, translate/egress.go): one
// RouteConfiguration with a virtual host per published service, built
// from the services' own route configurations, and the egress Listener.
// Both reach the Publisher as one more translate.Resources without a
// cluster (PublishServices takes its listener and route as they are).
//
// Make before break: a flush that removes services first publishes the
// table without them (no route to a cluster about to go), then the
// services' changes, then the table with the new and changed services
// (whose clusters are then published). When the last table still routes
// to a cluster the services' changes delete (a subset gone, another
// service's share to a removed service), the new table goes in the same
// publish as the services instead: the cache adds and changes routes
// before it deletes clusters (egressTableAfter).

// egressState is the loop's egress state, owned by Run.
type egressState struct {
	// services are the published services as the table sees them: their
	// own RouteConfigurations and their hosts' tags (the owning source
	// is looked up when the table is built).
	services map[string]translate.EgressService
	// last is the table last published (nil: none yet).
	last *route.RouteConfiguration
}

// egressNameTaken reports whether name is one of the egress resources'
// names: a service of that name keeps its cluster and assignment, but its
// own listener and route are not published (they would replace the
// egress ones).
func (l *Loop) egressNameTaken(name string) bool {
	e := l.opts.Egress
	if e == nil {
		return false
	}
	return name == e.RouteConfigName || (e.Listener != nil && name == e.Listener.Name) || (e.VHDS && name == translate.VHDSStubName(e.RouteConfigName))
}

// stripEgressNames drops the listener and route of changed services named
// like an egress resource, logging each.
func (l *Loop) stripEgressNames(changed []translate.Resources) {
	for i, r := range changed {
		name := r.Cluster.GetName()
		if !l.egressNameTaken(name) {
			continue
		}
		l.log.Error("a service has the name of an egress resource: its own listener and route configuration are not published (rename the service or set egress.route_config_name and egress.listener.name)", "service", name)
		changed[i].Listener, changed[i].Route = nil, nil
	}
}

// egressTable builds the table of the published services, leaving out
// those in without.
func (l *Loop) egressTable(without []string) (*route.RouteConfiguration, []translate.Diagnostic) {
	return l.egressTableOf(l.egress.services, without)
}

// egressTableOf builds the table of services, leaving out those in
// without.
func (l *Loop) egressTableOf(services map[string]translate.EgressService, without []string) (*route.RouteConfiguration, []translate.Diagnostic) {
	skip := make(map[string]bool, len(without))
	for _, n := range without {
		skip[n] = true
	}
	names := make([]string, 0, len(services))
	for n := range services {
		if !skip[n] {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	svcs := make([]translate.EgressService, 0, len(names))
	for _, n := range names {
		s := services[n]
		s.Source = l.owner(n)
		svcs = append(svcs, s)
	}
	return l.opts.Egress.RouteTable(svcs)
}

// egressTableAfter is the table as it is once t is published, when the
// last table routes to a cluster that t deletes (a removed service's, a
// subset its service no longer has): that table then goes in the same
// publish as the services, which adds and changes routes before it
// deletes clusters, so that no published table routes to a cluster gone.
// Nil otherwise (or when the table fails validation, as publishEgress).
func (l *Loop) egressTableAfter(t translation) (*translate.Resources, *route.RouteConfiguration, []translate.Diagnostic) {
	if l.egress.last == nil {
		return nil, nil, nil
	}
	changed := make(map[string]translate.Resources, len(t.changed))
	for _, r := range t.changed {
		changed[r.Cluster.GetName()] = r
	}
	removed := make(map[string]bool, len(t.removed))
	for _, n := range t.removed {
		removed[n] = true
	}
	loses := false
	for _, c := range translate.RouteClusters(l.egress.last) {
		svc, _, sub := strings.Cut(c, sources.DerivedNameSeparator)
		if removed[svc] {
			loses = true
			break
		}
		if r, ok := changed[svc]; ok && sub && !slices.ContainsFunc(r.Subsets, func(s translate.SubsetResources) bool { return s.Cluster.GetName() == c }) {
			loses = true
			break
		}
	}
	if !loses {
		return nil, nil, nil
	}
	services := maps.Clone(l.egress.services)
	l.applyEgressChanges(services, t)
	rc, diags := l.egressTableOf(services, nil)
	res, ok := l.egressResources(rc)
	if !ok {
		return nil, nil, nil
	}
	return &res, rc, diags
}

// applyEgressChanges applies to services what t changes and removes.
func (l *Loop) applyEgressChanges(services map[string]translate.EgressService, t translation) {
	for _, r := range t.changed {
		n := r.Cluster.GetName()
		if r.Route != nil {
			services[n] = translate.EgressService{Name: n, Route: r.Route, Tags: translate.EgressTags(t.inputs[n])}
		}
	}
	for _, n := range t.removed {
		delete(services, n)
	}
}

// egressResources are the resources of the table rc (and the egress
// listener), validated; false when they fail validation (a bug, not bad
// input: the last table stays).
func (l *Loop) egressResources(rc *route.RouteConfiguration) (translate.Resources, bool) {
	res := translate.Resources{Route: rc}
	var err error
	if l.opts.Egress.Listener != nil {
		res.Listener, err = l.opts.Egress.EgressListener()
	}
	if err == nil {
		err = res.Validate()
	}
	if err != nil {
		// Every virtual host is a published service's, which passed
		// validation: this is a bug, not bad input. The last table stays.
		l.m.invalid.Inc()
		l.log.Error("the egress route table failed validation; serving the last valid one", "error", err)
		return res, false
	}
	return res, true
}

// publishEgress publishes rc (and the egress listener) unless it is the
// table last published. It reports false when publishing failed.
func (l *Loop) publishEgress(rc *route.RouteConfiguration, diags []translate.Diagnostic) bool {
	if l.egress.last != nil && proto.Equal(rc, l.egress.last) {
		return true
	}
	res, ok := l.egressResources(rc)
	if !ok {
		return true
	}
	if err := l.pub.PublishServices([]translate.Resources{res}, nil); err != nil {
		l.log.Error("publishing the egress route table failed; will retry", "error", err)
		l.m.flushErrors.Inc()
		return false
	}
	l.egressPublished(rc, diags)
	return true
}

// egressPublished records rc as the table published.
func (l *Loop) egressPublished(rc *route.RouteConfiguration, diags []translate.Diagnostic) {
	if l.egress.last == nil {
		// The first table: the listener goes with it once.
		l.log.Info("serving the egress route table", "route_config", rc.GetName(), "virtual_hosts", len(rc.GetVirtualHosts())-1)
	}
	for _, d := range diags {
		l.log.Warn("egress route table", "service", d.Service, "field", d.Field, "message", d.Message)
	}
	l.egress.last = rc
	l.m.egressHosts.Set(float64(len(rc.GetVirtualHosts()) - 1))
	l.m.egressDomainsDropped.Set(float64(len(diags)))
}
