package xds

import "time"

// sentAssignments are the assignments sent on a stream since it last
// subscribed to them (routehold.go), by cluster name. A delta stream keeps
// the names only, as a shared nameSet (nameset.go): an Envoy sent every
// assignment holds the set its subscription is, not a map of its own. A
// sotw stream also keeps when each was sent, which make before break reads
// (mbb.go); grpc-go clients subscribe to few.
type sentAssignments struct {
	set *nameSet             // delta; nil: none yet
	at  map[string]time.Time // sotw
}

func (s *sentAssignments) has(n string) bool {
	if s.set != nil {
		return s.set.has(n)
	}
	_, ok := s.at[n]
	return ok
}

// sentAt is when n was sent, on a sotw stream.
func (s *sentAssignments) sentAt(n string) (time.Time, bool) {
	if s.set != nil {
		return time.Time{}, s.set.has(n)
	}
	t, ok := s.at[n]
	return t, ok
}

func (s *sentAssignments) add(delta bool, names []string, now time.Time) {
	if delta {
		if s.set == nil {
			s.set = emptyNames
		}
		s.set = s.set.derive(names, nil)
		return
	}
	if s.at == nil {
		s.at = map[string]time.Time{}
	}
	for _, n := range names {
		s.at[n] = now
	}
}

func (s *sentAssignments) remove(names []string) {
	if s.set != nil {
		s.set = s.set.derive(nil, names)
		return
	}
	for _, n := range names {
		delete(s.at, n)
	}
}

// keep forgets the names not in sub (a subscription's names). A delta
// stream sent every assignment it subscribes to shares sub's set, and
// nothing is looked at.
func (s *sentAssignments) keep(sub map[string]struct{}, subSet *nameSet) {
	if s.set != nil {
		if s.set == subSet {
			return
		}
		var gone []string
		for n := range s.set.m {
			if _, ok := sub[n]; !ok {
				gone = append(gone, n)
			}
		}
		s.remove(gone)
		return
	}
	for n := range s.at {
		if _, ok := sub[n]; !ok {
			delete(s.at, n)
		}
	}
}
