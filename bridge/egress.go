package bridge

import (
	"sort"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"

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
// (whose clusters are then published).

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
	return name == e.RouteConfigName || (e.Listener != nil && name == e.Listener.Name)
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
	skip := make(map[string]bool, len(without))
	for _, n := range without {
		skip[n] = true
	}
	names := make([]string, 0, len(l.egress.services))
	for n := range l.egress.services {
		if !skip[n] {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	svcs := make([]translate.EgressService, 0, len(names))
	for _, n := range names {
		s := l.egress.services[n]
		s.Source = l.owner(n)
		svcs = append(svcs, s)
	}
	return l.opts.Egress.RouteTable(svcs)
}

// publishEgress publishes rc (and the egress listener) unless it is the
// table last published. It reports false when publishing failed.
func (l *Loop) publishEgress(rc *route.RouteConfiguration, diags []translate.Diagnostic) bool {
	if l.egress.last != nil && proto.Equal(rc, l.egress.last) {
		return true
	}
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
		return true
	}
	if err := l.pub.PublishServices([]translate.Resources{res}, nil); err != nil {
		l.log.Error("publishing the egress route table failed; will retry", "error", err)
		l.m.flushErrors.Inc()
		return false
	}
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
	return true
}
