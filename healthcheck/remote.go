package healthcheck

import (
	"context"
	"encoding/json"
)

// Remote is a checker whose probes run elsewhere: the bridge's HDS server
// (package hds), whose connected Envoys probe the targets they are
// assigned. Implementations are safe for concurrent use.
type Remote interface {
	// SetTargets replaces the targets it may check.
	SetTargets(ts []Target)
	// Unassigned returns the targets it cannot check now (no connected
	// checker runs their check).
	Unassigned() []Target
	// Assigned is signalled when Unassigned may have changed.
	Assigned() <-chan struct{}
	// Seed sets a target's verdict, and the verdict delivered, without a
	// transition (a target handed over keeps the verdict it had).
	Seed(k TargetKey, v Verdict)
	// Transitions delivers verdict changes while Run runs.
	Transitions() <-chan Transition
	// Delivered is the verdict of the last transition delivered for a
	// target (or seeded), as Checker.Delivered.
	Delivered(k TargetKey) Verdict
	// Detail is its state of a target, for /debug/hosts.
	Detail(k TargetKey) (any, bool)
	Run(ctx context.Context) error
}

// Fallback is what the Manager does with a target its Remote cannot
// check.
type Fallback int

const (
	// FallbackLocal: the local Checker probes it.
	FallbackLocal Fallback = iota
	// FallbackSource: it is not probed; its verdict is Unknown, so its
	// source's health stands (Decide).
	FallbackSource
)

// owner is who checks a target.
type owner int8

const (
	ownedLocal owner = iota + 1
	ownedRemote
	ownedNone // Remote cannot, and FallbackSource
)

// UseRemote sends the targets to r, and to the local checker only those r
// cannot check (by fb). Call it before SetHosts and Run.
//
// A target moving between the local checker and r keeps its verdict: r
// is seeded with it, and the local checker's Unknown (before its first
// verdict of a target it was just given) reads as the verdict the target
// had. The moves are made by Run, on r's Assigned signals and after each
// SetHosts.
func (m *Manager) UseRemote(r Remote, fb Fallback) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.remote, m.fallback = r, fb
	m.reroute = make(chan struct{}, 1)
}

// route decides who checks each target, hands the targets over with
// their verdicts, and returns the targets that changed hands (their
// services are merged again: /debug/hosts names the new checker, and a
// target moved to no one has lost its verdict). Only Run calls it.
func (m *Manager) route() []TargetKey {
	un := map[TargetKey]bool{}
	for _, t := range m.remote.Unassigned() {
		un[t.Key()] = true
	}
	m.mu.Lock()
	all := m.all
	next := make(map[TargetKey]owner, len(all))
	carried := make(map[TargetKey]Verdict)
	var local []Target
	seed := map[TargetKey]Verdict{}
	var moved []TargetKey
	for _, t := range all {
		k := t.Key()
		o := ownedRemote
		if un[k] {
			o = ownedNone
			if m.fallback == FallbackLocal {
				o = ownedLocal
			}
		}
		next[k] = o
		if o == ownedLocal {
			local = append(local, t)
		}
		prev, known := m.owner[k]
		v := Unknown
		if known {
			v = m.verdictLocked(k, prev)
		}
		switch {
		case known && prev != o && o == ownedRemote:
			seed[k] = v
		case known && prev != o && o == ownedLocal:
			carried[k] = v
		case known && prev == o && o == ownedLocal:
			if c, ok := m.carried[k]; ok {
				carried[k] = c
			}
		}
		if known && prev != o {
			moved = append(moved, k)
		}
	}
	m.owner, m.carried = next, carried
	for k, v := range seed {
		m.remote.Seed(k, v)
	}
	m.mu.Unlock()
	_ = m.checker.SetTargets(local) // invalid targets are skipped; configs were validated at start
	return moved
}

// verdictLocked is the verdict of target k checked by o. Called with m.mu
// held.
func (m *Manager) verdictLocked(k TargetKey, o owner) Verdict {
	switch o {
	case ownedRemote:
		return m.remote.Delivered(k)
	case ownedLocal:
		if v := m.checker.Delivered(k); v != Unknown {
			return v
		}
		return m.carried[k]
	}
	return Unknown
}

// runRemote runs the Remote and follows its transitions and assignments
// until ctx is done.
func (m *Manager) runRemote(ctx context.Context, changed func(ctx context.Context, service string)) error {
	r := m.remote
	reroute := func() {
		svcs := map[string]bool{}
		for _, k := range m.route() {
			for _, s := range m.servicesOf(k) {
				if !svcs[s] {
					svcs[s] = true
					changed(ctx, s)
				}
			}
		}
	}
	reroute()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-m.reroute:
			reroute()
		case <-r.Assigned():
			reroute()
		case tr := <-r.Transitions():
			m.mu.Lock()
			remote := m.owner[tr.Key] == ownedRemote
			m.mu.Unlock()
			if remote {
				for _, s := range m.servicesOf(tr.Key) {
					changed(ctx, s)
				}
			}
		}
	}
}

// RemoteDetail is Manager.Detail of a target its Remote checks: the
// Remote's state of the target read when it is shown (encoded or State
// called), not when the merge last ran, since the checkers' reports come
// and go without changing the verdict.
type RemoteDetail struct {
	r Remote
	k TargetKey
}

// State is the Remote's state of the target now (nil if it has none).
func (d RemoteDetail) State() any {
	st, ok := d.r.Detail(d.k)
	if !ok {
		return nil
	}
	return st
}

// MarshalJSON encodes State.
func (d RemoteDetail) MarshalJSON() ([]byte, error) { return json.Marshal(d.State()) }
