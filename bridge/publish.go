package bridge

import (
	"maps"
	"reflect"
	"slices"
	"sort"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/xdsbridge/xdsbridge/healthcheck"
	"github.com/xdsbridge/xdsbridge/sources"
	"github.com/xdsbridge/xdsbridge/translate"
)

// translation is what one flush translated: the resources of the changed
// services and the removed services, with what each changed service was
// translated from (its merged input, options and held subsets'
// diagnostics), recorded as published once the Publisher took them.
type translation struct {
	changed []translate.Resources
	removed []string
	inputs  map[string]sources.Service
	opts    map[string]translate.Options
	held    map[string][]translate.Diagnostic
}

// addNamingDependents sets, for each of names, what its policy names
// (setDeps), and adds, merged, the services that follow one of names that
// goes away: who names whom comes first, as a service's held subsets
// (effectivePolicy) follow the policies of the services that name it, also
// when both change in this flush. A service going away frees the subsets
// it held, and those naming it see it gone (their diagnostics). It returns
// names with them, sorted.
func (l *Loop) addNamingDependents(names []string, merged map[string]mergedService) []string {
	var more []string
	for _, name := range names {
		if merged[name].keep {
			pol, _ := l.policyFor(name)
			l.setDeps(name, pol)
			if _, was := l.published[name]; !was {
				// Those naming it were black holes: no longer.
				for d := range l.routeDeps.by[name] {
					more = append(more, d)
				}
			}
			continue
		}
		if _, was := l.published[name]; was {
			for _, t := range l.routeDeps.of[name] {
				if len(l.held[t]) > 0 {
					more = append(more, t)
				}
			}
			for _, t := range l.failoverDeps.of[name] {
				if len(l.held[t]) > 0 {
					more = append(more, t)
				}
			}
			for d := range l.routeDeps.by[name] {
				more = append(more, d)
			}
		}
		delete(l.pubOpts, name) // holds nothing any more (effectivePolicy)
		l.setDeps(name, nil)
	}
	if len(more) == 0 {
		return names
	}
	for _, n := range more {
		if _, ok := merged[n]; ok {
			continue
		}
		svc, keep := l.merge(n)
		merged[n] = mergedService{svc, keep}
		names = append(names, n)
		if keep {
			pol, _ := l.policyFor(n)
			l.setDeps(n, pol)
		} else {
			l.setDeps(n, nil)
		}
	}
	sort.Strings(names)
	return names
}

// translateAll translates the services of names as merged, but those
// unchanged since published, and validates what it translated. A service
// over the limits or failing validation is refused: it keeps its last
// published version.
func (l *Loop) translateAll(names []string, merged map[string]mergedService) translation {
	l.effective = make(map[string]effective)
	defer func() { l.effective = nil }()
	t := translation{inputs: map[string]sources.Service{}, opts: map[string]translate.Options{}, held: map[string][]translate.Diagnostic{}}
	for _, name := range names {
		svc, keep := merged[name].svc, merged[name].keep
		if !keep {
			if _, was := l.published[name]; was {
				t.removed = append(t.removed, name)
			}
			delete(l.refused, name)
			l.setBlackHoles(name, nil)
			l.setFailoverAdded(name, 0)
			delete(l.failoverDenied, name)
			l.setDiags(name, nil)
			l.setFailoverDeps(name, nil)
			l.routeDeps.set(name, nil)
			continue
		}
		// The owner's default locality: a service that passes to another
		// owner with the same endpoints may still change. Unchanged since
		// published, unless a refused input came in between: translating
		// it again puts back its diagnostics.
		// Its policy too: the options compare by content.
		// The routes and failover follow the service's own policy; its
		// clusters also keep the subsets others still name.
		own, _ := l.policyFor(name)
		pol, held := l.effectivePolicy(name)
		opts := translate.Options{DefaultLocality: l.opts.DefaultLocality[l.owner(name)], Policy: pol, Failover: l.failoverTargets(name, own, merged), Targets: l.routeTargets(name, own), GRPCCertificateProvider: l.opts.GRPCCertificateProvider}
		opts.Absent = l.absentTargets(name, own, merged)
		if old, was := l.published[name]; was && !l.forceTranslate && !l.refused[name] && reflect.DeepEqual(old, svc) && reflect.DeepEqual(l.pubOpts[name], opts) && reflect.DeepEqual(l.held[name], held) {
			// Its policy may have moved to another key or source with
			// the same content: the status page says where it is now.
			l.snap.setPolicyFrom(name, l.policyFrom(name, opts))
			continue
		}
		l.translateOne(name, svc, opts, held, &t)
	}
	l.retryFailoverDenied(&t)
	return t
}

// translateOne translates one service within the limits and the failover
// budget the rest of the catalog leaves it, and adds it to t unless it is
// refused (over the limits, or failing validation: its last published
// version stays).
func (l *Loop) translateOne(name string, svc sources.Service, opts translate.Options, held []translate.Diagnostic, t *translation) {
	budget := max(l.opts.Limits.MaxFailoverEndpoints-(l.failoverTotal-l.failoverAdded[name]), 0)
	r := opts.ServiceWithinBudget(svc, l.opts.Limits, budget)
	r.Diagnostics = append(r.Diagnostics, held...)
	l.setDiags(name, r.Diagnostics)
	for _, d := range r.Diagnostics {
		l.log.Warn("translation diagnostic", "service", d.Service, "field", d.Field, "message", d.Message)
	}
	for limit, n := range r.Exceeded {
		l.m.limitExceeded.WithLabelValues(limit).Add(float64(n))
	}
	if r.Refused {
		l.m.refused.Inc()
		l.refused[name] = true
		_, was := l.published[name]
		l.log.Error("service over the translation limits; serving its last published version", "service", name, "has_published_version", was)
		return
	}
	if err := r.Validate(); err != nil {
		l.m.invalid.Inc()
		l.refused[name] = true
		l.log.Error("generated resource failed validation; serving the last valid one", "service", name, "error", err)
		return
	}
	delete(l.refused, name)
	l.setBlackHoles(name, r.BlackHoles)
	l.setFailoverAdded(name, r.FailoverEndpoints)
	if r.Exceeded[translate.LimitFailoverEndpoints] > 0 {
		l.failoverDenied[name] = budget // the room that was too small
	} else {
		delete(l.failoverDenied, name)
	}
	t.changed = append(t.changed, r.Resources)
	t.inputs[name] = svc
	t.opts[name] = opts
	t.held[name] = held
}

// setBlackHoles records the black holes of a published service's policy
// (translate.Result.BlackHoles) in the xdsbridge_black_holes gauge.
func (l *Loop) setBlackHoles(name string, holes map[string]int) {
	for kind, n := range l.blackHoles[name] {
		l.m.blackHoles.WithLabelValues(kind).Sub(float64(n))
	}
	for kind, n := range holes {
		l.m.blackHoles.WithLabelValues(kind).Add(float64(n))
	}
	if len(holes) == 0 {
		delete(l.blackHoles, name)
	} else {
		l.blackHoles[name] = holes
	}
}

// setFailoverAdded records how many hosts the failover of a published
// service adds (its share of max_failover_endpoints).
func (l *Loop) setFailoverAdded(name string, n int) {
	l.failoverTotal += n - l.failoverAdded[name]
	if n == 0 {
		delete(l.failoverAdded, name)
	} else {
		l.failoverAdded[name] = n
	}
	l.m.failoverEndpoints.Set(float64(l.failoverTotal))
}

// retryFailoverDenied translates again, once, the services whose failover
// max_failover_endpoints left out, if there is more room now than when it
// was left out (a failover shrank or went away): in name order, each
// takes what it fits.
func (l *Loop) retryFailoverDenied(t *translation) {
	for _, name := range slices.Sorted(maps.Keys(l.failoverDenied)) {
		room := l.opts.Limits.MaxFailoverEndpoints - (l.failoverTotal - l.failoverAdded[name])
		if room <= l.failoverDenied[name] {
			continue
		}
		svc, inFlush := t.inputs[name]
		opts, held := t.opts[name], t.held[name]
		if !inFlush {
			var ok bool
			if svc, ok = l.published[name]; !ok {
				continue
			}
			opts, held = l.pubOpts[name], l.held[name]
			// Not in the dirty set: if this flush's publish fails, the
			// next flush must translate it again (its failover hosts
			// already count against the room).
			l.dirty[name] = true
		}
		n := len(t.changed)
		l.translateOne(name, svc, opts, held, t)
		if inFlush && len(t.changed) > n {
			// The new translation replaces the one of this flush.
			i := slices.IndexFunc(t.changed, func(c translate.Resources) bool { return c.Cluster.GetName() == name })
			t.changed = slices.Delete(t.changed, i, i+1)
		}
	}
}

// policyFrom is where the policy of service n, translated with opts, is
// from ("": it has none).
func (l *Loop) policyFrom(n string, opts translate.Options) string {
	if opts.Policy == nil {
		return ""
	}
	if _, from := l.policyFor(n); from != "" {
		return from
	}
	return "(subsets kept while other services name them)"
}

// publish hands the translation to the Publisher and, once it took it,
// records what is published. It reports false when publishing failed:
// nothing is recorded, and the dirty set stays for the next flush.
func (l *Loop) publish(t translation) bool {
	egress := l.opts.Egress != nil
	if egress {
		l.stripEgressNames(t.changed)
		if len(t.removed) > 0 && l.egress.last != nil {
			// Make before break: the table without the removed services
			// goes before their clusters.
			if !l.publishEgress(l.egressTable(t.removed)) {
				return false
			}
		}
	}
	changed := t.changed
	var with *route.RouteConfiguration
	var withDiags []translate.Diagnostic
	if egress {
		var res *translate.Resources
		if res, with, withDiags = l.egressTableAfter(t); res != nil {
			changed = append(slices.Clip(changed), *res)
		}
	}
	if len(t.changed) > 0 || len(t.removed) > 0 {
		if err := l.pub.PublishServices(changed, t.removed); err != nil {
			l.log.Error("publishing to the xDS cache failed; will retry", "error", err)
			l.m.flushErrors.Inc()
			return false
		}
	}
	if egress {
		l.applyEgressChanges(l.egress.services, t)
		if with != nil {
			l.egressPublished(with, withDiags)
		}
		// After the services' clusters. A failure here keeps what the
		// services published: the table follows with the next flush
		// that publishes (the dirty set stays).
		if (len(t.changed) > 0 || len(t.removed) > 0 || l.egress.last == nil) && !l.publishEgress(l.egressTable(nil)) {
			return false
		}
	}
	for n, s := range t.inputs {
		l.published[n] = s
		l.pubOpts[n] = t.opts[n]
		l.snap.setPolicyFrom(n, l.policyFrom(n, t.opts[n]))
		if h := t.held[n]; len(h) > 0 {
			l.held[n] = h
		} else {
			delete(l.held, n)
		}
	}
	for _, n := range t.removed {
		delete(l.published, n)
		delete(l.pubOpts, n)
		delete(l.held, n)
		delete(l.retained, n)
		l.snap.setPolicyFrom(n, "")
	}
	return true
}

// updateChecks tells the checker which hosts to probe when that changed:
// the published hosts (discovered and retained) and the discovered hosts of
// services not published yet.
func (l *Loop) updateChecks() {
	if l.opts.HealthChecks == nil {
		return
	}
	names := make([]string, 0, len(l.claims))
	for name := range l.claims {
		names = append(names, name)
	}
	for name := range l.published {
		if _, ok := l.claims[name]; !ok {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	hosts := make([]healthcheck.ServiceHosts, 0, len(names))
	for _, name := range names {
		sh := healthcheck.ServiceHosts{Service: name, Source: l.owner(name)}
		eps := l.bySource[sh.Source][name].Endpoints
		if p, ok := l.published[name]; ok {
			eps = p.Endpoints
		}
		for _, e := range eps {
			sh.Hosts = append(sh.Hosts, e.Key())
		}
		hosts = append(hosts, sh)
	}
	if reflect.DeepEqual(hosts, l.lastHosts) {
		return
	}
	l.lastHosts = hosts
	l.opts.HealthChecks.SetHosts(hosts)
}
