// Package xds serves the bridge's resources over xDS: ADS in both delta and
// state-of-the-world (sotw) variants plus the per-type CDS, EDS, LDS and RDS
// services, on one gRPC listener, and REST-JSON polling. It is the only
// package that imports go-control-plane's server and cache packages, and
// of those only the documented interfaces: serverv3.NewServerAdvanced and
// its callbacks, the sotw.Server and delta.Server handler interfaces, the
// stream types and the REST server (unused).
//
// The package is the server; the resources are in the store (package
// xds/store), which never imports this package and never calls it by
// name: the Cache registers itself as the store's observer
// (commitObserver) and reaches the store through the Store interface
// (storeobserver.go), which REST and sync status read through too.
//
// The data flow, from a publication to a client:
//
//	publisher (bridge loop: PublishServices; Cache.Apply)
//	     │ Apply(changes)
//	     ▼
//	┌─ store (package xds/store; its own mutex) ────────────────────────────┐
//	│  encode each version once, version = hash of the encoding (folded     │
//	│  with its dependency's); commit: generation, changed names, change    │
//	│  log, graves, sorted names; the wire index (own RWMutex); readiness   │
//	└──┬───────────────────────────┬─────────────────┬──────────────┬───────┘
//	   │ Observer.Committed(t,     │ Read: one        │ Subscribe,   │ Wire()
//	   │ changed), Readied():      │ instant + the    │ Snapshot     │
//	   │ store's lock held         │ next commit's    │ (outputs:    │
//	   ▼                           ▼ channel          ▼ fileout)     ▼
//	┌─ server (package xds; Cache.mu, taken after the store's lock) ─┐  request
//	│ commitObserver → watches of the type (one per stream, type,    │  decoder
//	│ request): read the stream's client state, compute the response │  (decode.go)
//	│ (deltaPass, sotwPass) and the state it installs; updateOrder:  │
//	│ what a response holds back (order.go, routehold.go, mbb.go);   │  REST polls
//	│ split responses, NACK isolation; sync status                   │  (rest.go)
//	└──────────▲───────────────────────────┬─────────────────────────┘
//	 watchDelta│watchSotw                  │ deltaResponse, sotwResponse
//	 (request, │state held)                │ (response + next state),
//	           │                           ▼ channel per stream
//	 stream handlers: deltaserver.go, sotwserver.go (a stream's requests
//	 handled as read, its queued responses sent on a wake-up, under its
//	 lock: streamloop.go); per type the subscription and the client
//	 state (deltaHeld, sotwHeld), installed when a response is sent
//	           ▲                           │
//	 Server: guard (limits), authorization, keepalive ◀──▶ Envoy, grpc-go
//
// What a client holds of a type is a Go value owned by its stream's
// handler, under the stream's lock: deltaHeld for a delta stream
// (a generation, the rest of a split response, the responses in flight by
// nonce and what each carried, the plan of a NACK's halving, the resources
// rejected alone; delta.go), sotwHeld for a sotw stream (name → version,
// and per name what a NACK rolls back to, a rejection, a halving;
// sotw.go). The handler hands it to each watch (Cache.newDeltaWatch, or
// Cache.rearmDelta for an ACK; Cache.watchSotw); the cache computes the
// response and the state the response installs, and the handler installs
// that state when it sends the response. So the state goes with the
// stream, and the cache keeps nothing per client but what it follows for
// ordering and status (order.go). The rules the cache relies on in the
// handlers are stated in their doc comments (deltaserver.go,
// sotwserver.go) and tested in handlers_test.go.
//
// Locks: the store's mutex guards the resources; Cache.mu guards the
// server's state (the watches, the streams' ordering state, counters).
// The store's lock comes first: a watch is computed against one instant
// of the store (Cache.lock takes both, after Cache.lane, the server's own
// queue for the store's lock, which commits do not take: a commit waits
// for at most the one server path holding the store's lock), and a commit
// reaches the watches through the observer with the store's lock held, so
// a commit answers the watches it wakes before the next commit. A
// stream's own lock (streamLoop.mu of a delta or sotw stream, under which
// its requests are handled and its responses sent) comes before all
// three; nothing that holds them waits for it (the cache puts a response
// on the stream's channel without blocking).
//
// Goroutines: each stream has two (streamloop.go). Its receive goroutine
// reads its requests and handles each under the stream's lock, sending
// the responses queued meanwhile; the handler's goroutine sends what is
// queued while no request is being handled, when the queue wakes it, and
// alone ends the stream: it marks the stream closed under the lock before
// it cancels the watches, after which the receive goroutine handles
// nothing. The cache puts responses from the goroutine of the commit or
// the request that answers a watch (and a delta stream's VHDS pump, from
// its own). A commit's delta responses are handed to their streams once
// the store's lock is released (commitObserver.Applied, handOff): the
// committing goroutine sends one itself, under the stream's lock if it
// is free, when the send cannot wait (gRPC has written out every
// response of the stream, which gives its whole write quota back, and the
// response is below the unwritten budget's threshold); else it wakes the
// handler's goroutine. What the client says is not trusted for it: an
// ACK can name a nonce it never read.
// updateOrder (updateorder.go) is the one order of types: the order of
// Apply's steps and publications, MarkReady's answers, and the hold rule
// of each type's responses.
//
// Cache and Server are safe for concurrent use; Resources passed to the
// store are owned by it afterwards and must not be modified.
package xds
