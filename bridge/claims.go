package bridge

// Ownership: which source owns each service name. The claimants of a name
// are ranked by configuration, never by timing: the higher priority
// (Options.Priority) first, then the source listed first (Options.Sources).
// The first-ranked claimant owns the name (Loop.claims); a claimant that
// ranks above the owner takes the name over when it publishes it, and
// ownership passes to the next when the owner drops it. The losing claims
// are shown (conflicts, SourceStatus.ClaimsLost, a metric). At start,
// sources.StaticConflicts lists the claims known before running.
//
// A name sources.ValidateServiceName refuses is never claimed nor merged,
// whatever the source: above all one holding the separator of the names
// the bridge derives (a subset's cluster "<service>/<subset>"), which
// would otherwise take over that cluster and its traffic. Each is a
// diagnostic under its name and counted by source.

import (
	"fmt"
	"maps"
	"reflect"
	"slices"

	"github.com/xdsbridge/xdsbridge/sources"
	"github.com/xdsbridge/xdsbridge/translate"
)

// applyUpdate records a source's services: what it claims (a service
// name is owned by its best-ranked claimant, see claimBefore) and what it
// publishes, and marks dirty the services whose
// owner's input changed. It reports whether anything became dirty. An
// update whose delta follows the source's last update (sources.Delta)
// costs what it names (applyDelta); any other is compared service by
// service.
func (l *Loop) applyUpdate(u sources.Update) bool {
	src := u.Source
	prev, seen := l.bySource[src]
	if seen && u.Delta.Follows(l.lastList[src]) && distinctNames(u.Delta) {
		return l.applyDelta(u, prev)
	}
	next := make(map[string]sources.Service, len(u.Services))
	refused := map[string]string{}
	// changed: what the source publishes differs from its last publish.
	changed := false
	dirty := false
	claimsChanged := false
	kept := 0 // names of prev published again
	for _, s := range u.Services {
		old, had := prev[s.Name]
		// A name the source published before was valid then: only new
		// names are checked.
		if !had {
			if err := sources.ValidateServiceName("name", s.Name); err != nil {
				refused[s.Name] = err.Error()
				continue
			}
		}
		if _, dup := next[s.Name]; dup {
			l.log.Warn("source published a service twice; the first is kept", "source", src, "service", s.Name)
			continue
		}
		next[s.Name] = s
		if had {
			kept++
		} else {
			l.claims[s.Name] = l.insertClaim(l.claims[s.Name], src)
			claimsChanged = true
		}
		if had && sameService(old, s) {
			continue
		}
		changed = true
		dirty = l.markOwned(src, s.Name) || dirty
	}
	l.refuseNames(src, refused)
	changed = changed || !seen || len(prev) != len(next)
	l.bySource[src] = next
	l.lastList[src] = u.Services
	// The names no longer published: the walk stops at the last of them
	// (none: no walk).
	missing := len(prev) - kept
	for name := range prev {
		if missing == 0 {
			break
		}
		if _, still := next[name]; still {
			continue
		}
		missing--
		dirty = l.dropClaim(src, name) || dirty
		claimsChanged = true
	}
	return l.noteServices(src, len(next), changed, claimsChanged, !u.Incomplete) || dirty
}

// applyDelta records an update whose delta follows the source's last
// update: only the services it names are looked at, and cur, the
// source's services, is updated in place. What it records is what
// applyUpdate's comparison of every service would.
func (l *Loop) applyDelta(u sources.Update, cur map[string]sources.Service) bool {
	src := u.Source
	refused := maps.Clone(l.refusedNames[src])
	if refused == nil {
		refused = map[string]string{}
	}
	changed, dirty, claimsChanged := false, false, false
	for _, s := range u.Delta.Changed {
		old, had := cur[s.Name]
		if !had {
			if err := sources.ValidateServiceName("name", s.Name); err != nil {
				refused[s.Name] = err.Error()
				continue
			}
			l.claims[s.Name] = l.insertClaim(l.claims[s.Name], src)
			claimsChanged = true
		}
		cur[s.Name] = s
		if had && sameService(old, s) {
			continue
		}
		changed = true
		dirty = l.markOwned(src, s.Name) || dirty
	}
	for _, name := range u.Delta.Removed {
		delete(refused, name)
		if _, had := cur[name]; !had {
			continue
		}
		delete(cur, name)
		changed, claimsChanged = true, true
		dirty = l.dropClaim(src, name) || dirty
	}
	l.refuseNames(src, refused)
	l.lastList[src] = u.Services
	return l.noteServices(src, len(cur), changed, claimsChanged, !u.Incomplete) || dirty
}

// markOwned marks name dirty if src owns it (its input changed), and
// reports whether it did.
func (l *Loop) markOwned(src, name string) bool {
	if l.owner(name) != src {
		return false
	}
	l.dirty[name] = true
	return true
}

// distinctNames reports whether a delta names each service once: in
// Changed once, and not in both Changed and Removed. Another is not
// applied as a delta.
func distinctNames(d *sources.Delta) bool {
	names := make(map[string]bool, len(d.Changed)+len(d.Removed))
	for _, s := range d.Changed {
		if names[s.Name] {
			return false
		}
		names[s.Name] = true
	}
	for _, n := range d.Removed {
		if names[n] {
			return false
		}
		names[n] = true
	}
	return true
}

// dropClaim withdraws src's claim of name, which it no longer publishes,
// and reports whether that made name dirty (src owned it).
func (l *Loop) dropClaim(src, name string) bool {
	wasOwner := l.owner(name) == src
	l.claims[name] = removeString(l.claims[name], src)
	if len(l.claims[name]) == 0 {
		delete(l.claims, name)
	}
	if wasOwner {
		l.dirty[name] = true
	}
	return wasOwner
}

// noteServices records that src published its services (n of them;
// changed: they differ from its last publish; claimsChanged: it claims
// other names) and reports whether a flush is due for the first ready
// state. The conflicts are listed again only when a claim changed.
func (l *Loop) noteServices(src string, n int, changed, claimsChanged, confirmed bool) bool {
	l.noteSync(src, gotServices, confirmed, func(st *SourceStatus) {
		st.Services = n
		st.noteChange(changed)
		if claimsChanged {
			l.refreshConflictsLocked()
		}
	})
	return !l.ready && l.allSynced() // the first flush after every source synced marks ready
}

// sameService reports whether a source's service is unchanged. Published
// slices are never modified (sources.Update), so the same Endpoints slice
// is the same service without reading it: a source that hands over its
// unchanged services' slices again (the Consul source) costs a pointer
// comparison per unchanged service.
func sameService(a, b sources.Service) bool {
	if a.Name == b.Name && len(a.Endpoints) == len(b.Endpoints) && len(a.Endpoints) > 0 && &a.Endpoints[0] == &b.Endpoints[0] {
		return true
	}
	return reflect.DeepEqual(a, b)
}

// refuseNames records the service names of src that are refused (name →
// why), with a diagnostic under each name, and logs those newly refused.
func (l *Loop) refuseNames(src string, refused map[string]string) {
	prev := l.refusedNames[src]
	for _, name := range slices.Sorted(maps.Keys(refused)) {
		why := refused[name]
		if _, had := prev[name]; !had {
			l.log.Warn("service name refused; the service is not published", "source", src, "service", name, "error", why)
		}
		l.setDiags(name, []translate.Diagnostic{{Service: name, Field: "name",
			Message: fmt.Sprintf("source %q: %s; not published", src, why)}})
	}
	for name := range prev {
		if _, still := refused[name]; !still && !l.nameRefusedElsewhere(src, name) {
			l.setDiags(name, nil)
		}
	}
	if len(refused) == 0 {
		delete(l.refusedNames, src)
	} else {
		l.refusedNames[src] = refused
	}
	l.m.refusedNames.WithLabelValues(src).Set(float64(len(refused)))
}

func (l *Loop) nameRefusedElsewhere(src, name string) bool {
	for s, names := range l.refusedNames {
		if _, ok := names[name]; ok && s != src {
			return true
		}
	}
	return false
}

func (l *Loop) owner(service string) string {
	if c := l.claims[service]; len(c) > 0 {
		return c[0]
	}
	return ""
}

// claimBefore reports whether source a ranks before source b for a name
// both claim (sources.ClaimBefore).
func (l *Loop) claimBefore(a, b string) bool {
	return sources.ClaimBefore(a, b, l.opts.Sources, l.opts.Priority)
}

// insertClaim adds src to a name's claimants at its rank (claimBefore).
func (l *Loop) insertClaim(claimants []string, src string) []string {
	i := 0
	for i < len(claimants) && l.claimBefore(claimants[i], src) {
		i++
	}
	return slices.Insert(claimants, i, src)
}

// rerankClaims orders every name's claimants again (after the ranking
// changed) and marks dirty the names whose owner changed. It reports
// whether any did.
func (l *Loop) rerankClaims() bool {
	dirty := false
	for name, c := range l.claims {
		before := c[0]
		sources.RankClaimants(c, l.opts.Sources, l.opts.Priority)
		if c[0] != before {
			l.dirty[name] = true
			dirty = true
		}
	}
	return dirty
}

// refreshConflictsLocked sets the conflicts snapshot (the services claimed
// by more than one source) and each source's lost claims from the claims,
// with the snapshots' lock held. A conflict is logged when it appears or
// its claimants change.
func (l *Loop) refreshConflictsLocked() {
	conflicts := map[string][]string{}
	lost := map[string]int{}
	for svc, c := range l.claims {
		if len(c) > 1 {
			conflicts[svc] = append([]string(nil), c...)
			for _, s := range c[1:] {
				lost[s]++
			}
		}
	}
	for svc, c := range conflicts {
		if !slices.Equal(l.snap.conflicts[svc], c) {
			l.log.Warn("service claimed by more than one source; the best-ranked one owns it (priority, then config order)", "service", svc, "owner", c[0], "also_claimed_by", c[1:])
		}
	}
	l.snap.conflicts = conflicts
	l.m.conflicts.Set(float64(len(conflicts)))
	for name, st := range l.snap.status {
		st.ClaimsLost = lost[name]
		l.m.claimsLost.WithLabelValues(name).Set(float64(lost[name]))
	}
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
