package translate

import (
	"fmt"
	"math"
	"slices"

	"github.com/xdsbridge/xdsbridge/policy"
)

// Black holes: what a policy names that no source publishes. A request
// sent to such a service's cluster finds none (Envoy answers 503
// no_cluster, gRPC clients fail the call); every such reference is a
// Diagnostic of the service, counted by kind in Result.BlackHoles.
//
//   - A target whose service has no hosts but whose own policy fails over
//     (a Consul service-resolver's failover) goes to its first failover
//     target that is published, as Consul's discovery chain does.
//   - Otherwise a split share naming it is dropped, and the other shares
//     take its requests (shares are weight / sum of the weights): sending
//     a share to nothing would fail that share of the requests, while
//     hosts able to serve them are there. The share comes back when the
//     service is published again (the merge loop translates the services
//     naming it again). When every share of a weight above 0 is
//     dropped, the split is kept: there is nowhere better to send the
//     requests (a share of weight 0 takes none).
//   - A route destination or a redirect to it stays as it is: its requests
//     have nowhere else to go that the policy chose.
//   - A redirect to a service that redirects back (web → api → web) is a
//     cycle: a redirect's target is taken as it is (one level), so each
//     service keeps its own hosts. It is reported, as it is most likely
//     not what was meant.

// Kinds of black holes, as Result.BlackHoles counts them.
const (
	BlackHoleRoute         = "route"
	BlackHoleSplit         = "split"
	BlackHoleRedirect      = "redirect"
	BlackHoleFailover      = "failover"
	BlackHoleRedirectCycle = "redirect_cycle"
)

// blackHoles returns the policy the routes are built from: o.Policy, or a
// copy with the black holes resolved as above. A nil o.Absent is nothing
// absent.
func (o Options) blackHoles(service string) (*policy.Service, []Diagnostic, map[string]int) {
	p := o.Policy
	var diags []Diagnostic
	var counts map[string]int
	count := func(kind, field, msg string, args ...any) {
		diags = append(diags, Diagnostic{service, field, fmt.Sprintf(msg, args...)})
		if kind != "" {
			if counts == nil {
				counts = map[string]int{}
			}
			counts[kind]++
		}
	}
	// appendFailover reports the failover targets not published.
	for _, ft := range o.Failover {
		if ft.Target.Datacenter == "" && ft.Service == nil {
			if counts == nil {
				counts = map[string]int{}
			}
			counts[BlackHoleFailover]++
		}
	}
	if p == nil {
		return p, diags, counts
	}
	absent := func(svc string) bool {
		return svc != "" && svc != service && slices.Contains(o.Absent, svc)
	}
	// failover is where a target naming an absent service goes instead:
	// its policy's first failover target that is published.
	failover := func(t policy.Target) (policy.Target, bool) {
		tp := o.Targets[t.Service]
		if tp == nil {
			return t, false
		}
		for _, f := range tp.Failover {
			if f.Datacenter != "" {
				continue
			}
			if f.Service == "" {
				f.Service = t.Service
			}
			if f.Service != t.Service && !absent(f.Service) {
				return policy.Target{Service: f.Service, Subset: f.Subset}, true
			}
		}
		return t, false
	}
	cp := *p
	changed := false
	if r := p.Redirect; r != nil && r.Datacenter == "" {
		switch {
		case absent(r.Service):
			if alt, ok := failover(*r); ok {
				cp.Redirect, changed = &alt, true
				count("", "redirect", "service %q is not published: redirected to its failover target %s, as Consul does", r.Service, targetString(alt))
			} else {
				count(BlackHoleRedirect, "redirect", "service %q is not published: every request for this service fails until it is", r.Service)
			}
		case r.Service != "" && r.Service != service:
			if tp := o.Targets[r.Service]; tp != nil && tp.Redirect != nil && tp.Redirect.Service == service && tp.Redirect.Subset == "" && tp.Redirect.Datacenter == "" {
				count(BlackHoleRedirectCycle, "redirect", "redirect cycle: %s → %s → %s; a redirect's target is taken as it is, so each keeps its own hosts: remove one of the redirects", service, r.Service, service)
			}
		}
	}
	split := func(field string, shares []policy.Split) ([]policy.Split, bool) {
		var out []policy.Split
		dropped, moved := 0, false
		for i, sp := range shares {
			if !absent(sp.Service) {
				out = append(out, sp)
				continue
			}
			f := fmt.Sprintf("%s[%d]", field, i)
			if alt, ok := failover(policy.Target{Service: sp.Service, Subset: sp.Subset}); ok {
				count("", f, "service %q is not published: its share goes to its failover target %s, as Consul does", sp.Service, targetString(alt))
				sp.Service, sp.Subset, moved = alt.Service, alt.Subset, true
				out = append(out, sp)
				continue
			}
			count(BlackHoleSplit, f, "service %q is not published: share dropped, the other shares take its requests until it is", sp.Service)
			dropped++
		}
		if dropped == 0 {
			return out, moved
		}
		// Shares of weight 0 take no request (weighted leaves them out):
		// left alone, they would send the split's requests to the service
		// itself.
		if !slices.ContainsFunc(out, func(sp policy.Split) bool { return math.Round(sp.Weight*100) >= 1 }) {
			count("", field, "every share names a service that is not published: kept, its requests fail until one is")
			return shares, false
		}
		return out, true
	}
	if s, ok := split("split", p.Split); ok {
		cp.Split, changed = s, true
	}
	var routes []policy.Route
	for i, r := range p.Routes {
		field := fmt.Sprintf("routes[%d]", i)
		if d := r.Destination; d != nil && absent(d.Service) {
			if alt, ok := failover(*d); ok {
				count("", field+".destination", "service %q is not published: routed to its failover target %s, as Consul does", d.Service, targetString(alt))
				r.Destination = &alt
			} else {
				count(BlackHoleRoute, field+".destination", "service %q is not published: requests taking this route fail until it is", d.Service)
				continue
			}
		} else if s, ok := split(field+".split", r.Split); ok {
			r.Split = s
		} else {
			continue
		}
		if routes == nil {
			routes = slices.Clone(p.Routes)
		}
		routes[i] = r
	}
	if routes != nil {
		cp.Routes, changed = routes, true
	}
	if !changed {
		return p, diags, counts
	}
	return &cp, diags, counts
}

func targetString(t policy.Target) string {
	if t.Subset != "" {
		return fmt.Sprintf("%q subset %q", t.Service, t.Subset)
	}
	return fmt.Sprintf("%q", t.Service)
}
