package bridge

import (
	"context"
	"slices"
	"time"

	"github.com/xdsbridge/xdsbridge/sources"
	"github.com/xdsbridge/xdsbridge/translate"
)

// Reconfig is what a config reload changes in a running loop: the fields
// of Options that may change without a restart. Every field replaces the
// loop's.
type Reconfig struct {
	// Sources and Priority rank the claims again (claims.go);
	// ServicesAndPolicy is as Options'.
	Sources           []string
	Priority          map[string]int
	ServicesAndPolicy []string
	// Removed are the sources no longer configured, stopped before the
	// Reconfig is sent: their services are withdrawn (another source's
	// claim, if any, takes the name) and their policy dropped.
	Removed         []string
	Quiet, MaxHold  time.Duration
	MaxRetention    time.Duration
	DefaultLocality map[string]sources.Locality
	Limits          translate.Limits
	// ChecksChanged tells that the health checks' config changed: every
	// host's targets are set again.
	ChecksChanged bool
}

// Reconfigure applies a config reload in the Run goroutine and returns
// once it is applied (or ctx is done). Every service is rebuilt with the
// new options; what comes out identical is not pushed again (the cache
// compares resources by content).
func (l *Loop) Reconfigure(ctx context.Context, rc Reconfig) error {
	done := make(chan struct{})
	select {
	case l.events <- event{kind: evReconfig, reconfig: &rc, done: done}:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// applyReconfig applies rc to the state (Run goroutine) and reports
// whether anything became dirty.
func (l *Loop) applyReconfig(rc *Reconfig) bool {
	for _, src := range rc.Removed {
		if _, ok := l.bySource[src]; ok {
			l.applyUpdate(sources.Update{Source: src})
			delete(l.bySource, src)
			delete(l.lastList, src)
		}
		if _, ok := l.policies[src]; ok {
			l.applyPolicy(sources.PolicyUpdate{Source: src})
			delete(l.policies, src)
		}
		delete(l.synced, src)
		delete(l.gotKinds, src)
		l.snap.removeSource(src)
		l.m.claimsLost.DeleteLabelValues(src)
		l.m.sourceSyncs.DeleteLabelValues(src)
		l.m.sourceErrors.DeleteLabelValues(src)
		l.m.refusedNames.DeleteLabelValues(src)
		l.removed[src] = true
		l.log.Info("source removed by a config reload; its services are withdrawn", "source", src)
	}
	for _, src := range rc.Sources {
		delete(l.removed, src)
	}
	l.opts.Sources = slices.Clone(rc.Sources)
	l.opts.Priority = rc.Priority
	l.opts.ServicesAndPolicy = slices.Clone(rc.ServicesAndPolicy)
	l.opts.Quiet, l.opts.MaxHold = DebounceDefaults(max(rc.Quiet, 0), max(rc.MaxHold, 0))
	l.opts.MaxHold = max(l.opts.MaxHold, l.opts.Quiet)
	l.opts.MaxRetention = rc.MaxRetention
	l.opts.DefaultLocality = rc.DefaultLocality
	l.opts.Limits = rc.Limits.WithDefaults()
	l.snap.addSources(rc.Sources)
	l.rerankClaims()
	l.snap.mu.Lock()
	l.refreshConflictsLocked()
	l.snap.mu.Unlock()
	if rc.ChecksChanged {
		l.lastHosts = nil // set the checker's hosts again, under the new checks
	}
	// Every service is translated again under the new options; the cache
	// pushes only what comes out different.
	for _, n := range l.knownServices() {
		l.dirty[n] = true
	}
	l.forceTranslate = true
	return true
}

// removeSource forgets a source's status.
func (s *snapshots) removeSource(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.status, name)
}

// addSources gives every source a status, if it has none yet.
func (s *snapshots) addSources(names []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range names {
		s.sourceLocked(n)
	}
}
