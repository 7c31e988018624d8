package bridge

// Ownership: which source owns each service name. At start,
// sources.CheckClaims refuses two sources whose configs or files claim the
// same name; at run time the first claimant keeps it (Loop.claims), the
// conflict is shown, and ownership passes on when the owner drops it.

import (
	"reflect"

	"github.com/xdsbridge/xdsbridge/sources"
)

// applyUpdate records a source's services: what it claims (a service
// name is owned by its first claimant, and passes to the next when the
// owner drops it) and what it publishes, and marks dirty the services whose
// owner's input changed. It reports whether anything became dirty.
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
	prev, seen := l.bySource[src]
	// changed: what the source publishes differs from its last publish.
	changed := !seen || len(prev) != len(next)
	l.bySource[src] = next
	dirty := false
	for name, s := range next {
		old, had := prev[name]
		if !had {
			l.claims[name] = append(l.claims[name], src)
			dirty = l.dirtySubsetOwner(name) || dirty
		}
		same := had && reflect.DeepEqual(old, s)
		changed = changed || !same
		if l.owner(name) == src && !same {
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
		st.noteChange(changed)
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

// refreshConflictsLocked sets the conflicts snapshot (the services claimed
// by more than one source) from the claims, with the snapshots' lock held.
func (l *Loop) refreshConflictsLocked() {
	conflicts := map[string][]string{}
	for svc, c := range l.claims {
		if len(c) > 1 {
			conflicts[svc] = append([]string(nil), c...)
		}
	}
	l.snap.conflicts = conflicts
	l.m.conflicts.Set(float64(len(conflicts)))
	for svc, c := range conflicts {
		l.log.Warn("service claimed by more than one source; the first owner keeps it", "service", svc, "owner", c[0], "also_claimed_by", c[1:])
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
