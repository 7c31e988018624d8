package xds

import "sync"

// subName is a name a delta request subscribes to: its hash, its length
// and its field's bytes.
type subName struct {
	h       uint64
	n, size int
}

// subNamesPool holds lists of subName for reuse, as repeatTables.
var subNamesPool = sync.Pool{New: func() any { return new([]subName) }}

// subscribeOnly applies a delta request that only subscribes (a stream's
// first request, a reconnecting Envoy's 5,000 names; subs, hashed in
// apply's pass) with no set of its own: a hash the set lacks found twice
// among them (repeated) shows a name repeated in the request. false
// (nothing applied) when there were repeats: deltaNames then counts each
// name once. extra: the bytes of the names subscribed already.
func (a *streamAcct) subscribeOnly(tn *typeNames, subs []subName) (dn, db, extra int, ok bool) {
	adds := make([]uint64, 0, len(subs))
	for _, s := range subs {
		if !tn.set.has(s.h) {
			adds = append(adds, s.h)
			db += s.n
		} else {
			extra += s.size
		}
	}
	if len(adds) == 0 {
		return 0, 0, extra, true
	}
	if repeated(adds) {
		return 0, 0, 0, false
	}
	tn.set = tn.set.deriveAdded(adds)
	tn.bytes += db
	return len(adds), db, extra, true
}
