package xds

import "sort"

// Subscribe returns a channel that receives a value after the cache's
// content changes (any type: a resource added, changed or removed) and
// when MarkReady is called. Notifications are coalesced: the channel holds
// at most one, and the cache never blocks on it, so a subscriber reads
// the current content (Snapshot) after each one rather than counting
// them. cancel stops the notifications; the channel is not closed.
//
// It is for outputs that follow the cache outside the xDS server (the
// filesystem output, package fileout).
func (c *Cache) Subscribe() (ch <-chan struct{}, cancel func()) {
	sub := make(chan struct{}, 1)
	c.mu.Lock()
	if c.subs == nil {
		c.subs = map[chan struct{}]struct{}{}
	}
	c.subs[sub] = struct{}{}
	c.mu.Unlock()
	return sub, func() {
		c.mu.Lock()
		delete(c.subs, sub)
		c.mu.Unlock()
	}
}

// notifySubs wakes every subscriber. c.mu is held.
func (c *Cache) notifySubs() {
	for sub := range c.subs {
		select {
		case sub <- struct{}{}:
		default: // one is pending already
		}
	}
}

// nameList is a list of resource names read by index.
type nameList interface {
	Len() int
	At(i int) string
}

// read calls fn, under the cache's lock, for each resource of typeURL that
// names lists (each resource of the type if wild), so that what fn sees
// is one instant's content; and returns the channel the next commit
// closes, for a reader that waits for a change to what it read. fn must
// not call the cache. A type not served has no resources.
func (c *Cache) read(typeURL string, names nameList, wild bool, fn func(*Entry)) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.commitWake == nil {
		c.commitWake = make(chan struct{})
	}
	ts := c.types[typeURL]
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
	return c.commitWake
}

// Snapshot returns the resources of each type URL given (sorted by name,
// as List) read at one instant: no Apply falls between the types, so a
// cluster and its assignment are seen together. A type not served has an
// empty list. The messages must not be modified.
func (c *Cache) Snapshot(typeURLs ...string) map[string][]ResourceInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string][]ResourceInfo, len(typeURLs))
	for _, u := range typeURLs {
		ts, ok := c.types[u]
		if !ok {
			out[u] = nil
			continue
		}
		list := make([]ResourceInfo, 0, len(ts.Resources))
		for _, e := range ts.Resources {
			list = append(list, ResourceInfo{Name: e.Name, Version: e.Version, Bytes: e.ByteSize, Msg: e.Msg})
		}
		sort.Slice(list, func(i, j int) bool { return list[i].Name < list[j].Name })
		out[u] = list
	}
	return out
}
