package bridge

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/xdsbridge/xdsbridge/policy"
	"github.com/xdsbridge/xdsbridge/sources"
	"github.com/xdsbridge/xdsbridge/translate"
)

// Traffic policy comes from policy sources (sources.PolicyUpdate) next to
// the services. A service's policy is the entry naming it exactly in the
// first policy source (in config order) that has one; failing that, the
// most specific pattern matching it over every policy source (ties: the
// earlier source). Policy sources must sync before the bridge is ready,
// like every source: clients never see a service without its policy.

// PublishPolicy implements sources.Sink.
func (l *Loop) PublishPolicy(ctx context.Context, u sources.PolicyUpdate) error {
	select {
	case l.events <- event{kind: evPolicy, policy: u, source: u.Source}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// applyPolicy replaces a policy source's policy and marks dirty every
// service whose policy changes. It reports whether any did.
func (l *Loop) applyPolicy(u sources.PolicyUpdate) bool {
	src := u.Source
	f := u.Policy
	if f == nil {
		f = &policy.File{}
	}
	before := map[string]*policy.Service{}
	beforeFrom := map[string]string{}
	names := l.knownServices()
	for _, n := range names {
		before[n], beforeFrom[n] = l.policyFor(n)
	}
	l.policies[src] = f
	dirty := false
	for _, n := range names {
		after, afterFrom := l.policyFor(n)
		if reflect.DeepEqual(before[n], after) && afterFrom != beforeFrom[n] {
			// The same policy from another key or source: nothing to
			// translate, but the status page says where it is from.
			if opts, ok := l.pubOpts[n]; ok {
				l.snap.setPolicyFrom(n, l.policyFrom(n, opts))
			}
		}
		if !reflect.DeepEqual(before[n], after) {
			l.dirty[n] = true
			dirty = true
			// A failover to one of its subsets follows the subset's filter.
			for dep := range l.failoverDeps.by[n] {
				l.dirty[dep] = true
			}
			// Routes naming it follow its default subset, redirect
			// and subsets.
			for dep := range l.routeDeps.by[n] {
				l.dirty[dep] = true
			}
			// The services it named and names: a subset it stops
			// naming may be held no longer (see effectivePolicy).
			for _, t := range l.routeDeps.of[n] {
				l.dirty[t] = true
			}
			for _, t := range l.failoverDeps.of[n] {
				l.dirty[t] = true
			}
			for _, t := range policyTargets(after) {
				if t != n {
					l.dirty[t] = true
				}
			}
		}
	}
	l.noteSync(src, gotPolicy, true, func(st *SourceStatus) {
		st.Policies = len(f.Services)
		// Policy sources publish only what changed (a policy holds
		// compiled filters: not compared here).
		st.noteChange(true)
	})
	l.warnPolicyConflicts()

	if !l.ready && l.allSynced() {
		return true
	}
	return dirty
}

// knownServices is every service claimed or published, sorted.
func (l *Loop) knownServices() []string {
	seen := make(map[string]bool, len(l.claims)+len(l.published))
	for n := range l.claims {
		seen[n] = true
	}
	for n := range l.published {
		seen[n] = true
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// policySources is the policy sources with a policy, in config order
// (sources not in the config last, by name).
func (l *Loop) policySources() []string {
	out := make([]string, 0, len(l.policies))
	listed := map[string]bool{}
	for _, s := range l.opts.Sources {
		if _, ok := l.policies[s]; ok {
			out = append(out, s)
			listed[s] = true
		}
	}
	var rest []string
	for s := range l.policies {
		if !listed[s] {
			rest = append(rest, s)
		}
	}
	sort.Strings(rest)
	return append(out, rest...)
}

// policyFor is the policy of a service (nil: the default) and where it is
// from: "source: key".
func (l *Loop) policyFor(name string) (*policy.Service, string) {
	srcs := l.policySources()
	for _, src := range srcs {
		if s, ok := l.policies[src].Services[name]; ok && !policy.IsPattern(name) {
			return &s, src + ": " + name
		}
	}
	var best *policy.Service
	var from string
	bestLen := -1
	for _, src := range srcs {
		s, key, ok := l.policies[src].For(name)
		if !ok || !policy.IsPattern(key) {
			continue
		}
		if n := policy.Specificity(key); n > bestLen {
			best, from, bestLen = &s, src+": "+key, n
		}
	}
	return best, from
}

// warnPolicyConflicts logs the service names that more than one policy
// source gives a policy by name: the first source's is used.
func (l *Loop) warnPolicyConflicts() {
	by := map[string][]string{}
	for _, src := range l.policySources() {
		for key := range l.policies[src].Services {
			if !policy.IsPattern(key) {
				by[key] = append(by[key], src)
			}
		}
	}
	n := 0
	for name, srcs := range by {
		if len(srcs) > 1 {
			n++
			l.log.Warn("service given a policy by more than one policy source; the first is used", "service", name, "used", srcs[0], "ignored", srcs[1:])
		}
	}
	l.m.policyConflicts.Set(float64(n))
}

// mergedService is a service as merged in one flush; keep is false when it
// is to be removed.
type mergedService struct {
	svc  sources.Service
	keep bool
}

// addFailoverDependents merges, once, the services whose failover names
// one of names whose merged input changed, and returns names with them,
// sorted.
func (l *Loop) addFailoverDependents(names []string, merged map[string]mergedService) []string {
	var more []string
	for _, name := range names {
		m := merged[name]
		old, was := l.published[name]
		if m.keep == was && (!m.keep || reflect.DeepEqual(old, m.svc)) {
			continue // its input did not change
		}
		for dep := range l.failoverDeps.by[name] {
			if _, ok := merged[dep]; ok {
				continue
			}
			svc, keep := l.merge(dep)
			merged[dep] = mergedService{svc, keep}
			more = append(more, dep)
		}
	}
	if len(more) == 0 {
		return names
	}
	names = append(names, more...)
	sort.Strings(names)
	return names
}

// failoverTargets resolves the failover targets of a service's policy to
// the services they name, as merged in this flush or as last published,
// and records the service as their dependent.
func (l *Loop) failoverTargets(name string, pol *policy.Service, merged map[string]mergedService) []translate.FailoverTarget {
	l.setFailoverDeps(name, pol)
	if pol == nil || len(pol.Failover) == 0 {
		return nil
	}
	out := make([]translate.FailoverTarget, 0, len(pol.Failover))
	for _, t := range pol.Failover {
		ft := translate.FailoverTarget{Target: t}
		if t.Datacenter == "" {
			target := t.Service
			if target == "" {
				target = name
			}
			if m, ok := merged[target]; ok {
				if m.keep {
					svc := m.svc
					ft.Service = &svc
				}
			} else if p, ok := l.published[target]; ok {
				svc := p
				ft.Service = &svc
			}
			if t.Subset != "" {
				ft.Policy, _ = l.effectivePolicy(target)
			}
		}
		out = append(out, ft)
	}
	return out
}

// depIndex records which services depend on which others: by[t] are the
// services that name t; of[s] what s names.
type depIndex struct {
	by map[string]map[string]bool
	of map[string][]string
}

func newDepIndex() depIndex {
	return depIndex{by: map[string]map[string]bool{}, of: map[string][]string{}}
}

// set replaces what name depends on.
func (d depIndex) set(name string, targets []string) {
	for _, t := range d.of[name] {
		delete(d.by[t], name)
		if len(d.by[t]) == 0 {
			delete(d.by, t)
		}
	}
	delete(d.of, name)
	for _, t := range targets {
		if t == "" || t == name || d.by[t][name] {
			continue
		}
		if d.by[t] == nil {
			d.by[t] = map[string]bool{}
		}
		d.by[t][name] = true
		d.of[name] = append(d.of[name], t)
	}
}

// setFailoverDeps records which services the failover of name's policy
// names (none for a nil policy).
func (l *Loop) setFailoverDeps(name string, pol *policy.Service) {
	var ts []string
	if pol != nil {
		for _, t := range pol.Failover {
			if t.Datacenter == "" {
				ts = append(ts, t.Service)
			}
		}
	}
	l.failoverDeps.set(name, ts)
}

// routeTargets returns the policies of the other services name's routes,
// splits and redirect send requests to (translate.Options.Targets), and
// records name as depending on them: a change of their policy (a default
// subset, a redirect, a subset gone) translates it again.
func (l *Loop) routeTargets(name string, pol *policy.Service) map[string]*policy.Service {
	l.routeDeps.set(name, l.routeDepNames(pol))
	if len(l.routeDeps.of[name]) == 0 {
		return nil
	}
	out := make(map[string]*policy.Service, len(l.routeDeps.of[name]))
	for _, t := range l.routeDeps.of[name] {
		out[t], _ = l.effectivePolicy(t)
	}
	return out
}

// setDeps records what name's policy names, before a flush translates
// anything: effectivePolicy reads who names a service.
func (l *Loop) setDeps(name string, pol *policy.Service) {
	l.setFailoverDeps(name, pol)
	l.routeDeps.set(name, l.routeDepNames(pol))
}

// targetsOf calls f with every target a policy's routes, splits,
// redirect and failover name.
func targetsOf(pol *policy.Service, f func(t policy.Target, failover bool)) {
	if pol == nil {
		return
	}
	if pol.Redirect != nil {
		f(*pol.Redirect, false)
	}
	for _, sp := range pol.Split {
		f(policy.Target{Service: sp.Service, Subset: sp.Subset}, false)
	}
	for _, r := range pol.Routes {
		if r.Destination != nil {
			f(*r.Destination, false)
		}
		for _, sp := range r.Split {
			f(policy.Target{Service: sp.Service, Subset: sp.Subset}, false)
		}
	}
	for _, t := range pol.Failover {
		f(t, true)
	}
}

// routeDepNames is what the routes of a service under pol follow: the
// services its routes, splits and redirect name, and the failover targets
// of their policies (a target nobody publishes is routed to its first
// published failover target: translate's blackhole.go).
func (l *Loop) routeDepNames(pol *policy.Service) []string {
	ts := routeTargetNames(pol)
	for _, t := range ts {
		if t == "" {
			continue
		}
		tp, _ := l.policyFor(t)
		if tp == nil {
			continue
		}
		for _, f := range tp.Failover {
			if f.Datacenter == "" && f.Service != "" {
				ts = append(ts, f.Service)
			}
		}
	}
	return ts
}

// absentTargets is, sorted, what name's policy names (its routes, splits,
// redirect and failover, and the failover targets its routes follow)
// that is not published, as merged in this flush or last published:
// translate.Options.Absent. Nil when everything is.
func (l *Loop) absentTargets(name string, pol *policy.Service, merged map[string]mergedService) []string {
	if pol == nil {
		return nil
	}
	var out []string
	add := func(t string) {
		if t == "" || t == name || slices.Contains(out, t) {
			return
		}
		present := false
		if m, ok := merged[t]; ok {
			present = m.keep
		} else {
			_, present = l.published[t]
		}
		if !present {
			out = append(out, t)
		}
	}
	for _, t := range l.routeDeps.of[name] {
		add(t)
	}
	for _, t := range pol.Failover {
		if t.Datacenter == "" {
			add(t.Service)
		}
	}
	sort.Strings(out)
	return out
}

// routeTargetNames is the services a policy's routes, splits and
// redirect name (with repeats, "" for its own).
func routeTargetNames(pol *policy.Service) []string {
	var ts []string
	targetsOf(pol, func(t policy.Target, failover bool) {
		if !failover {
			ts = append(ts, t.Service)
		}
	})
	return ts
}

// policyTargets is every service a policy names, routes and failover.
func policyTargets(pol *policy.Service) []string {
	var ts []string
	targetsOf(pol, func(t policy.Target, failover bool) {
		if t.Service != "" && (!failover || t.Datacenter == "") {
			ts = append(ts, t.Service)
		}
	})
	return ts
}

// effectivePolicy is the policy a service is translated with: its own
// (policyFor), plus the subsets it was last published with that its
// policy no longer defines but another service's routes, splits,
// redirect or failover still name. Taking those away would leave the
// other service's requests with no cluster (Envoy answers 503, gRPC
// clients fail the calls), for a change made elsewhere; Consul refuses
// such a write for the same reason. So the subset stays, with its last
// filter, until nothing names it; each is a diagnostic of the service.
//
// Within a flush (l.effective set) the result is computed once per
// service: every service naming a hub asks for the hub's.
func (l *Loop) effectivePolicy(name string) (*policy.Service, []translate.Diagnostic) {
	if e, ok := l.effective[name]; ok {
		return e.pol, e.diags
	}
	pol, diags := l.computeEffectivePolicy(name)
	if l.effective != nil {
		l.effective[name] = effective{pol, diags}
	}
	return pol, diags
}

type effective struct {
	pol   *policy.Service
	diags []translate.Diagnostic
}

func (l *Loop) computeEffectivePolicy(name string) (*policy.Service, []translate.Diagnostic) {
	pol, _ := l.policyFor(name)
	prev := l.pubOpts[name].Policy
	if prev == nil || len(prev.Subsets) == 0 {
		return pol, nil
	}
	dropped := false
	for sub := range prev.Subsets {
		if !pol.HasSubset(sub) {
			dropped = true
			break
		}
	}
	if !dropped {
		return pol, nil
	}
	var deps []string
	for d := range l.routeDeps.by[name] {
		deps = append(deps, d)
	}
	for d := range l.failoverDeps.by[name] {
		if !l.routeDeps.by[name][d] {
			deps = append(deps, d)
		}
	}
	if len(deps) == 0 {
		return pol, nil
	}
	sort.Strings(deps)
	var held map[string]policy.Subset
	namedBy := map[string][]string{}
	for _, d := range deps {
		dp, _ := l.policyFor(d)
		targetsOf(dp, func(t policy.Target, failover bool) {
			if t.Service != name || t.Subset == "" || (failover && t.Datacenter != "") {
				return
			}
			if pol.HasSubset(t.Subset) {
				return
			}
			def, ok := prev.Subsets[t.Subset]
			if !ok {
				return
			}
			if held == nil {
				held = map[string]policy.Subset{}
			}
			held[t.Subset] = def
			if by := namedBy[t.Subset]; len(by) == 0 || by[len(by)-1] != d {
				namedBy[t.Subset] = append(by, d)
			}
		})
	}
	if len(held) == 0 {
		return pol, nil
	}
	cp := policy.Service{}
	if pol != nil {
		cp = *pol
	}
	cp.Subsets = make(map[string]policy.Subset, len(cp.Subsets)+len(held))
	if pol != nil {
		for k, v := range pol.Subsets {
			cp.Subsets[k] = v
		}
	}
	subs := make([]string, 0, len(held))
	for k, v := range held {
		cp.Subsets[k] = v
		subs = append(subs, k)
	}
	sort.Strings(subs)
	diags := make([]translate.Diagnostic, 0, len(subs))
	for _, sub := range subs {
		diags = append(diags, translate.Diagnostic{Service: name, Field: "subsets." + sub,
			Message: fmt.Sprintf("no longer in the service's policy, but the routes or failover of %s still name it: kept with its last filter until none does", strings.Join(namedBy[sub], ", "))})
	}
	return &cp, diags
}
