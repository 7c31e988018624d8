// Package xds serves the bridge's resources over xDS: ADS in both delta and
// state-of-the-world (sotw) variants plus the per-type CDS, EDS, LDS and RDS
// services, on one gRPC listener, and REST-JSON polling. It is the only
// package that imports go-control-plane's server and cache.
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
//	  │  client state: delta.go (compact, generation G),    │   Subscribe
//	  │  sotw.go (name → version); updateOrder: what a      │   (outputs)
//	  │  response holds back (order.go, routehold.go,       │
//	  │  mbb.go); split responses, NACK isolation           │
//	  └──────────────────────┬──────────────────────────────┘
//	                         │ responses (channel per stream)
//	                         ▼
//	  Server: guard (limits), authorization, keepalive ──▶ streams:
//	  delta (deltaserver.go), sotw (go-control-plane)      Envoy, grpc-go
//
// The Cache owns the resources and every watch; one mutex guards both, so
// a commit answers the watches it wakes before the next commit. A stream's
// per-type client state travels with the stream, in the returned-versions
// map the stream handler keeps and hands back with the next request
// (contract.go states what that relies on). updateOrder (updateorder.go)
// is the one order of types: the order of Apply's steps and publications,
// MarkReady's answers, and the hold rule of each type's responses.
//
// Cache and Server are safe for concurrent use; Resources passed to the
// cache are owned by it afterwards and must not be modified.
package xds
