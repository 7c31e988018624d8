// Package bridge is the merge loop: the one goroutine that owns the merged
// state of every source.
//
//	sources ──Publish/Fail (events)──▶ Loop.Run ──debounce──▶ merge with health checks
//	                                                         │
//	                                         translate (pure)▼
//	                                            Publisher (the xDS cache)
//
// Sources only send events; the loop marks the services an event touches as
// dirty, waits for a quiet period (bounded by a maximum hold, so a steady
// stream cannot starve updates), then rebuilds only the dirty services and
// publishes what changed.
package bridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xdsbridge/xdsbridge/healthcheck"
	"github.com/xdsbridge/xdsbridge/policy"
	"github.com/xdsbridge/xdsbridge/sources"
	"github.com/xdsbridge/xdsbridge/translate"
)

// Publisher receives the translated resources. The xDS cache implements it.
type Publisher interface {
	// PublishServices publishes the resources of changed services and
	// removes those of removed services. It must not keep or modify the
	// slices past the call; the resources themselves are handed over.
	PublishServices(changed []translate.Resources, removed []string) error
	// MarkReady lets clients be answered. Called once, after the first
	// publish that follows every source's first sync.
	MarkReady()
}

// Options configure a Loop.
type Options struct {
	// Sources names every source that must sync before the bridge is ready.
	Sources []string
	// ServicesAndPolicy names the sources (of Sources) that publish both
	// services and a policy (sources.PolicyPublisher): each counts as
	// synced only once it has published both, whichever comes first.
	// Every other source is synced by its first publish of either.
	ServicesAndPolicy []string
	// Quiet is how long the loop waits after the last event (default 50ms).
	Quiet time.Duration
	// MaxHold is the longest a dirty service waits while events keep coming
	// (default 500ms).
	MaxHold time.Duration
	Logger  *slog.Logger
	Metrics prometheus.Registerer
	// Now is the clock, for tests. Default time.Now.
	Now func() time.Time
	// HealthChecks supplies active health-check verdicts; nil for none.
	HealthChecks Checks
	// MaxRetention bounds how long a host absent from discovery but passing
	// its check is retained; 0 retains it as long as it passes.
	MaxRetention time.Duration
	// DefaultLocality maps a source name to the locality given to the
	// endpoints without one of the services it owns (translate.Options); a
	// source not in the map gives them an empty locality.
	DefaultLocality map[string]sources.Locality
	// Limits bound what a service's resources carry (zero fields:
	// translate's defaults). A service over them is published without
	// what is over (metadata namespaces, hostnames) or, when nothing can
	// be dropped, not published: its last published version stays.
	Limits translate.Limits
	// GRPCCertificateProvider is translate.Options.GRPCCertificateProvider
	// for every service: the certificate provider instance of gRPC
	// clients' bootstrap that clusters with upstream TLS name ("": none).
	GRPCCertificateProvider string
}

// Checks is what the loop asks of active health checking. Implementations
// are safe for concurrent use.
type Checks interface {
	// Verdict is the active check's verdict for a host of a service.
	Verdict(service string, host sources.HostKey) healthcheck.CheckVerdict
	// SetHosts tells the checker which hosts each service has (discovered
	// or retained), so it probes exactly those.
	SetHosts(hosts []healthcheck.ServiceHosts)
	// Detail is the checker's state of a host, for /debug/hosts (nil if none).
	Detail(service string, host sources.HostKey) any
}

type eventKind int

const (
	evPublish eventKind = iota
	evFail
	evCheck
	evPolicy
)

type event struct {
	kind    eventKind
	update  sources.Update
	policy  sources.PolicyUpdate
	source  string
	err     error
	service string // evCheck: the service whose check verdicts changed ("" = all)
}

// Loop is the merge loop. Create it with New, run it with Run; sources reach
// it through its Sink methods (Publish, Fail), which are safe for concurrent
// use. Every other field is owned by the Run goroutine, except the snapshots
// behind mu that the admin handlers read.
type Loop struct {
	opts   Options
	pub    Publisher
	log    *slog.Logger
	now    func() time.Time
	events chan event
	m      *loopMetrics

	// Owned by Run.
	bySource  map[string]map[string]sources.Service // source → service → last published
	claims    map[string][]string                   // service → sources claiming it, first is owner
	synced    map[string]bool
	gotKinds  map[string]syncKinds // what each source has published so far
	dirty     map[string]bool
	published map[string]sources.Service        // service → the merged input last translated
	pubOpts   map[string]translate.Options      // service → the options it was translated with (its policy included)
	held      map[string][]translate.Diagnostic // service → the diagnostics of its held subsets when translated
	// retranslate are services to translate again in the next flush even
	// if their input is unchanged (a subset cluster name freed or taken).
	retranslate map[string]bool
	// effective memoizes effectivePolicy during a flush (nil outside).
	effective map[string]effective
	policies  map[string]*policy.File // policy source → its policy
	// failoverDeps: the services whose failover names a service (their
	// assignments carry its endpoints); routeDeps: those whose routes,
	// splits or redirect name it (they follow its policy).
	failoverDeps depIndex
	routeDeps    depIndex
	// refused holds the services whose latest input was refused (over the
	// limits, or failing validation): what is served is an older version
	// (published) or nothing.
	refused   map[string]bool
	retained  map[string]map[sources.HostKey]*retainedHost
	lastHosts []healthcheck.ServiceHosts
	ready     bool

	mu        sync.Mutex
	status    map[string]*SourceStatus
	hostInfo  map[string][]HostInfo
	conflicts map[string][]string
	readyFlag bool
	diags     map[string][]translate.Diagnostic
}

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

var _ sources.Sink = (*Loop)(nil)

// New returns a loop publishing to pub. It starts nothing.
func New(opts Options, pub Publisher) *Loop {
	if opts.Quiet <= 0 {
		opts.Quiet = 50 * time.Millisecond
	}
	if opts.MaxHold < opts.Quiet {
		opts.MaxHold = 10 * opts.Quiet
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	opts.Limits = opts.Limits.WithDefaults()
	l := &Loop{
		opts:         opts,
		pub:          pub,
		log:          opts.Logger,
		now:          opts.Now,
		events:       make(chan event, 64),
		bySource:     map[string]map[string]sources.Service{},
		claims:       map[string][]string{},
		synced:       map[string]bool{},
		gotKinds:     map[string]syncKinds{},
		dirty:        map[string]bool{},
		published:    map[string]sources.Service{},
		pubOpts:      map[string]translate.Options{},
		held:         map[string][]translate.Diagnostic{},
		retranslate:  map[string]bool{},
		policies:     map[string]*policy.File{},
		failoverDeps: newDepIndex(),
		routeDeps:    newDepIndex(),
		refused:      map[string]bool{},
		retained:     map[string]map[sources.HostKey]*retainedHost{},
		status:       map[string]*SourceStatus{},
		hostInfo:     map[string][]HostInfo{},
		conflicts:    map[string][]string{},
		diags:        map[string][]translate.Diagnostic{},
	}
	for _, s := range opts.Sources {
		l.status[s] = &SourceStatus{Name: s}
	}
	l.m = newLoopMetrics(l, opts.Metrics)
	return l
}

// Publish implements sources.Sink.
func (l *Loop) Publish(ctx context.Context, u sources.Update) error {
	select {
	case l.events <- event{kind: evPublish, update: u, source: u.Source}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Fail implements sources.Sink.
func (l *Loop) Fail(ctx context.Context, source string, err error) {
	select {
	case l.events <- event{kind: evFail, source: source, err: err}:
	case <-ctx.Done():
	}
}

// ChecksChanged tells the loop that active-check verdicts of a service
// changed ("" for any service). Safe for concurrent use; never blocks for
// long.
func (l *Loop) ChecksChanged(ctx context.Context, service string) {
	select {
	case l.events <- event{kind: evCheck, service: service}:
	case <-ctx.Done():
	}
}

// Run owns the state until ctx is done.
func (l *Loop) Run(ctx context.Context) error {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	// retention fires when the first retained host reaches max_retention,
	// so it goes then even if no event comes.
	retention := time.NewTimer(time.Hour)
	retention.Stop()
	defer retention.Stop()
	var retentionAt time.Time // when retention is armed for; zero: stopped
	var firstDirty time.Time
	armed := false
	dirtied := func() {
		now := l.now()
		if !armed {
			firstDirty = now
			armed = true
		}
		wait := l.opts.Quiet
		if hold := firstDirty.Add(l.opts.MaxHold).Sub(now); hold < wait {
			wait = max(hold, 0)
		}
		timer.Reset(wait)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev := <-l.events:
			if l.handle(ev) {
				dirtied()
			}
			continue // events change no retained host
		case <-timer.C:
			armed = false
			l.flush()
		case <-retention.C:
			retentionAt = time.Time{}
			if l.expireRetained() {
				dirtied()
			}
		}
		// Re-arm the retention timer for the earliest retained host still
		// served: a flush changes them, and an expiry dirties services.
		if l.opts.MaxRetention <= 0 || len(l.retained) == 0 && retentionAt.IsZero() {
			continue
		}
		if next := l.nextExpiry(); !next.Equal(retentionAt) {
			retention.Stop()
			retentionAt = next
			if !next.IsZero() {
				retention.Reset(max(next.Sub(l.now()), 0))
			}
		}
	}
}

// nextExpiry is when the next retained host still served reaches
// max_retention; zero when there is none (or no bound). A host of a dirty
// service already past it is left out: the coming flush drops it.
func (l *Loop) nextExpiry() time.Time {
	var next time.Time
	now := l.now()
	for name, ret := range l.retained {
		maxRet := l.maxRetention(name)
		if maxRet <= 0 {
			continue
		}
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
	now := l.now()
	found := false
	for name, ret := range l.retained {
		maxRet := l.maxRetention(name)
		if maxRet <= 0 {
			continue
		}
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

// handle applies one event to the state and reports whether anything became
// dirty.
func (l *Loop) handle(ev event) bool {
	switch ev.kind {
	case evPublish:
		return l.applyUpdate(ev.update)
	case evPolicy:
		return l.applyPolicy(ev.policy)
	case evFail:
		l.m.sourceErrors.WithLabelValues(ev.source).Inc()
		l.log.Warn("source failed to refresh; serving its last good state", "source", ev.source, "error", ev.err)
		l.mu.Lock()
		st := l.sourceStatus(ev.source)
		st.LastError = ev.err.Error()
		st.LastErrorTime = l.now()
		st.Stale = true
		l.mu.Unlock()
		return false
	case evCheck:
		if ev.service == "" {
			for s := range l.published {
				l.dirty[s] = true
			}
			for s := range l.claims {
				l.dirty[s] = true
			}
			return true
		}
		l.dirty[ev.service] = true
		return true
	}
	return false
}

func (l *Loop) sourceStatus(name string) *SourceStatus {
	st, ok := l.status[name]
	if !ok {
		st = &SourceStatus{Name: name}
		l.status[name] = st
	}
	return st
}

func (l *Loop) applyUpdate(u sources.Update) bool {
	src := u.Source
	next := make(map[string]sources.Service, len(u.Services))
	for _, s := range u.Services {
		if _, dup := next[s.Name]; dup {
			l.log.Warn("source published a service twice; the first is kept", "source", src, "service", s.Name)
			continue
		}
		next[s.Name] = s
	}
	prev := l.bySource[src]
	l.bySource[src] = next
	dirty := false
	for name, s := range next {
		old, had := prev[name]
		if !had {
			l.claims[name] = append(l.claims[name], src)
			dirty = l.dirtySubsetOwner(name) || dirty
		}
		if l.owner(name) == src && (!had || !reflect.DeepEqual(old, s)) {
			l.dirty[name] = true
			dirty = true
		}
	}
	for name := range prev {
		if _, still := next[name]; still {
			continue
		}
		wasOwner := l.owner(name) == src
		l.claims[name] = removeString(l.claims[name], src)
		if len(l.claims[name]) == 0 {
			delete(l.claims, name)
			dirty = l.dirtySubsetOwner(name) || dirty
		}
		if wasOwner {
			l.dirty[name] = true
			dirty = true
		}
	}
	l.noteSync(src, gotServices, func(st *SourceStatus) {
		st.Services = len(next)
		l.refreshConflictsLocked()
	})

	if !l.ready && l.allSynced() {
		return true // the first flush after every source synced marks ready
	}
	return dirty
}

func (l *Loop) owner(service string) string {
	if c := l.claims[service]; len(c) > 0 {
		return c[0]
	}
	return ""
}

func (l *Loop) refreshConflictsLocked() {
	l.conflicts = map[string][]string{}
	n := 0
	for svc, c := range l.claims {
		if len(c) > 1 {
			l.conflicts[svc] = append([]string(nil), c...)
			n++
		}
	}
	l.m.conflicts.Set(float64(n))
	for svc, c := range l.conflicts {
		l.log.Warn("service claimed by more than one source; the first owner keeps it", "service", svc, "owner", c[0], "also_claimed_by", c[1:])
	}
}

// syncKinds is what a source has published: services, a policy, or both.
type syncKinds uint8

const (
	gotServices syncKinds = 1 << iota
	gotPolicy
)

// noteSync records that src published kind: it is synced once it has
// published what it must (both kinds for a source in
// Options.ServicesAndPolicy, either otherwise), and its status shows the
// sync; update sets the kind's own fields of the status, under l.mu.
func (l *Loop) noteSync(src string, kind syncKinds, update func(*SourceStatus)) {
	l.gotKinds[src] |= kind
	if !l.synced[src] && (l.gotKinds[src] == gotServices|gotPolicy || !contains(l.opts.ServicesAndPolicy, src)) {
		l.synced[src] = true
	}
	l.m.sourceSyncs.WithLabelValues(src).Inc()
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.sourceStatus(src)
	st.Synced = l.synced[src]
	st.LastSync = l.now()
	st.Stale = false
	update(st)
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func (l *Loop) allSynced() bool {
	for _, s := range l.opts.Sources {
		if !l.synced[s] {
			return false
		}
	}
	return true
}

// flush rebuilds the dirty services and publishes what changed.
func (l *Loop) flush() {
	if !l.allSynced() {
		return // keep the dirty set; nothing is served before every source synced
	}
	start := l.now()
	names := make([]string, 0, len(l.dirty))
	for n := range l.dirty {
		names = append(names, n)
	}
	sort.Strings(names)

	// Merge each dirty service once (merge moves retained hosts along),
	// then the services whose failover names one whose input changed:
	// their assignments carry its endpoints.
	merged := make(map[string]mergedService, len(names))
	for _, name := range names {
		svc, keep := l.merge(name)
		merged[name] = mergedService{svc, keep}
	}
	names = l.addFailoverDependents(names, merged)

	// Who names whom first: a service's held subsets (effectivePolicy)
	// follow the policies of the services that name it, also when both
	// change in this flush. A service going away frees the subsets it
	// held, and those naming it see it gone (their diagnostics).
	var more []string
	for _, name := range names {
		if merged[name].keep {
			pol, _ := l.policyFor(name)
			l.setDeps(name, pol)
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
	if len(more) > 0 {
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
	}
	l.effective = make(map[string]effective)
	defer func() { l.effective = nil }()

	var changed []translate.Resources
	var removed []string
	inputs := map[string]sources.Service{}
	inputOpts := map[string]translate.Options{}
	inputHeld := map[string][]translate.Diagnostic{}
	for _, name := range names {
		svc, keep := merged[name].svc, merged[name].keep
		if !keep {
			if _, was := l.published[name]; was {
				removed = append(removed, name)
			}
			delete(l.refused, name)
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
		if old, was := l.published[name]; was && !l.refused[name] && !l.retranslate[name] && reflect.DeepEqual(old, svc) && reflect.DeepEqual(l.pubOpts[name], opts) && reflect.DeepEqual(l.held[name], held) {
			continue
		}
		r := opts.ServiceWithin(svc, l.opts.Limits)
		r.Diagnostics = append(r.Diagnostics, held...)
		l.dropCollidingSubsets(name, &r)
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
			continue
		}
		if err := r.Validate(); err != nil {
			l.m.invalid.Inc()
			l.refused[name] = true
			l.log.Error("generated resource failed validation; serving the last valid one", "service", name, "error", err)
			continue
		}
		delete(l.refused, name)
		changed = append(changed, r.Resources)
		inputs[name] = svc
		inputOpts[name] = opts
		inputHeld[name] = held
	}
	if len(changed) > 0 || len(removed) > 0 {
		if err := l.pub.PublishServices(changed, removed); err != nil {
			l.log.Error("publishing to the xDS cache failed; will retry", "error", err)
			l.m.flushErrors.Inc()
			return // dirty set kept; the next event retries
		}
	}
	for n, s := range inputs {
		l.published[n] = s
		l.pubOpts[n] = inputOpts[n]
		if h := inputHeld[n]; len(h) > 0 {
			l.held[n] = h
		} else {
			delete(l.held, n)
		}
	}
	for _, n := range removed {
		delete(l.published, n)
		delete(l.pubOpts, n)
		delete(l.held, n)
		delete(l.retained, n)
	}
	// Hosts dropped and no longer served are forgotten.
	for _, n := range names {
		l.pruneDropped(n)
	}
	clear(l.dirty)
	clear(l.retranslate)
	l.updateChecks()
	l.m.flushes.Inc()
	l.m.flushSeconds.Observe(l.now().Sub(start).Seconds())
	l.m.services.Set(float64(len(l.published)))
	l.m.refusedServices.Set(float64(len(l.refused)))
	if !l.ready {
		l.ready = true
		l.pub.MarkReady()
		l.mu.Lock()
		l.readyFlag = true
		l.mu.Unlock()
		l.log.Info("every source synced; serving xDS", "services", len(l.published))
	}
	if len(changed) > 0 || len(removed) > 0 {
		l.log.Debug("published", "changed", len(changed), "removed", len(removed))
	}
}

func (l *Loop) setDiags(service string, diags []translate.Diagnostic) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(diags) > 0 {
		l.diags[service] = diags
	} else {
		delete(l.diags, service)
	}
}

// merge computes the service to publish from its owner's endpoints, active
// health checks and retained hosts (the discovery × health matrix). keep is
// false when the service is to be removed.
func (l *Loop) merge(name string) (svc sources.Service, keep bool) {
	owner := l.owner(name)
	if owner == "" {
		l.setHostInfo(name, nil)
		return sources.Service{}, false
	}
	src := l.bySource[owner][name]
	now := l.now()
	out := sources.Service{Name: name, Endpoints: make([]sources.Endpoint, 0, len(src.Endpoints))}
	infos := make([]HostInfo, 0, len(src.Endpoints))
	// The owner's endpoints are in normal form (sources.Sink.Publish):
	// sorted, each host once.
	seen := make(map[sources.HostKey]bool, len(src.Endpoints))
	for _, e := range src.Endpoints {
		k := e.Key()
		seen[k] = true
		v := l.verdict(name, k)
		d := healthcheck.Decide(true, e.Health, v, 0, 0)
		pe := e
		pe.Health = d.Health
		out.Endpoints = append(out.Endpoints, pe)
		infos = append(infos, HostInfo{Host: k.String(), Discovered: true, Source: owner, SourceHealth: e.Health, Check: v, CheckState: l.detail(name, k), Published: d.Publish, Health: d.Health, Rule: d.Rule})
	}
	// Hosts published before and now absent: retained while their check passes.
	ret := l.retained[name]
	if ret == nil {
		ret = map[sources.HostKey]*retainedHost{}
	}
	if prev, ok := l.published[name]; ok {
		for _, e := range prev.Endpoints {
			k := e.Key()
			if seen[k] {
				continue
			}
			if _, already := ret[k]; !already {
				ret[k] = &retainedHost{endpoint: e, absentSince: now, source: owner}
			}
		}
	}
	mixed := false
	for k, r := range ret {
		if seen[k] {
			delete(ret, k)
			continue
		}
		v := l.verdict(name, k)
		d := healthcheck.Decide(false, sources.HealthUnknown, v, now.Sub(r.absentSince), l.maxRetention(name))
		if r.dropped != "" {
			// Dropped but not yet published without it: it stays dropped.
			d = healthcheck.Decision{Publish: false, Health: sources.HealthUnknown, Rule: r.dropped}
		}
		info := HostInfo{Host: k.String(), Discovered: false, Source: r.source, Check: v, CheckState: l.detail(name, k), Published: d.Publish, Health: d.Health, Rule: d.Rule, AbsentSince: r.absentSince}
		infos = append(infos, info)
		if !d.Publish {
			// Kept until the service is published without it (pruneDropped).
			r.dropped = d.Rule
			continue
		}
		pe := r.endpoint
		pe.Health = d.Health
		out.Endpoints = append(out.Endpoints, pe)
		mixed = true
	}
	if len(ret) > 0 {
		l.retained[name] = ret
	} else {
		delete(l.retained, name)
	}
	if mixed {
		// Retained hosts (from a map) go in among the discovered ones.
		sources.SortEndpoints(out.Endpoints)
	}
	l.setHostInfo(name, infos)
	return out, true
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

func (l *Loop) verdict(service string, k sources.HostKey) healthcheck.CheckVerdict {
	if l.opts.HealthChecks == nil {
		return healthcheck.NoCheck
	}
	return l.opts.HealthChecks.Verdict(service, k)
}

func (l *Loop) maxRetention(string) time.Duration { return l.opts.MaxRetention }

func (l *Loop) detail(service string, k sources.HostKey) any {
	if l.opts.HealthChecks == nil {
		return nil
	}
	return l.opts.HealthChecks.Detail(service, k)
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

func (l *Loop) setHostInfo(service string, infos []HostInfo) {
	sort.Slice(infos, func(i, j int) bool { return infos[i].Host < infos[j].Host })
	l.mu.Lock()
	defer l.mu.Unlock()
	if infos == nil {
		delete(l.hostInfo, service)
		return
	}
	l.hostInfo[service] = infos
}

func removeString(s []string, v string) []string {
	out := s[:0]
	for _, x := range s {
		if x != v {
			out = append(out, x)
		}
	}
	return out
}

// SourceStatus is what the loop knows of one source.
type SourceStatus struct {
	Name          string    `json:"name"`
	Synced        bool      `json:"synced"`
	LastSync      time.Time `json:"last_sync,omitzero"`
	LastError     string    `json:"last_error,omitempty"`
	LastErrorTime time.Time `json:"last_error_time,omitzero"`
	// Stale is true when the source's last refresh failed: its last good
	// services are still served.
	Stale bool `json:"stale"`
	// DataAge is how old the served data of the source is.
	DataAge  string `json:"data_age,omitempty"`
	Services int    `json:"services"`
	// Policies is how many entries (names and patterns) a policy source's
	// policy has.
	Policies int `json:"policies,omitempty"`
}

// HostInfo explains one host of a service: why it is published, or not.
type HostInfo struct {
	Host         string                   `json:"host"`
	Discovered   bool                     `json:"discovered"`
	Source       string                   `json:"source,omitempty"`
	SourceHealth sources.HealthStatus     `json:"source_health"`
	Check        healthcheck.CheckVerdict `json:"check"`
	CheckState   any                      `json:"check_state,omitempty"`
	Published    bool                     `json:"published"`
	Health       sources.HealthStatus     `json:"health"`
	Rule         healthcheck.Rule         `json:"rule"`
	AbsentSince  time.Time                `json:"absent_since,omitzero"`
}

// Ready reports whether every source synced and the first state was
// published. Safe for concurrent use.
func (l *Loop) Ready() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.readyFlag
}

// Sources returns the status of every source, sorted by name. Safe for
// concurrent use.
func (l *Loop) Sources() []SourceStatus {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]SourceStatus, 0, len(l.status))
	now := l.now()
	for _, st := range l.status {
		c := *st
		if c.Synced {
			c.DataAge = now.Sub(c.LastSync).Round(time.Millisecond).String()
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Hosts returns the explanation of every host of a service, or of all
// services when service is "". Safe for concurrent use.
func (l *Loop) Hosts(service string) map[string][]HostInfo {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string][]HostInfo{}
	for s, hs := range l.hostInfo {
		if service == "" || s == service {
			out[s] = append([]HostInfo(nil), hs...)
		}
	}
	return out
}

// Conflicts returns services claimed by more than one source: service →
// claimants, owner first. Safe for concurrent use.
func (l *Loop) Conflicts() map[string][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string][]string, len(l.conflicts))
	for k, v := range l.conflicts {
		out[k] = append([]string(nil), v...)
	}
	return out
}

// Diagnostics returns translation diagnostics per service. Safe for
// concurrent use.
func (l *Loop) Diagnostics() map[string][]translate.Diagnostic {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string][]translate.Diagnostic, len(l.diags))
	for k, v := range l.diags {
		out[k] = append([]translate.Diagnostic(nil), v...)
	}
	return out
}

// CheckClaims returns an error when two sources claim the same service
// name before running (from their configs or files).
func CheckClaims(srcs []sources.Source) error {
	owner := map[string]string{}
	var errs []error
	for _, s := range srcs {
		c, ok := s.(sources.StaticClaimer)
		if !ok {
			continue
		}
		names, err := c.ClaimedNames()
		if err != nil {
			errs = append(errs, fmt.Errorf("source %s: %w", s.Name(), err))
			continue
		}
		for _, n := range names {
			if o, taken := owner[n]; taken && o != s.Name() {
				errs = append(errs, fmt.Errorf("service %q is claimed by sources %q and %q: a service name is owned by one source", n, o, s.Name()))
				continue
			}
			owner[n] = s.Name()
		}
	}
	return errors.Join(errs...)
}
