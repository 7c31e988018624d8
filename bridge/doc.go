// Package bridge is the merge loop: the one goroutine that owns the merged
// state of every source.
//
//	sources ──Publish/Fail (events)──▶ Loop.Run ──debounce──▶ merge with health checks
//	                                                         │
//	                                         translate (pure)▼
//	                                            Publisher (the xDS cache)
//
// Sources only send events; the loop marks the services an event touches as
// dirty and rebuilds only the dirty services, publishing what changed: at
// once when nothing was flushed in the quiet period before (the leading
// edge), else once the events have been quiet for the quiet period
// (hold-off), bounded by a maximum hold, so a steady stream cannot starve
// updates and a burst costs a few publishes.
//
// The files:
//
//   - loop.go: the Loop, its events, Run with the debounce and the
//     retention timer, readiness (every source synced), and flush, which
//     drives one rebuild: merge, dependents, translate, publish.
//   - claims.go: which source owns each service name (the best-ranked
//     claimant: priority, then config order) and the conflicts. The claims
//     known before running are listed by sources.StaticConflicts.
//   - merge.go: mergeService, the pure merge of one service (the owner's
//     endpoints, the last published version, the retained hosts, the check
//     verdicts and the time → the service, its hosts explained, the hosts
//     retained), and the retention bookkeeping around it.
//   - policy.go: policies, and the services that follow others (failover,
//     routes, held subsets).
//   - publish.go: translation, validation and publishing of a flush, and
//     telling the checker which hosts to probe.
//   - status.go: the snapshots the admin handlers read (sources, hosts,
//     conflicts, diagnostics, readiness), behind their own mutex.
//   - metrics.go: the loop's metrics.
package bridge
