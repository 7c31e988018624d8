package bridge

// Ownership: which source owns each service name. At start,
// sources.CheckClaims refuses two sources whose configs or files claim the
// same name; at run time the first claimant keeps it (Loop.claims), the
// conflict is shown, and ownership passes on when the owner drops it.
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
// name is owned by its first claimant, and passes to the next when the
// owner drops it) and what it publishes, and marks dirty the services whose
// owner's input changed. It reports whether anything became dirty.
func (l *Loop) applyUpdate(u sources.Update) bool {
	src := u.Source
	next := make(map[string]sources.Service, len(u.Services))
	refused := map[string]string{}
	for _, s := range u.Services {
		if err := sources.ValidateServiceName("name", s.Name); err != nil {
			refused[s.Name] = err.Error()
			continue
		}
		if _, dup := next[s.Name]; dup {
			l.log.Warn("source published a service twice; the first is kept", "source", src, "service", s.Name)
			continue
		}
		next[s.Name] = s
	}
	l.refuseNames(src, refused)
	prev, seen := l.bySource[src]
	// changed: what the source publishes differs from its last publish.
	changed := !seen || len(prev) != len(next)
	l.bySource[src] = next
	dirty := false
	for name, s := range next {
		old, had := prev[name]
		if !had {
			l.claims[name] = append(l.claims[name], src)
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
