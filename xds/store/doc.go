// Package store holds the resources the bridge serves over xDS: each
// resource version encoded once, deterministically, and versioned by a
// hash of that encoding (folded with the version of the resource it
// depends on, an assignment's cluster); per type a generation counter, a
// change log of the names each generation changed, the graves of deleted
// clusters while their deletion is in the log, the names sorted, and the
// aggregate version a sotw response carries; each resource's slot, a dense
// number it keeps across versions (slots.go); the wire index the request
// decoder reads, with each type's generation, and a copy of each name,
// version and slot (wireindex.go); and readiness (MarkReady).
//
// It knows nothing of clients. A server follows it through one Observer,
// registered with Observe, which the store tells of each commit (the type
// and the names it changed), of the end of each Apply (after the lock is
// released) and of MarkReady; other readers follow it
// through Subscribe (a coalescing wake-up) or Read (the content of one
// instant with the channel the next commit closes).
//
//	publisher ──Apply(changes)──▶ Store ─────────────────────────────┐
//	(bridge, PublishServices)     encode once, version, commit:      │
//	                              generation + changed names,        │
//	                              change log, graves, wire index     │
//	                                 │            │            │     │
//	        Observer.Committed(t, changed)  Subscribe     Read(...)  │ Wire()
//	        Observer.Readied()  (lock held)  (coalesced)  (one      │ (own
//	        Observer.Applied()  (released)        │        instant)  │  RWMutex)
//	                                 ▼            ▼                  ▼
//	        xds server: watches, ordering   fileout    REST   request decoder
//
// Thread-safety: a Store is safe for concurrent use. One mutex guards
// everything but the wire index (which has its own read-write lock, so
// that requests are decoded outside the store's lock). Apply and
// MarkReady hold the mutex while they call the observer: the observer
// runs with the store's lock held (but Applied, called after Apply
// released it), may read the store's types (Type and
// the fields of Type and Entry) but must not call a method of the store
// that locks (Apply, MarkReady, Read, Get, List, Snapshot, Subscribe,
// Lock). A reader that needs several reads to be of one instant (a
// server computing a response against one generation of every type)
// holds the lock with Lock and Unlock and reads the types meanwhile.
// Lock order: the store's lock before any lock of the observer's.
//
// Resources passed to Apply are owned by the store afterwards and must
// not be modified; the Entries and messages it hands out must not be
// modified either.
package store
