package consul

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sort"
	"strings"

	"github.com/hashicorp/consul/api"

	"github.com/xdsbridge/xdsbridge/sources"
)

// Maintenance check IDs Consul sets for node and service maintenance mode.
const (
	nodeMaintCheckID   = "_node_maintenance"
	serviceMaintPrefix = "_service_maintenance:"
)

// healthOf maps an instance's node and service checks and weights to an
// Envoy health status and load-balancing weight (0: unset). It is pure.
//
//   - node or service maintenance → DRAINING
//   - any critical check → UNHEALTHY (weight Weights.Passing)
//   - any warning, no critical → HEALTHY with Weights.Warning, or DEGRADED
//     when warningDegraded (weight Weights.Warning)
//   - all passing (or no checks) → HEALTHY with Weights.Passing
//   - a warning with Weights.Warning 0 means "do not route": DRAINING,
//     weight unset (Envoy takes DRAINING hosts out of load balancing)
//   - absent weights (Passing 0, catalog registrations) are Consul's
//     defaults, 1 and 1
func healthOf(serviceID string, checks api.HealthChecks, w api.AgentWeights, warningDegraded bool) (sources.HealthStatus, uint32) {
	if w.Passing <= 0 {
		// Weights absent (catalog registrations): Consul's defaults. The
		// agent rejects a Passing weight below 1, so 0 only means absent.
		w = api.AgentWeights{Passing: 1, Warning: 1}
	}
	warning, critical := false, false
	for _, c := range checks {
		if c == nil {
			continue
		}
		if c.CheckID == nodeMaintCheckID || c.CheckID == serviceMaintPrefix+serviceID {
			return sources.HealthDraining, 0
		}
		switch c.Status {
		case api.HealthCritical:
			critical = true
		case api.HealthWarning:
			warning = true
		}
	}
	switch {
	case critical:
		return sources.HealthUnhealthy, uint32(w.Passing)
	case warning && w.Warning <= 0:
		return sources.HealthDraining, 0
	case warning && warningDegraded:
		return sources.HealthDegraded, uint32(w.Warning)
	case warning:
		return sources.HealthHealthy, uint32(w.Warning)
	default:
		return sources.HealthHealthy, uint32(w.Passing)
	}
}

// mapper turns health results into endpoints. Safe for concurrent use.
type mapper struct {
	m        mappingSettings
	sel      selector
	log      *slog.Logger
	resolver interface {
		LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
	}
}

// dcInfo is what the mapper needs about the datacenter a result came from.
type dcInfo struct {
	name     string // actual datacenter name
	priority uint32
}

// instance is one mapped Consul service instance.
type instance struct {
	endpoint sources.Endpoint
	node     string
	// why is what decided its health: its Consul checks (checksWhy).
	why string
}

// mapEntries maps the instances of one service, dropping those excluded by
// kind or tags and those whose address cannot be used (logged; both listed
// in dropped, with the reason; kinds are a filter of whole services and are
// not listed). ok is false when every instance was excluded by kind: the
// service is a proxy or gateway service and is not published.
func (mp *mapper) mapEntries(ctx context.Context, service string, dc dcInfo, entries []*api.ServiceEntry) (out []instance, dropped []sources.Dropped, ok bool) {
	kindExcluded := 0
	for _, e := range entries {
		if e == nil || e.Service == nil || e.Node == nil {
			continue
		}
		if e.Service.Kind != api.ServiceKindTypical && !slices.Contains(mp.sel.kinds, string(e.Service.Kind)) {
			kindExcluded++
			continue
		}
		name := fmt.Sprintf("%s on node %s", e.Service.ID, e.Node.Node)
		if !mp.sel.instance(string(e.Service.Kind), e.Service.Tags) {
			dropped = append(dropped, sources.Dropped{Service: service, Instance: name, Reason: sources.DropExcludedTag, Detail: mp.sel.tagReason(e.Service.Tags)})
			continue
		}
		ep, err := mp.endpoint(ctx, dc, e)
		if err != nil {
			mp.log.Warn("skipping Consul instance", "service", service, "datacenter", dc.name, "node", e.Node.Node, "id", e.Service.ID, "error", err)
			reason := sources.DropMalformed
			var ue unresolvableError
			if errors.As(err, &ue) {
				reason = sources.DropUnresolvable
			}
			dropped = append(dropped, sources.Dropped{Service: service, Instance: name, Reason: reason, Detail: oneLine(err.Error(), maxWhy)})
			continue
		}
		out = append(out, instance{endpoint: ep, node: e.Node.Node, why: checksWhy(e.Checks)})
	}
	return out, dropped, kindExcluded == 0 || kindExcluded < len(entries)
}

// unresolvableError is an instance address that is a hostname that could
// not be resolved (or may not be).
type unresolvableError struct{ error }

func (e unresolvableError) Unwrap() error { return e.error }

// Bounds of a host's explanation (checksWhy).
const (
	maxWhy          = 300 // characters in all
	maxCheckOutput  = 80  // characters of one check's output
	maxChecksListed = 4
)

// checksWhy says which Consul checks decided an instance's health, worst
// first: "consul checks: critical (service:web-1 'HTTP GET
// http://10.0.0.1/health: 503 Service Unavailable'), passing
// (serfHealth)". Each output is cut to its first line and maxCheckOutput
// characters; at most maxChecksListed checks are named.
func checksWhy(checks api.HealthChecks) string {
	rank := map[string]int{api.HealthMaint: 0, api.HealthCritical: 1, api.HealthWarning: 2, api.HealthPassing: 3}
	cs := make([]*api.HealthCheck, 0, len(checks))
	for _, c := range checks {
		if c != nil {
			cs = append(cs, c)
		}
	}
	if len(cs) == 0 {
		return "consul checks: none (healthy)"
	}
	sort.SliceStable(cs, func(i, j int) bool {
		ri, oki := rank[cs[i].Status]
		rj, okj := rank[cs[j].Status]
		if !oki {
			ri = 4
		}
		if !okj {
			rj = 4
		}
		if ri != rj {
			return ri < rj
		}
		return cs[i].CheckID < cs[j].CheckID
	})
	var b strings.Builder
	b.WriteString("consul checks: ")
	for i, c := range cs {
		if i == maxChecksListed {
			fmt.Fprintf(&b, ", and %d more", len(cs)-i)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		status := c.Status
		if c.CheckID == nodeMaintCheckID || strings.HasPrefix(c.CheckID, serviceMaintPrefix) {
			status = "maintenance"
		}
		fmt.Fprintf(&b, "%s (%s", status, c.CheckID)
		if out := oneLine(c.Output, maxCheckOutput); out != "" {
			fmt.Fprintf(&b, " '%s'", out)
		}
		b.WriteString(")")
	}
	return oneLine(b.String(), maxWhy)
}

// oneLine is s's first non-empty line, trimmed, cut to max characters
// (with "..." when cut).
func oneLine(s string, max int) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		s = strings.TrimSpace(s[:i])
	}
	if r := []rune(s); len(r) > max {
		s = string(r[:max-3]) + "..."
	}
	return s
}

// endpoint maps one instance.
func (mp *mapper) endpoint(ctx context.Context, dc dcInfo, e *api.ServiceEntry) (sources.Endpoint, error) {
	tagged := mp.m.localTagged
	if dc.priority > 0 {
		tagged = mp.m.failoverTagged
	}
	host, port := chooseAddress(e, tagged)
	if port <= 0 || port > 65535 {
		return sources.Endpoint{}, fmt.Errorf("port %d is not in 1..65535", port)
	}
	addr, hostname, err := mp.ip(ctx, host)
	if err != nil {
		return sources.Endpoint{}, err
	}
	health, w := healthOf(e.Service.ID, e.Checks, e.Service.Weights, mp.m.warningDegr)
	return sources.Endpoint{
		Address:  addr,
		Port:     uint32(port),
		Hostname: hostname,
		Weight:   w,
		Priority: dc.priority,
		Locality: sources.Locality{
			Region:  dc.name,
			Zone:    e.Node.Meta[mp.m.zoneKey],
			SubZone: e.Node.Meta[mp.m.subZoneKey],
		},
		Health:   health,
		Metadata: sources.Metadata{mp.m.namespace: metadataOf(dc.name, e)},
	}, nil
}

// chooseAddress applies the address rules: the tagged address (service's,
// then node's) when one is configured and present, else the service
// address, else the node address. A service tagged address brings its own
// port.
func chooseAddress(e *api.ServiceEntry, tagged string) (string, int) {
	port := e.Service.Port
	if tagged != "" {
		if sa, ok := e.Service.TaggedAddresses[tagged]; ok && sa.Address != "" {
			if sa.Port != 0 {
				port = sa.Port
			}
			return sa.Address, port
		}
		if a := e.Node.TaggedAddresses[tagged]; a != "" {
			return a, port
		}
	}
	if e.Service.Address != "" {
		return e.Service.Address, port
	}
	return e.Node.Address, port
}

// ip returns host as an IP literal, resolving a hostname when allowed. The
// hostname, if any, is returned for the endpoint's Hostname field.
func (mp *mapper) ip(ctx context.Context, host string) (addr, hostname string, err error) {
	if host == "" {
		return "", "", fmt.Errorf("no address (neither service nor node address set)")
	}
	if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return a.Unmap().String(), "", nil
	}
	if !mp.m.resolve {
		return "", "", unresolvableError{fmt.Errorf("address %q is a hostname and mapping.resolve_hostnames is false", host)}
	}
	rctx, cancel := context.WithTimeout(ctx, mp.m.resolveTimeout)
	defer cancel()
	r := mp.resolver
	if r == nil {
		r = net.DefaultResolver
	}
	ips, err := r.LookupNetIP(rctx, "ip", host)
	if err != nil {
		return "", "", unresolvableError{fmt.Errorf("resolving hostname %q: %w", host, err)}
	}
	if len(ips) == 0 {
		return "", "", unresolvableError{fmt.Errorf("hostname %q resolved to no addresses", host)}
	}
	return ips[0].Unmap().String(), host, nil
}

// metadataOf builds the filter_metadata entries of an instance:
//
//	tags: [..]            tag.<tag>: true       meta.<k>: v
//	node_meta.<k>: v      datacenter, node, service_id, service
func metadataOf(dc string, e *api.ServiceEntry) map[string]any {
	md := map[string]any{
		"datacenter": dc,
		"node":       e.Node.Node,
		"service_id": e.Service.ID,
		"service":    e.Service.Service,
	}
	tags := make([]any, 0, len(e.Service.Tags))
	for _, t := range e.Service.Tags {
		tags = append(tags, t)
		md["tag."+t] = true
	}
	md["tags"] = tags
	for k, v := range e.Service.Meta {
		md["meta."+k] = v
	}
	for k, v := range e.Node.Meta {
		md["node_meta."+k] = v
	}
	return md
}

// clusterName expands the cluster name template.
func clusterName(template, service, dc string) string {
	if template == "{service}" {
		return service
	}
	return strings.NewReplacer("{service}", service, "{datacenter}", dc).Replace(template)
}
