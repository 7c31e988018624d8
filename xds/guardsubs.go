package xds

import (
	"hash/maphash"
	"iter"
	"sync"

	"google.golang.org/protobuf/encoding/protowire"
)

// subName is a name a delta request subscribes to: its hash, its length
// and its field's bytes.
type subName struct {
	h       uint64
	n, size int
}

// subNamesPool holds lists of subName for reuse, as repeatTables. A list
// holds a request's first max_names_per_stream + 1 subscriptions
// (guard.subsHashed) at most: it never grows with a request's size past
// the limit, and a request of more (one that goes over the limit or
// repeats names) has them hashed again where they are applied.
var subNamesPool = sync.Pool{New: func() any { return new([]subName) }}

// addsPool holds subscribeOnly's lists of the hashes a request adds, for
// reuse: a reconnecting Envoy's first request of a type adds 5,000 (40
// kB), garbage once applied; made per request, a storm of 1,000 Envoys
// would make 80 MB of them. The set derived keeps none of the list
// (sharedSet.derive copies what it remembers of its arguments;
// TestDeriveAddedKeepsNoList). A list longer than the limit's
// (guard.subsHashed) is not kept.
var addsPool = sync.Pool{New: func() any { return new([]uint64) }}

// subList is a delta request's subscriptions: hashed in apply's first
// pass (hashed), all of them unless walk (there were more): then read
// again from the request (b), and hashed with seed.
type subList struct {
	hashed []subName
	walk   bool
	b      []byte
	seed   maphash.Seed
}

// all yields the subscriptions in the request's order.
func (l subList) all() iter.Seq[subName] {
	return func(yield func(subName) bool) {
		if !l.walk {
			for _, s := range l.hashed {
				if !yield(s) {
					return
				}
			}
			return
		}
		more := true
		fields(l.b, func(num protowire.Number, v []byte, size int) {
			if more && num == deltaSubscribe {
				more = yield(subName{maphash.Bytes(l.seed, v), len(v), size})
			}
		})
	}
}

// subscribeOnly applies a delta request that only subscribes (a stream's
// first request, a reconnecting Envoy's 5,000 names; subs, n of them,
// hashed in apply's pass) with no set of its own: a hash the set lacks
// found twice among them (repeated) shows a name repeated in the
// request. false
// (nothing applied) when there were repeats: deltaNames then counts each
// name once. extra: the bytes of the names subscribed already.
//
// A fleet takes the same steps (every Envoy subscribes to the same
// assignments in the same parts): the set remembers the derivation with
// these arguments (sharedSet.called), and a result that many names larger
// than the set shows each of them new and none repeated. The request is
// then applied without a lookup in the set: at 20,000 names its map no
// longer fits the processor's caches, and each lookup costs a cache miss.
func (a *streamAcct) subscribeOnly(tn *typeNames, subs subList, n int) (dn, db, extra int, ok bool) {
	ap := addsPool.Get().(*[]uint64)
	adds := (*ap)[:0]
	if cap(adds) < n {
		adds = make([]uint64, 0, n)
	}
	defer func() {
		if cap(adds) <= a.g.subsHashed {
			*ap = adds[:0]
			addsPool.Put(ap)
		}
	}()
	for s := range subs.all() {
		adds = append(adds, s.h)
		db += s.n
	}
	set := tn.set
	if c := set.called(set.callKey(adds, nil), adds, nil); c != nil && c.len() == set.len()+len(adds) {
		tn.set = c
		tn.bytes += db
		return len(adds), db, 0, true
	}
	// Keep the hashes the set lacks, in order (i never passes the
	// subscription read).
	i := 0
	db = 0
	for s := range subs.all() {
		if !set.has(s.h) {
			adds[i] = s.h
			i++
			db += s.n
		} else {
			extra += s.size
		}
	}
	adds = adds[:i]
	if len(adds) == 0 {
		return 0, 0, extra, true
	}
	if repeated(adds) {
		return 0, 0, 0, false
	}
	tn.set = set.deriveAdded(adds)
	tn.bytes += db
	return len(adds), db, extra, true
}
