package translate

import (
	"fmt"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"

	"github.com/xdsbridge/xdsbridge/policy"
	"github.com/xdsbridge/xdsbridge/sources"
)

// appendFailover adds to an assignment the hosts of the policy's failover
// targets (Options.Failover, resolved by the merge loop), in order, each
// target's priorities after all those before it: Envoy and gRPC clients
// move traffic to the next priority as the healthy share of the ones
// before falls (Envoy: below 100% / 1.4 healthy; gRPC: none ready). The
// service's own assignment and every subset's get the same failover, as
// Consul's failover "*" does. It reports, for the service's own
// assignment, the targets that add nothing.
func (o Options) appendFailover(service string, cla *endpoint.ClusterLoadAssignment, report bool) []Diagnostic {
	var diags []Diagnostic
	diag := func(i int, msg string) {
		if report {
			diags = append(diags, Diagnostic{service, fmt.Sprintf("failover[%d]", i), msg})
		}
	}
	for i, ft := range o.Failover {
		t := ft.Target
		switch {
		case t.Datacenter != "":
			diag(i, fmt.Sprintf("datacenter %q: the hosts of other datacenters come from the Consul source's failover_datacenters (priorities 1, 2, …), not from the policy; nothing added", t.Datacenter))
			continue
		case ft.Service == nil:
			diag(i, fmt.Sprintf("service %q is not published; nothing added until it is", t.Service))
			continue
		}
		target := *ft.Service
		var add *endpoint.ClusterLoadAssignment
		if t.Subset != "" {
			var sub policy.Subset
			ok := false
			if ft.Policy != nil {
				sub, ok = ft.Policy.Subsets[t.Subset]
			}
			if !ok {
				diag(i, fmt.Sprintf("service %q has no subset %q; nothing added", target.Name, t.Subset))
				continue
			}
			only := Options{DefaultLocality: o.DefaultLocality, Policy: &policy.Service{Subsets: map[string]policy.Subset{t.Subset: sub}}}
			subs, _ := only.subsets(target, Cluster(target.Name))
			if len(subs) != 1 {
				continue
			}
			add = subs[0].Load
		} else {
			add, _ = Options{DefaultLocality: o.DefaultLocality}.LoadAssignment(sources.Service{Name: target.Name, Endpoints: target.Endpoints})
		}
		base := uint32(0)
		for _, g := range cla.Endpoints {
			base = max(base, g.GetPriority()+1)
		}
		for _, g := range add.Endpoints {
			g = proto.Clone(g).(*endpoint.LocalityLbEndpoints)
			g.Priority += base
			cla.Endpoints = append(cla.Endpoints, g)
		}
	}
	return diags
}
