package translate

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"github.com/hashicorp/go-bexpr"
	"google.golang.org/protobuf/proto"

	"github.com/xdsbridge/xdsbridge/policy"
	"github.com/xdsbridge/xdsbridge/sources"
)

// ConsulNamespace is the endpoint metadata namespace FilterView reads
// Consul's view of a host from (Service.*, Node.*): the Consul source's
// default metadata_namespace. A Consul source configured with another
// namespace still has its hosts' metadata under Metadata.<namespace>.
const ConsulNamespace = "consul"

// FilterView is what a subset filter (policy.CompileFilter) sees of one
// endpoint:
//
//	Service.ID, Service.Service   "service_id", "service" of the consul namespace
//	Service.Tags                  its "tags" (a list; empty if none)
//	Service.Meta.<k>              its "meta.<k>" keys
//	Node.Node, Node.Datacenter    its "node", "datacenter"
//	Node.Meta.<k>                 its "node_meta.<k>" keys
//	Address, Port, Hostname, Weight, Priority
//	Health                        HEALTHY, UNHEALTHY, DRAINING, TIMEOUT, DEGRADED or UNKNOWN
//	Locality.Region, .Zone, .SubZone (the default locality if it has none)
//	Metadata.<namespace>.<key>    any endpoint metadata
//
// The address is the canonical form LoadAssignment publishes. Absent
// values read as the empty string (see policy.CompileFilter). The view
// shares the endpoint's metadata values: it must not be modified.
func (o Options) FilterView(e sources.Endpoint) map[string]any {
	consul := e.Metadata[ConsulNamespace]
	get := func(k string) any {
		if v, ok := consul[k]; ok && v != nil {
			return v
		}
		return ""
	}
	tags, ok := consul["tags"].([]any)
	if !ok {
		tags = []any{}
	}
	meta, nodeMeta := map[string]any{}, map[string]any{}
	for k, v := range consul {
		if m, ok := strings.CutPrefix(k, "meta."); ok {
			meta[m] = v
		} else if m, ok := strings.CutPrefix(k, "node_meta."); ok {
			nodeMeta[m] = v
		}
	}
	md := make(map[string]any, len(e.Metadata))
	for ns, kv := range e.Metadata {
		md[ns] = map[string]any(kv)
	}
	addr := e.Address
	if a, err := netip.ParseAddr(addr); err == nil {
		addr = a.Unmap().String()
	}
	loc := e.Locality
	if loc == (sources.Locality{}) {
		loc = o.DefaultLocality
	}
	return map[string]any{
		"Service": map[string]any{
			"ID":      get("service_id"),
			"Service": get("service"),
			"Tags":    tags,
			"Meta":    meta,
			// The host's address and port as published (Consul's
			// Service.Address may be empty when the service uses its
			// node's; here it is the address clients connect to).
			"Address": addr,
			"Port":    e.Port,
		},
		"Node": map[string]any{
			"Node":       get("node"),
			"Datacenter": get("datacenter"),
			"Meta":       nodeMeta,
		},
		"Address":  addr,
		"Port":     e.Port,
		"Hostname": e.Hostname,
		"Weight":   e.Weight,
		"Priority": e.Priority,
		"Health":   healthName(e.Health),
		"Locality": map[string]any{"Region": loc.Region, "Zone": loc.Zone, "SubZone": loc.SubZone},
		"Metadata": md,
	}
}

// healthName is the status LoadAssignment publishes for h.
func healthName(h sources.HealthStatus) string {
	if h < sources.HealthUnknown || h > sources.HealthDegraded {
		return sources.HealthUnknown.String()
	}
	return h.String()
}

// passing is what a subset with only_passing keeps: hosts Envoy and gRPC
// route to without panic or failover, HEALTHY and UNKNOWN.
func passing(h sources.HealthStatus) bool {
	n := healthName(h)
	return n == sources.HealthHealthy.String() || n == sources.HealthUnknown.String()
}

// subsets builds the policy's subsets of s, sorted by name: each a copy of
// the service's cluster named SubsetCluster(s.Name, subset) and the
// assignment LoadAssignment makes of the endpoints the subset selects. A
// subset that selects nothing has an empty assignment.
//
// Endpoint problems (bad addresses, duplicates, metadata) are reported by
// the service's own assignment, not again for each subset. A service of
// another source named exactly like a subset cluster would collide with it:
// the merge loop, which sees every name, is where that is caught.
func (o Options) subsets(s sources.Service, base *cluster.Cluster) ([]SubsetResources, []Diagnostic) {
	p := o.Policy
	if p == nil || len(p.Subsets) == 0 {
		return nil, nil
	}
	var diags []Diagnostic
	views := make([]map[string]any, len(s.Endpoints))
	out := make([]SubsetResources, 0, len(p.Subsets))
	for _, name := range slices.Sorted(maps.Keys(p.Subsets)) {
		sub := p.Subsets[name]
		field := "subsets." + name + ".filter"
		var keep []sources.Endpoint
		var ev *bexpr.Evaluator
		var err error
		if sub.Filter != "" {
			// Check compiled it already; an unchecked policy's bad filter
			// selects nothing rather than everything.
			ev, err = policy.CompileFilter(sub.Filter)
		}
		switch {
		case err != nil:
			diags = append(diags, Diagnostic{s.Name, field, fmt.Sprintf("%v; the subset has no endpoints", err)})
		default:
			failed, minKey := 0, ""
			var firstErr error
			for i, e := range s.Endpoints {
				if sub.OnlyPassing && !passing(e.Health) {
					continue
				}
				if ev != nil {
					if views[i] == nil {
						views[i] = o.FilterView(e)
					}
					ok, err := ev.Evaluate(views[i])
					if err != nil {
						k := e.Key().String()
						if failed == 0 || k < minKey {
							minKey, firstErr = k, fmt.Errorf("endpoints[%s]: %v", k, err)
						}
						failed++
						continue
					}
					if !ok {
						continue
					}
				}
				keep = append(keep, e)
			}
			if failed > 0 {
				diags = append(diags, Diagnostic{s.Name, field, fmt.Sprintf("cannot be evaluated on %d endpoints, left out of the subset (first: %v)", failed, firstErr)})
			}
		}
		cname := SubsetCluster(s.Name, name)
		cla, _ := o.LoadAssignment(sources.Service{Name: cname, Endpoints: keep})
		c := proto.Clone(base).(*cluster.Cluster)
		c.Name = cname
		out = append(out, SubsetResources{Cluster: c, Load: cla})
	}
	return out, diags
}
