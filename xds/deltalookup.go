package xds

import "github.com/xdsbridge/xdsbridge/xds/store"

// How a delta pass finds the resources of the names it looks at and
// tells whether a name is subscribed: values, so that a pass allocates
// nothing for them.

// minCursor is the number of sorted names from which their resources are
// found with a store.Cursor (Cache.minCursor): fewer, they are few among
// the type's and far apart, which a cursor finds in the type's map too,
// and the cursor would cost a sort of the type's names after a name came
// or went.
const minCursor = 32

// finder returns how to find the resources of count names, sorted: with a
// store.Cursor from c.minCursor names, else in the type's map. (Names out
// of order are found too, at the cost of a map lookup.)
func (c *Cache) finder(ts *typeState, count int) resourceFinder {
	if count < c.minCursor {
		return resourceFinder{ts: ts}
	}
	return resourceFinder{ts: ts, cursor: true, cur: ts.Cursor()}
}

// resourceFinder finds resources by name (Cache.finder): a value, not a
// closure, so that a pass allocates nothing for it.
type resourceFinder struct {
	ts     *typeState
	cursor bool // find with cur, else in the type's map
	cur    store.Cursor
}

func (f *resourceFinder) find(n string) (*store.Entry, bool) {
	if f.cursor {
		return f.cur.Find(n)
	}
	e, ok := f.ts.Resources[n]
	return e, ok
}

// subscriptionHas returns how the pass tells a name subscribed by name:
// a pass of sorted names, from c.minCursor of them and dense among the
// subscription's (walkWorth), walks the subscription's sorted names
// (nameCursor); other passes look names up in its map.
func (p *deltaPass) subscriptionHas() subscribedCheck {
	w := p.w
	if !p.wild && !p.full && w.sub == subscription(&w.dsub) && walkWorth(p.walk.len(), w.dsub.names.len(), p.c.minCursor) {
		return subscribedCheck{cursor: true, cur: *newNameCursor(w.dsub.names)}
	}
	return subscribedCheck{subscribed: p.subscribed}
}

// subscribedCheck tells a name subscribed by name (subscriptionHas): a
// value, not a closure, so that a pass allocates nothing for it.
type subscribedCheck struct {
	cursor     bool // walk cur, else look names up in subscribed
	cur        nameCursor
	subscribed map[string]struct{}
}

func (s *subscribedCheck) has(n string) bool {
	if s.cursor {
		return s.cur.has(n)
	}
	_, ok := s.subscribed[n]
	return ok
}
