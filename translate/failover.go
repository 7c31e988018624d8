package translate

import (
	"fmt"
	"net/netip"

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
// assignment (report), the targets that add nothing.
//
// An address appears at most once in an assignment: grpc-go NACKs an
// assignment listing one twice ("duplicate endpoint with the same
// address"), and with it the whole response. A host a target shares with
// the assignment (the service itself, its own subset, another service
// registered on the same host and port) stays where it already is, at
// the higher priority, and the target adds only its other hosts; the
// target's priorities that are left empty are dropped, so the priorities
// stay contiguous.
//
// A target that would take the assignment over lim.MaxAssignmentEndpoints
// adds nothing (the service's own hosts are never dropped), and budget,
// when not negative, bounds what all targets together add: the failover of
// one policy cannot multiply a catalog beyond what the limits allow. It
// returns the diagnostics, the hosts added, and the targets dropped over a
// limit by limit name.
func (o Options) appendFailover(service string, cla *endpoint.ClusterLoadAssignment, report bool, lim Limits, budget int) (diags []Diagnostic, added int, over map[string]int) {
	diag := func(i int, msg string) {
		if report {
			diags = append(diags, Diagnostic{service, fmt.Sprintf("failover[%d]", i), msg})
		}
	}
	if len(o.Failover) == 0 {
		return nil, 0, nil
	}
	seen := map[netip.AddrPort]bool{}
	total := 0
	for _, g := range cla.Endpoints {
		for _, lb := range g.LbEndpoints {
			seen[hostAddr(lb)] = true
			total++
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
		what := fmt.Sprintf("service %q", target.Name)
		if t.Subset != "" {
			what = fmt.Sprintf("subset %q of service %q", t.Subset, target.Name)
		}
		// overLimit reports, and counts, a target whose n hosts the
		// limits leave no room for.
		overLimit := func(n int) bool {
			limit := ""
			switch {
			case total+n > lim.MaxAssignmentEndpoints:
				limit = LimitAssignmentEndpoints
				diag(i, fmt.Sprintf("%s would add %d hosts to the %d listed, more than %s %d; failover target dropped (the service's own hosts stay)", what, n, total, LimitAssignmentEndpoints, lim.MaxAssignmentEndpoints))
			case budget >= 0 && added+n > budget:
				limit = LimitFailoverEndpoints
				diag(i, fmt.Sprintf("%s would add %d hosts, and failover across the catalog already adds up to %s %d; failover target dropped (the service's own hosts stay)", what, n, LimitFailoverEndpoints, lim.MaxFailoverEndpoints))
			default:
				return false
			}
			if over == nil {
				over = map[string]int{}
			}
			over[limit]++
			return true
		}
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
			// Over the limits, the target's assignment is not built: with
			// a pattern's failover, most services may be.
			if n := newHosts(target.Endpoints, seen); n > 0 && overLimit(n) {
				continue
			}
			add, _ = Options{DefaultLocality: o.DefaultLocality}.LoadAssignment(sources.Service{Name: target.Name, Endpoints: target.Endpoints})
		}
		// The target's groups without the hosts already listed.
		var groups []*endpoint.LocalityLbEndpoints
		offered, shared, n := 0, 0, 0
		for _, g := range add.Endpoints {
			var keep []*endpoint.LbEndpoint
			for _, lb := range g.LbEndpoints {
				offered++
				if seen[hostAddr(lb)] {
					shared++
					continue
				}
				keep = append(keep, lb)
			}
			if len(keep) == 0 {
				continue
			}
			g = proto.Clone(g).(*endpoint.LocalityLbEndpoints)
			if len(keep) != len(g.LbEndpoints) {
				// Clone keeps the kept hosts' order; drop the shared ones.
				kept := g.LbEndpoints[:0]
				for _, lb := range g.LbEndpoints {
					if !seen[hostAddr(lb)] {
						kept = append(kept, lb)
					}
				}
				g.LbEndpoints = kept
				g.LoadBalancingWeight.Value = uint32(len(kept))
			}
			n += len(g.LbEndpoints)
			groups = append(groups, g)
		}
		self := target.Name == service && t.Subset == ""
		switch {
		case self:
			diag(i, fmt.Sprintf("%s is the service itself: its hosts are already listed; nothing added", what))
		case offered > 0 && shared == offered:
			diag(i, fmt.Sprintf("every host of %s (%d) is already listed at a higher priority (each address is listed once); nothing added", what, offered))
		case shared > 0:
			diag(i, fmt.Sprintf("%d of the %d hosts of %s are already listed at a higher priority (each address is listed once); the other %d added", shared, offered, what, n))
		}
		if n == 0 || overLimit(n) {
			continue
		}
		base := uint32(0)
		for _, g := range cla.Endpoints {
			base = max(base, g.GetPriority()+1)
		}
		// Dense from base, keeping the target's order of priorities.
		next, last := base, groups[0].GetPriority()
		for _, g := range groups {
			if g.GetPriority() != last {
				next++
				last = g.GetPriority()
			}
			g.Priority = next
			for _, lb := range g.LbEndpoints {
				seen[hostAddr(lb)] = true
			}
			cla.Endpoints = append(cla.Endpoints, g)
		}
		total += n
		added += n
	}
	return diags, added, over
}

// newHosts counts the endpoints, of valid address and port, whose host is
// not in seen: what a target adds (LoadAssignment drops the others).
func newHosts(eps []sources.Endpoint, seen map[netip.AddrPort]bool) int {
	n := 0
	for _, e := range eps {
		a, err := netip.ParseAddr(e.Address)
		if err != nil || e.Port == 0 || e.Port > 65535 {
			continue
		}
		if !seen[netip.AddrPortFrom(a.Unmap(), uint16(e.Port))] {
			n++
		}
	}
	return n
}

// hostAddr is the address and port of a published host (canonical, as
// LoadAssignment writes it).
func hostAddr(lb *endpoint.LbEndpoint) netip.AddrPort {
	sa := lb.GetEndpoint().GetAddress().GetSocketAddress()
	a, _ := netip.ParseAddr(sa.GetAddress())
	return netip.AddrPortFrom(a, uint16(sa.GetPortValue()))
}
