// Package xds serves the bridge's resources over xDS: ADS in both delta and
// state-of-the-world (sotw) variants plus the per-type CDS, EDS, LDS and RDS
// services, on one gRPC listener, and REST-JSON polling. It is the only
// package that imports go-control-plane's server and cache packages, and
// of those only the documented interfaces: serverv3.NewServerAdvanced and
// its callbacks, the sotw.Server and delta.Server handler interfaces, the
// stream types and the REST server (unused).
//
// The data flow, from a publication to a client:
//
//	bridge loop ──PublishServices──▶ Cache: the store
//	                                  Apply: encode each version once,
//	                                  commit a generation, change log,
//	                                  per-type resources and sorted names
//	                                    │                    │
//	               offers each commit   │                    │ read (one lock,
//	               to the open watches  │                    │ next-commit channel)
//	               of its type          ▼                    ▼
//	  ┌──────────── watches (one per stream, type, request) ┐   REST polls,
//	  │  read the stream's client state, compute the        │   Subscribe
//	  │  response (deltaPass, sotwPass) and the state it    │   (outputs)
//	  │  installs; updateOrder: what a response holds back  │
//	  │  (order.go, routehold.go, mbb.go); split responses, │
//	  │  NACK isolation                                     │
//	  └──────────▲───────────────────────────┬──────────────┘
//	  watchDelta │ watchSotw                 │ deltaResponse, sotwResponse
//	  (request,  │ state held)               │ (response + next state),
//	             │                           ▼ channel per stream
//	  stream handlers: deltaserver.go, sotwserver.go, one goroutine per
//	  stream; per type the subscription and the client state (deltaHeld,
//	  sotwHeld), installed when a response is sent
//	             ▲                           │
//	  Server: guard (limits), authorization, keepalive ◀──▶ Envoy, grpc-go
//
// What a client holds of a type is a Go value owned by its stream's
// handler: deltaHeld for a delta stream (a generation, the rest of a split
// response, the responses in flight by nonce and what each carried, the
// plan of a NACK's halving, the resources rejected alone; delta.go),
// sotwHeld for a sotw stream (name → version, and per name what a NACK
// rolls back to, a rejection, a halving; sotw.go). The handler hands it to
// each watch (Cache.watchDelta, Cache.watchSotw); the cache computes the
// response and the state the response installs, and the handler installs
// that state when it sends the response. So the state goes with the
// stream, and the cache keeps nothing per client but what it follows for
// ordering and status (order.go). The rules the cache relies on in the
// handlers are stated in their doc comments (deltaserver.go,
// sotwserver.go) and tested in handlers_test.go.
//
// The Cache owns the resources and every watch; one mutex guards both, so
// a commit answers the watches it wakes before the next commit.
// updateOrder (updateorder.go) is the one order of types: the order of
// Apply's steps and publications, MarkReady's answers, and the hold rule
// of each type's responses.
//
// Cache and Server are safe for concurrent use; Resources passed to the
// cache are owned by it afterwards and must not be modified.
package xds
