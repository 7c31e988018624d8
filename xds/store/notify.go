package store

// Subscribe returns a channel that receives a value after the store's
// content changes (any type: a resource added, changed or removed) and
// when MarkReady is called. Notifications are coalesced: the channel holds
// at most one, and the store never blocks on it, so a subscriber reads
// the current content (Snapshot) after each one rather than counting
// them. cancel stops the notifications; the channel is not closed.
//
// It is for outputs that follow the store outside the xDS server (the
// filesystem output, package fileout).
func (s *Store) Subscribe() (ch <-chan struct{}, cancel func()) {
	sub := make(chan struct{}, 1)
	s.mu.Lock()
	if s.subs == nil {
		s.subs = map[chan struct{}]struct{}{}
	}
	s.subs[sub] = struct{}{}
	s.mu.Unlock()
	return sub, func() {
		s.mu.Lock()
		delete(s.subs, sub)
		s.mu.Unlock()
	}
}

// notifySubs wakes every subscriber. s.mu is held.
func (s *Store) notifySubs() {
	for sub := range s.subs {
		select {
		case sub <- struct{}{}:
		default: // one is pending already
		}
	}
}

// NameList is a list of resource names read by index.
type NameList interface {
	Len() int
	At(i int) string
}

// Read calls fn, under the store's lock, for each resource of typeURL that
// names lists (each resource of the type if wild), so that what fn sees
// is one instant's content; and returns the channel the next commit
// closes, for a reader that waits for a change to what it read (REST's
// held polls). fn must not call the store. A type not served has no resources.
func (s *Store) Read(typeURL string, names NameList, wild bool, fn func(*Entry)) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.commitWake == nil {
		s.commitWake = make(chan struct{})
	}
	ts := s.types[typeURL]
	switch {
	case ts == nil:
	case wild:
		for _, e := range ts.Resources {
			fn(e)
		}
	default:
		for i := range names.Len() {
			if e, ok := ts.Resources[names.At(i)]; ok {
				fn(e)
			}
		}
	}
	return s.commitWake
}

// Snapshot returns the resources of each type URL given (sorted by name,
// as List) read at one instant: no Apply falls between the types, so a
// cluster and its assignment are seen together. A type not served has an
// empty list. The messages must not be modified.
func (s *Store) Snapshot(typeURLs ...string) map[string][]ResourceInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string][]ResourceInfo, len(typeURLs))
	for _, u := range typeURLs {
		out[u] = s.list(u)
	}
	return out
}
