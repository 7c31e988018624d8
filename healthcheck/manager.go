package healthcheck

import (
	"context"
	"sort"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/xdsbridge/xdsbridge/sources"
)

// ServiceHosts is the set of hosts of one service the merge loop publishes
// (discovered or retained), with the source that owns the service.
type ServiceHosts struct {
	Service string
	Source  string
	Hosts   []sources.HostKey
}

// Manager connects a Checker to the merge loop: it turns the loop's hosts
// into probe targets using the configured checks (per service, else per
// source), answers verdict look-ups, and tells the loop which services a
// verdict change affects. Safe for concurrent use.
type Manager struct {
	checker *Checker

	mu sync.Mutex
	// perService and perSource are replaced whole (SetConfig), never
	// modified.
	perService map[string]Config
	perSource  map[string]Config
	keys       map[string]map[sources.HostKey]TargetKey // service → host → target
	users      map[TargetKey]map[string]struct{}        // target → services using it

	// With a Remote (remote.go): every target (all), who checks each
	// (owner), and the verdicts of targets handed to the local checker
	// until its first verdict (carried). reroute asks Run to route again
	// after SetHosts.
	remote   Remote
	fallback Fallback
	reroute  chan struct{}
	all      []Target
	owner    map[TargetKey]owner
	carried  map[TargetKey]Verdict
}

// NewManager returns a manager for checker. perService checks take
// precedence over perSource ones; a service with neither is not checked.
// The maps must not be modified afterwards.
func NewManager(checker *Checker, perSource, perService map[string]Config) *Manager {
	return &Manager{
		checker:    checker,
		perService: perService,
		perSource:  perSource,
		keys:       map[string]map[sources.HostKey]TargetKey{},
		users:      map[TargetKey]map[string]struct{}{},
		owner:      map[TargetKey]owner{},
		carried:    map[TargetKey]Verdict{},
	}
}

// Enabled reports whether any check is configured.
func (m *Manager) Enabled() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.perService)+len(m.perSource) > 0
}

// SetConfig replaces the checks (a config reload); they apply at the next
// SetHosts. A host whose check changed has no verdict until its first
// probe under the new check: its source's health stands meanwhile
// (Decide). The maps must not be modified afterwards.
func (m *Manager) SetConfig(perSource, perService map[string]Config) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.perSource, m.perService = perSource, perService
}

func configFor(perService, perSource map[string]Config, service, source string) (Config, bool) {
	if c, ok := perService[service]; ok {
		return c, true
	}
	c, ok := perSource[source]
	return c, ok
}

// SetHosts replaces the probed hosts. The same address:port with the same
// check under several services is one target, probed once.
func (m *Manager) SetHosts(svcs []ServiceHosts) {
	m.mu.Lock()
	perService, perSource := m.perService, m.perSource
	m.mu.Unlock()
	keys := map[string]map[sources.HostKey]TargetKey{}
	users := map[TargetKey]map[string]struct{}{}
	var targets []Target
	for _, s := range svcs {
		cfg, ok := configFor(perService, perSource, s.Service, s.Source)
		if !ok {
			continue
		}
		hk := make(map[sources.HostKey]TargetKey, len(s.Hosts))
		for _, h := range s.Hosts {
			t := Target{Host: h, Check: cfg}
			k := t.Key()
			hk[h] = k
			if _, seen := users[k]; !seen {
				users[k] = map[string]struct{}{}
				targets = append(targets, t)
			}
			users[k][s.Service] = struct{}{}
		}
		keys[s.Service] = hk
	}
	m.mu.Lock()
	m.keys, m.users = keys, users
	r := m.remote
	if r != nil {
		m.all = targets
	}
	m.mu.Unlock()
	if r != nil {
		// Run hands each target to the remote or the local checker.
		r.SetTargets(targets)
		select {
		case m.reroute <- struct{}{}:
		default:
		}
		return
	}
	_ = m.checker.SetTargets(targets) // invalid targets are skipped; configs were validated at start
}

func (m *Manager) key(service string, host sources.HostKey) (TargetKey, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k, ok := m.keys[service][host]
	return k, ok
}

// Verdict is the check verdict of a host of a service, for the merge. A
// host of a checked service that is not a target yet (just discovered) has
// no verdict yet: Unknown. It is the verdict last delivered on the
// checker's Transitions (Checker.Delivered), not the current one: Run
// reports every change of it, so what the merge publishes from it is
// always corrected by a later rebuild, even when a change is undone before
// it is reported (and so never is).
//
// With a Remote, it is the verdict of whoever checks the host: the one
// the Remote last delivered, or the local checker's; a host just handed
// over to the local checker keeps the verdict it had until the local
// checker has one.
func (m *Manager) Verdict(service string, host sources.HostKey) Verdict {
	m.mu.Lock()
	hk, checked := m.keys[service]
	k, ok := hk[host]
	if checked && ok && m.remote != nil {
		defer m.mu.Unlock()
		return m.verdictLocked(k, m.owner[k])
	}
	m.mu.Unlock()
	if !checked {
		return NoCheck
	}
	if !ok {
		return Unknown
	}
	return m.checker.Delivered(k)
}

// Detail is the checker's state of a host of a service, for /debug/hosts.
func (m *Manager) Detail(service string, host sources.HostKey) any {
	k, ok := m.key(service, host)
	if !ok {
		return nil
	}
	m.mu.Lock()
	o := m.owner[k]
	m.mu.Unlock()
	if o == ownedRemote {
		return RemoteDetail{r: m.remote, k: k}
	}
	st, ok := m.checker.State(k)
	if !ok {
		return nil
	}
	return st
}

// Run runs the checker and calls changed (which must not block for long)
// for every service a verdict change affects, until ctx is done.
func (m *Manager) Run(ctx context.Context, changed func(ctx context.Context, service string)) error {
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return m.checker.Run(ctx) })
	m.mu.Lock()
	r := m.remote
	m.mu.Unlock()
	if r != nil {
		g.Go(func() error { return r.Run(ctx) })
		g.Go(func() error { return m.runRemote(ctx, changed) })
	}
	g.Go(func() error {
		for {
			select {
			case <-ctx.Done():
				return nil
			case tr := <-m.checker.Transitions():
				for _, s := range m.servicesOf(tr.Key) {
					changed(ctx, s)
				}
			}
		}
	})
	return g.Wait()
}

func (m *Manager) servicesOf(k TargetKey) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]string, 0, len(m.users[k]))
	for s := range m.users[k] {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}
