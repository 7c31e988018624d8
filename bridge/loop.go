package bridge

import (
	"context"
	"log/slog"
	"slices"
	"sort"
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
	// Sources names every source that must sync before the bridge is ready,
	// in config order: of two sources publishing one service name, the one
	// listed first owns it, unless Priority ranks the other higher.
	Sources []string
	// Priority is each source's ownership priority (absent: 0): of two
	// sources publishing one service name, the higher owns it (ties: the
	// order of Sources).
	Priority map[string]int
	// ServicesAndPolicy names the sources (of Sources) that publish both
	// services and a policy (sources.PolicyPublisher): each counts as
	// synced only once it has published both, whichever comes first.
	// Every other source is synced by its first publish of either. Their
	// policies never take the leading edge of the debounce: the services
	// of the same flush follow them (PublishPolicy, then Publish).
	ServicesAndPolicy []string
	// Quiet is how long the loop waits after the last event, when an
	// event comes within Quiet of the last flush (otherwise it flushes at
	// once); MaxHold is the longest a dirty service waits while events
	// keep coming. Zero values take their defaults (DebounceDefaults:
	// 50ms, and 500ms or Quiet if longer); a MaxHold below Quiet is Quiet.
	Quiet   time.Duration
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
	// Egress, when set (with its defaults: translate.Egress.WithDefaults),
	// publishes the egress route table and listener along with the
	// services (egress.go).
	Egress *translate.Egress
}

// Checks is what the loop asks of active health checking. Implementations
// are safe for concurrent use.
type Checks interface {
	// Verdict is the active check's verdict for a host of a service.
	Verdict(service string, host sources.HostKey) healthcheck.Verdict
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
	evConfirm
	evDropped
	evReconfig
)

type event struct {
	kind    eventKind
	update  sources.Update
	policy  sources.PolicyUpdate
	source  string
	err     error
	service string            // evCheck: the service whose check verdicts changed ("" = all)
	at      time.Time         // evFail, evConfirm: when the source failed or confirmed
	dropped []sources.Dropped // evDropped
	// evReconfig: the new options, and closed once they are applied.
	reconfig *Reconfig
	done     chan struct{}
}

// Loop is the merge loop. Create it with New, run it with Run; sources reach
// it through its Sink methods (Publish, Fail), which are safe for concurrent
// use. Every other field is owned by the Run goroutine, except the snapshots
// the admin handlers read (snap, behind its own mutex).
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
	refused map[string]bool
	// failoverAdded is how many hosts each published service's failover
	// adds (translate.Result.FailoverEndpoints), failoverTotal their sum,
	// bounded by Limits.MaxFailoverEndpoints; failoverDenied are the
	// services whose failover the bound left out, with the room they had
	// then, translated again when there is more.
	failoverAdded  map[string]int
	failoverTotal  int
	failoverDenied map[string]int
	// blackHoles are the black holes of each published service's policy
	// by kind (translate.Result.BlackHoles).
	blackHoles map[string]map[string]int
	// refusedNames are, per source, the service names it publishes that
	// are refused (claims.go), each with why.
	refusedNames map[string]map[string]string
	// lastList is each source's last update's Services, which the delta
	// of its next update follows (sources.Delta).
	lastList map[string][]sources.Service
	// removed are the sources a reload removed (until one adds them
	// again): what their stopping instances still report is ignored.
	removed map[string]bool
	// retained are the hosts kept after they left discovery (merge.go).
	retained  map[string]map[sources.HostKey]retainedHost
	lastHosts []healthcheck.ServiceHosts
	ready     bool
	// forceTranslate: the next flush translates every dirty service, even
	// with its input and options unchanged (a reload changed what every
	// translation uses: the limits; or the last flush's publish failed).
	forceTranslate bool

	// egress is the egress table's state (egress.go).
	egress egressState

	// snap is what the admin handlers read (status.go).
	snap snapshots
}

var _ sources.Sink = (*Loop)(nil)

// Debounce defaults (the config's debounce.quiet and debounce.max).
const (
	DefaultDebounceQuiet = 50 * time.Millisecond
	DefaultDebounceMax   = 500 * time.Millisecond
)

// DebounceDefaults is the one rule for the debounce defaults, of the
// loop's options and of the config file: a quiet period of 0 is
// DefaultDebounceQuiet, and a max of 0 is DefaultDebounceMax, or the quiet
// period when that is longer. Other values are returned as they are.
func DebounceDefaults(quiet, maxHold time.Duration) (time.Duration, time.Duration) {
	if quiet == 0 {
		quiet = DefaultDebounceQuiet
	}
	if maxHold == 0 {
		// Never below an explicitly longer quiet period.
		maxHold = max(DefaultDebounceMax, quiet)
	}
	return quiet, maxHold
}

// New returns a loop publishing to pub. It starts nothing.
func New(opts Options, pub Publisher) *Loop {
	opts.Quiet, opts.MaxHold = DebounceDefaults(max(opts.Quiet, 0), max(opts.MaxHold, 0))
	opts.MaxHold = max(opts.MaxHold, opts.Quiet)
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
		lastList:     map[string][]sources.Service{},
		claims:       map[string][]string{},
		synced:       map[string]bool{},
		gotKinds:     map[string]syncKinds{},
		dirty:        map[string]bool{},
		published:    map[string]sources.Service{},
		pubOpts:      map[string]translate.Options{},
		held:         map[string][]translate.Diagnostic{},
		policies:     map[string]*policy.File{},
		failoverDeps: newDepIndex(),
		routeDeps:    newDepIndex(),
		refused:      map[string]bool{},
		retained:     map[string]map[sources.HostKey]retainedHost{},

		failoverAdded:  map[string]int{},
		failoverDenied: map[string]int{},
		refusedNames:   map[string]map[string]string{},
		removed:        map[string]bool{},
		blackHoles:     map[string]map[string]int{},
		egress:         egressState{services: map[string]translate.EgressService{}},
	}
	l.snap.init(opts.Sources)
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
	case l.events <- event{kind: evFail, source: source, err: err, at: l.now()}:
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
	var lastFlush time.Time // when the last flush began; zero: none yet
	armed := false
	flush := func() {
		armed = false
		lastFlush = l.now()
		l.flush()
	}
	// dirtied schedules the flush of what an event or an expiry made
	// dirty, and reports whether it flushed at once. At the leading edge
	// (no flush pending, and none within the quiet period before) it
	// flushes at once, with the events already queued: an isolated change
	// is published without waiting. Otherwise it holds off: the flush
	// waits for the quiet period after the last event, bounded by the max
	// hold since the first, so changes that follow a flush closely go
	// together, and a steady stream publishes at least once per max hold.
	// holdOff skips the leading edge: the event is known to be half of a
	// pair whose other half follows.
	dirtied := func(holdOff bool) bool {
		now := l.now()
		if !holdOff && !armed && (lastFlush.IsZero() || now.Sub(lastFlush) >= l.opts.Quiet) {
			if !l.handleQueued() {
				flush()
				return true
			}
			// A queued event holds off: arm instead.
		}
		if !armed {
			firstDirty = now
			armed = true
		}
		wait := l.opts.Quiet
		if hold := firstDirty.Add(l.opts.MaxHold).Sub(now); hold < wait {
			wait = max(hold, 0)
		}
		timer.Reset(wait)
		return false
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev := <-l.events:
			// A source that publishes services and a policy hands one
			// flush of its state over as PublishPolicy then Publish
			// (the Consul source: config entries, then the catalog).
			// The policy holds off rather than taking the leading edge,
			// so the services that follow it go out with it: a
			// blue/green switch (hosts and default subset) is not
			// published half-done (rv4).
			if !l.handle(ev) || !dirtied(l.holdsOff(ev)) {
				continue // nothing flushed: events change no retained host
			}
		case <-timer.C:
			flush()
		case <-retention.C:
			retentionAt = time.Time{}
			if l.expireRetained() {
				dirtied(false)
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

// handleQueued applies the events already queued, without waiting for
// more, and reports whether one of them holds off (holdsOff).
func (l *Loop) handleQueued() (holdOff bool) {
	for range cap(l.events) {
		select {
		case ev := <-l.events:
			l.handle(ev)
			holdOff = holdOff || l.holdsOff(ev)
		default:
			return holdOff
		}
	}
	return holdOff
}

// holdsOff reports whether an event must not be flushed at the leading
// edge: the policy of a source that publishes services too, whose services
// of the same flush follow it (see Run).
func (l *Loop) holdsOff(ev event) bool {
	return ev.kind == evPolicy && slices.Contains(l.opts.ServicesAndPolicy, ev.source)
}

// handle applies one event to the state and reports whether anything became
// dirty.
func (l *Loop) handle(ev event) bool {
	if ev.kind != evReconfig && ev.kind != evCheck && l.removed[ev.source] {
		return false // a late report of a source a reload removed
	}
	switch ev.kind {
	case evPublish:
		return l.applyUpdate(ev.update)
	case evPolicy:
		return l.applyPolicy(ev.policy)
	case evReconfig:
		defer close(ev.done)
		return l.applyReconfig(ev.reconfig)
	case evFail:
		l.m.sourceErrors.WithLabelValues(ev.source).Inc()
		l.log.Warn("source failed to refresh; serving its last good state", "source", ev.source, "error", ev.err)
		l.snap.sourceFailed(ev.source, ev.err, ev.at)
		return false
	case evConfirm:
		l.snap.sourceConfirmed(ev.source, ev.at)
		return false
	case evDropped:
		l.snap.sourceDropped(ev.source, ev.dropped)
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

// syncKinds is what a source has published: services, a policy, or both.
type syncKinds uint8

const (
	gotServices syncKinds = 1 << iota
	gotPolicy
)

// noteSync records that src published kind: it is synced once it has
// published what it must (both kinds for a source in
// Options.ServicesAndPolicy, either otherwise), and its status shows the
// sync; update sets the kind's own fields of the status, under the
// snapshots' lock.
func (l *Loop) noteSync(src string, kind syncKinds, confirmed bool, update func(*SourceStatus)) {
	l.gotKinds[src] |= kind
	if !l.synced[src] && (l.gotKinds[src] == gotServices|gotPolicy || !slices.Contains(l.opts.ServicesAndPolicy, src)) {
		l.synced[src] = true
	}
	l.m.sourceSyncs.WithLabelValues(src).Inc()
	l.snap.sourceSynced(src, l.synced[src], l.now(), confirmed, update)
}

func (l *Loop) allSynced() bool {
	for _, s := range l.opts.Sources {
		if !l.synced[s] {
			return false
		}
	}
	return true
}

// flush rebuilds the dirty services and publishes what changed: merge
// (merge.go), follow the services that depend on them (policy.go), then
// translate and publish (publish.go).
func (l *Loop) flush() {
	if !l.ready && !l.allSynced() {
		// Keep the dirty set; nothing is served before every source
		// synced. Once served, a source added by a reload does not hold
		// back the others' changes: its services come when it syncs.
		return
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
	names = l.addNamingDependents(names, merged)

	t := l.translateAll(names, merged)
	if !l.publish(t) {
		// Dirty set kept; the next event retries. What this flush
		// translated counts against the failover room already
		// (setFailoverAdded): the retry translates it again even where
		// its input equals what is published.
		l.forceTranslate = true
		return
	}
	// Hosts dropped and no longer served are forgotten.
	for _, n := range names {
		l.pruneDropped(n)
	}
	clear(l.dirty)
	l.forceTranslate = false
	l.updateChecks()
	l.m.flushes.Inc()
	l.m.flushSeconds.Observe(l.now().Sub(start).Seconds())
	l.m.services.Set(float64(len(l.published)))
	l.m.refusedServices.Set(float64(len(l.refused)))
	if !l.ready {
		l.ready = true
		l.pub.MarkReady()
		l.snap.setReady()
		l.log.Info("every source synced; serving xDS", "services", len(l.published))
	}
	if len(t.changed) > 0 || len(t.removed) > 0 {
		l.log.Debug("published", "changed", len(t.changed), "removed", len(t.removed))
	}
}
