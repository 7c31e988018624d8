package bridge

import (
	"sort"
	"time"

	"github.com/xdsbridge/xdsbridge/healthcheck"
	"github.com/xdsbridge/xdsbridge/sources"
)

// retainedHost is a host kept after it left discovery (the matrix's
// "absent from discovery, health check OK" cell).
type retainedHost struct {
	endpoint    sources.Endpoint
	absentSince time.Time
	source      string
	// dropped is the rule that removed the host, once one did. The entry
	// stays (with its absentSince) until the service is published without
	// it: a refused or failed publish leaves it served, and it must not
	// then be taken for a newly absent host with a fresh retention.
	dropped healthcheck.Rule
}

// mergeInput is what the merge of one service reads.
type mergeInput struct {
	Name string
	// Owner is the source that owns the service; "" when none lists it
	// any more (the service is removed).
	Owner string
	// Discovered is the owner's service.
	Discovered sources.Service
	// Published is the service as last published; nil if it is not.
	Published *sources.Service
	// Kept are the hosts retained so far; mergeService does not modify it.
	Kept map[sources.HostKey]retainedHost
	// Verdict is the active check's verdict of a host (nil: no checks,
	// every host is healthcheck.NoCheck); Detail its state for
	// /debug/hosts (nil: none).
	Verdict func(sources.HostKey) healthcheck.Verdict
	Detail  func(sources.HostKey) any
	// MaxRetention bounds how long a host is retained (0: no bound).
	MaxRetention time.Duration
	Now          time.Time
}

// mergeResult is the merge of one service.
type mergeResult struct {
	// Service is what to publish; Keep is false when the service is to be
	// removed (then Hosts is nil and Kept is the input's).
	Service sources.Service
	Keep    bool
	// Hosts explains every host, discovered or retained, sorted by host.
	Hosts []HostInfo
	// Kept are the hosts retained now, with those a rule dropped (kept
	// until the service is published without them); nil when none.
	Kept map[sources.HostKey]retainedHost
}

// mergeService computes the service to publish from its owner's endpoints,
// active health checks and retained hosts: the discovery × health-check
// matrix (healthcheck.Decide) per host. A discovered host is published
// with the health the matrix gives it; a host published before and now absent is retained while
// its check passes, up to MaxRetention; once a rule drops a retained host
// it stays dropped. It is pure: it reads only its input.
func mergeService(in mergeInput) mergeResult {
	if in.Owner == "" {
		return mergeResult{Kept: in.Kept}
	}
	verdict := func(k sources.HostKey) healthcheck.Verdict {
		if in.Verdict == nil {
			return healthcheck.NoCheck
		}
		return in.Verdict(k)
	}
	detail := func(k sources.HostKey) any {
		if in.Detail == nil {
			return nil
		}
		return in.Detail(k)
	}
	src := in.Discovered.Endpoints
	out := sources.Service{Name: in.Name, Endpoints: make([]sources.Endpoint, 0, len(src))}
	infos := make([]HostInfo, 0, len(src))
	// The owner's endpoints are in normal form (sources.Sink.Publish):
	// sorted, each host once.
	seen := make(map[sources.HostKey]bool, len(src))
	for _, e := range src {
		k := e.Key()
		seen[k] = true
		v := verdict(k)
		d := healthcheck.Decide(true, e.Health, v, 0, 0)
		pe := e
		pe.Health = d.Health
		out.Endpoints = append(out.Endpoints, pe)
		infos = append(infos, HostInfo{Host: k.String(), Discovered: true, Source: in.Owner, SourceHealth: e.Health, Check: v, CheckState: detail(k), Published: d.Publish, Health: d.Health, Rule: d.Rule})
	}
	// Hosts published before and now absent: retained while their check
	// passes. A retained host discovered again is no longer retained.
	kept := make(map[sources.HostKey]retainedHost, len(in.Kept))
	for k, r := range in.Kept {
		if !seen[k] {
			kept[k] = r
		}
	}
	if in.Published != nil {
		for _, e := range in.Published.Endpoints {
			k := e.Key()
			if seen[k] {
				continue
			}
			if _, already := kept[k]; !already {
				kept[k] = retainedHost{endpoint: e, absentSince: in.Now, source: in.Owner}
			}
		}
	}
	mixed := false
	for k, r := range kept {
		v := verdict(k)
		d := healthcheck.Decide(false, sources.HealthUnknown, v, in.Now.Sub(r.absentSince), in.MaxRetention)
		if r.dropped != "" {
			// Dropped but not yet published without it: it stays dropped.
			d = healthcheck.Decision{Publish: false, Health: sources.HealthUnknown, Rule: r.dropped}
		}
		infos = append(infos, HostInfo{Host: k.String(), Discovered: false, Source: r.source, Check: v, CheckState: detail(k), Published: d.Publish, Health: d.Health, Rule: d.Rule, AbsentSince: r.absentSince})
		if !d.Publish {
			// Kept until the service is published without it (pruneDropped).
			r.dropped = d.Rule
			kept[k] = r
			continue
		}
		pe := r.endpoint
		pe.Health = d.Health
		out.Endpoints = append(out.Endpoints, pe)
		mixed = true
	}
	if len(kept) == 0 {
		kept = nil
	}
	if mixed {
		// Retained hosts (from a map) go in among the discovered ones.
		sources.SortEndpoints(out.Endpoints)
	}
	sort.Slice(infos, func(i, j int) bool { return infos[i].Host < infos[j].Host })
	return mergeResult{Service: out, Keep: true, Hosts: infos, Kept: kept}
}

// merge merges one service (mergeService) from the loop's state and
// records its retained hosts and host information. keep is false when the
// service is to be removed.
func (l *Loop) merge(name string) (svc sources.Service, keep bool) {
	owner := l.owner(name)
	in := mergeInput{Name: name, Owner: owner, Discovered: l.bySource[owner][name], Kept: l.retained[name], MaxRetention: l.opts.MaxRetention, Now: l.now()}
	if p, ok := l.published[name]; ok {
		in.Published = &p
	}
	if hc := l.opts.HealthChecks; hc != nil {
		in.Verdict = func(k sources.HostKey) healthcheck.Verdict { return hc.Verdict(name, k) }
		in.Detail = func(k sources.HostKey) any { return hc.Detail(name, k) }
	}
	r := mergeService(in)
	if r.Keep {
		if r.Kept != nil {
			l.retained[name] = r.Kept
		} else {
			delete(l.retained, name)
		}
	}
	l.setHostInfo(name, r.Hosts)
	return r.Service, r.Keep
}

// pruneDropped forgets the dropped retained hosts of a service that its
// published version no longer has.
func (l *Loop) pruneDropped(name string) {
	ret := l.retained[name]
	if len(ret) == 0 {
		return
	}
	served := map[sources.HostKey]bool{}
	for _, e := range l.published[name].Endpoints {
		served[e.Key()] = true
	}
	for k, r := range ret {
		if r.dropped != "" && !served[k] {
			delete(ret, k)
		}
	}
	if len(ret) == 0 {
		delete(l.retained, name)
	}
}

// nextExpiry is when the next retained host still served reaches
// max_retention; zero when there is none (or no bound). A host of a dirty
// service already past it is left out: the coming flush drops it.
func (l *Loop) nextExpiry() time.Time {
	maxRet := l.opts.MaxRetention
	if maxRet <= 0 {
		return time.Time{}
	}
	var next time.Time
	now := l.now()
	for name, ret := range l.retained {
		for _, r := range ret {
			if r.dropped != "" {
				continue
			}
			at := r.absentSince.Add(maxRet)
			if l.dirty[name] && !at.After(now) {
				continue
			}
			if next.IsZero() || at.Before(next) {
				next = at
			}
		}
	}
	return next
}

// expireRetained marks dirty the services with a retained host that reached
// max_retention, and reports whether there is any.
func (l *Loop) expireRetained() bool {
	maxRet := l.opts.MaxRetention
	if maxRet <= 0 {
		return false
	}
	now := l.now()
	found := false
	for name, ret := range l.retained {
		for _, r := range ret {
			if r.dropped == "" && now.Sub(r.absentSince) >= maxRet {
				l.dirty[name] = true
				found = true
				break
			}
		}
	}
	return found
}
