package bridge

import (
	"context"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/xdsbridge/xdsbridge/healthcheck"
	"github.com/xdsbridge/xdsbridge/sources"
	"github.com/xdsbridge/xdsbridge/translate"
)

// snapshots are what the admin handlers read (/debug/sources,
// /debug/hosts, conflicts, diagnostics, /readyz): copies the Run goroutine
// writes as its state changes, behind their own mutex.
type snapshots struct {
	mu        sync.Mutex
	status    map[string]*SourceStatus          // source → its status
	hostInfo  map[string][]HostInfo             // service → its hosts, as last merged
	conflicts map[string][]string               // service → claimants, owner first
	diags     map[string][]translate.Diagnostic // service → its translation diagnostics
	policies  map[string]string                 // service → where its policy is from ("source: key")
	ready     bool
}

func (s *snapshots) init(srcs []string) {
	*s = snapshots{
		status:    map[string]*SourceStatus{},
		hostInfo:  map[string][]HostInfo{},
		conflicts: map[string][]string{},
		diags:     map[string][]translate.Diagnostic{},
		policies:  map[string]string{},
	}
	for _, name := range srcs {
		s.status[name] = &SourceStatus{Name: name}
	}
}

// sourceLocked is the status of a source, created if new; s.mu is held.
func (s *snapshots) sourceLocked(name string) *SourceStatus {
	st, ok := s.status[name]
	if !ok {
		st = &SourceStatus{Name: name}
		s.status[name] = st
	}
	return st
}

// sourceFailed records a failed refresh of a source: its last good state
// is served, stale.
func (s *snapshots) sourceFailed(name string, err error, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.sourceLocked(name)
	st.LastError = err.Error()
	st.LastErrorTime = at
	st.Stale = true
}

// sourceConfirmed records that a source confirmed its state at at: a
// failure reported before then is over.
func (s *snapshots) sourceConfirmed(name string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.sourceLocked(name)
	if at.After(st.LastConfirmed) {
		st.LastConfirmed = at
	}
	if st.Stale && at.After(st.LastErrorTime) {
		st.Stale = false
	}
}

// sourceDropped replaces the instances a source drops: the first
// MaxDroppedListed (by service, instance) are kept, all are counted by
// reason.
func (s *snapshots) sourceDropped(name string, dropped []sources.Dropped) {
	sort.Slice(dropped, func(i, j int) bool {
		a, b := dropped[i], dropped[j]
		if a.Service != b.Service {
			return a.Service < b.Service
		}
		return a.Instance < b.Instance
	})
	var counts map[string]int
	if len(dropped) > 0 {
		counts = map[string]int{}
		for _, d := range dropped {
			counts[d.Reason]++
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.sourceLocked(name)
	st.Dropped = slices.Clip(dropped[:min(len(dropped), MaxDroppedListed)])
	st.DroppedCounts = counts
}

// MaxDroppedListed bounds the instances listed per source as dropped
// (SourceStatus.Dropped); all are counted (DroppedCounts and the metric
// xdsbridge_source_dropped_instances).
const MaxDroppedListed = 100

// sourceSynced records a publish of a source; update sets the fields of
// what it published, with s.mu held.
func (s *snapshots) sourceSynced(name string, synced bool, at time.Time, confirmed bool, update func(*SourceStatus)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.sourceLocked(name)
	st.Synced = synced
	st.LastSync = at
	// An incomplete publish (a part of the source failing) confirms
	// nothing: the stale mark and the confirmed age stay.
	if confirmed {
		if at.After(st.LastConfirmed) {
			st.LastConfirmed = at
		}
		st.Stale = false
	}
	update(st)
}

func (s *snapshots) setReady() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ready = true
}

func (l *Loop) setDiags(service string, diags []translate.Diagnostic) {
	l.snap.mu.Lock()
	defer l.snap.mu.Unlock()
	if len(diags) > 0 {
		l.snap.diags[service] = diags
	} else {
		delete(l.snap.diags, service)
	}
}

// setHostInfo sets the hosts of a service as merged (sorted by host); nil
// forgets the service.
func (l *Loop) setHostInfo(service string, infos []HostInfo) {
	l.snap.mu.Lock()
	defer l.snap.mu.Unlock()
	if infos == nil {
		delete(l.snap.hostInfo, service)
		return
	}
	l.snap.hostInfo[service] = infos
}

// SourceStatus is what the loop knows of one source.
type SourceStatus struct {
	Name          string    `json:"name"`
	Synced        bool      `json:"synced"`
	LastSync      time.Time `json:"last_sync,omitzero"`
	LastError     string    `json:"last_error,omitempty"`
	LastErrorTime time.Time `json:"last_error_time,omitzero"`
	// Stale is true when the source's last refresh failed (or its
	// registry stopped answering): its last good services are still
	// served.
	Stale bool `json:"stale"`
	// LastConfirmed is when the source last confirmed its state: a
	// successful read of its registry, whether anything changed or not.
	LastConfirmed time.Time `json:"last_confirmed,omitzero"`
	// ConfirmedAge is the time since LastConfirmed.
	ConfirmedAge string `json:"confirmed_age,omitempty"`
	// LastChanged is when what the source publishes last changed.
	LastChanged time.Time `json:"last_changed,omitzero"`
	// ChangedAge is the time since LastChanged.
	ChangedAge string `json:"changed_age,omitempty"`
	Services   int    `json:"services"`
	// Policies is how many entries (names and patterns) a policy source's
	// policy has.
	Policies int `json:"policies,omitempty"`
	// ClaimsLost is how many of the service names the source publishes
	// are owned by another source that ranks before it (priority, then
	// config order).
	ClaimsLost int `json:"claims_lost,omitempty"`
	// Dropped lists instances the source read and left out, with the
	// reason (at most MaxDroppedListed); DroppedCounts counts all of
	// them by reason.
	Dropped       []sources.Dropped `json:"dropped,omitempty"`
	DroppedCounts map[string]int    `json:"dropped_counts,omitempty"`
}

// noteChange records, in a publish's status update, whether what the
// source publishes changed.
func (st *SourceStatus) noteChange(changed bool) {
	if changed {
		st.LastChanged = st.LastSync
	}
}

// HostInfo explains one host of a service: why it is published, or not.
type HostInfo struct {
	Host         string               `json:"host"`
	Discovered   bool                 `json:"discovered"`
	Source       string               `json:"source,omitempty"`
	SourceHealth sources.HealthStatus `json:"source_health"`
	Check        healthcheck.Verdict  `json:"check"`
	CheckState   any                  `json:"check_state,omitempty"`
	Published    bool                 `json:"published"`
	Health       sources.HealthStatus `json:"health"`
	Rule         healthcheck.Rule     `json:"rule"`
	AbsentSince  time.Time            `json:"absent_since,omitzero"`
	// SourceChecks is the source's own explanation of SourceHealth (the
	// Consul checks that decided it). The loop leaves it empty; the
	// admin handlers fill it from sources that are
	// sources.HostExplainer.
	SourceChecks string `json:"source_checks,omitempty"`
}

// Ready reports whether every source synced and the first state was
// published. Safe for concurrent use.
func (l *Loop) Ready() bool {
	l.snap.mu.Lock()
	defer l.snap.mu.Unlock()
	return l.snap.ready
}

// Sources returns the status of every source, sorted by name. Safe for
// concurrent use.
func (l *Loop) Sources() []SourceStatus {
	l.snap.mu.Lock()
	defer l.snap.mu.Unlock()
	out := make([]SourceStatus, 0, len(l.snap.status))
	now := l.now()
	for _, st := range l.snap.status {
		c := *st
		c.Dropped = slices.Clone(st.Dropped)
		c.DroppedCounts = maps.Clone(st.DroppedCounts)
		if !c.LastConfirmed.IsZero() {
			c.ConfirmedAge = now.Sub(c.LastConfirmed).Round(time.Millisecond).String()
		}
		if !c.LastChanged.IsZero() {
			c.ChangedAge = now.Sub(c.LastChanged).Round(time.Millisecond).String()
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Hosts returns the explanation of every host of a service, or of all
// services when service is "". Safe for concurrent use.
func (l *Loop) Hosts(service string) map[string][]HostInfo {
	l.snap.mu.Lock()
	defer l.snap.mu.Unlock()
	out := map[string][]HostInfo{}
	for s, hs := range l.snap.hostInfo {
		if service == "" || s == service {
			out[s] = append([]HostInfo(nil), hs...)
		}
	}
	return out
}

// Conflicts returns services claimed by more than one source: service →
// claimants, owner first. Safe for concurrent use.
func (l *Loop) Conflicts() map[string][]string {
	l.snap.mu.Lock()
	defer l.snap.mu.Unlock()
	out := make(map[string][]string, len(l.snap.conflicts))
	for k, v := range l.snap.conflicts {
		out[k] = append([]string(nil), v...)
	}
	return out
}

// Policies returns, per published service that has a policy, where it is
// from: the policy source and the key (the service's name or the pattern
// that matched it), as "source: key". Safe for concurrent use.
func (l *Loop) Policies() map[string]string {
	l.snap.mu.Lock()
	defer l.snap.mu.Unlock()
	out := make(map[string]string, len(l.snap.policies))
	for k, v := range l.snap.policies {
		out[k] = v
	}
	return out
}

// setPolicyFrom records where a published service's policy is from ("":
// it has none, or is not published).
func (s *snapshots) setPolicyFrom(service, from string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if from == "" {
		delete(s.policies, service)
	} else {
		s.policies[service] = from
	}
}

// Diagnostics returns translation diagnostics per service. Safe for
// concurrent use.
func (l *Loop) Diagnostics() map[string][]translate.Diagnostic {
	l.snap.mu.Lock()
	defer l.snap.mu.Unlock()
	out := make(map[string][]translate.Diagnostic, len(l.snap.diags))
	for k, v := range l.snap.diags {
		out[k] = append([]translate.Diagnostic(nil), v...)
	}
	return out
}

// Confirm implements sources.Confirmer.
func (l *Loop) Confirm(ctx context.Context, source string, at time.Time) {
	select {
	case l.events <- event{kind: evConfirm, source: source, at: at}:
	case <-ctx.Done():
	}
}

// ReportDropped implements sources.DropReporter.
func (l *Loop) ReportDropped(ctx context.Context, source string, dropped []sources.Dropped) {
	select {
	case l.events <- event{kind: evDropped, source: source, dropped: dropped}:
	case <-ctx.Done():
	}
}
