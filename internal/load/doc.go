// Package load is the benchmark behind cmd/xdsload: it plays a fleet of
// simulated xDS clients against the bridge's serving path and, in the same
// run, against a baseline built the way most control planes use
// go-control-plane (one SnapshotCache snapshot of every cluster and
// assignment, rebuilt with a new version and set for every node on each
// change), and reports how fast and how cheaply a change reaches the fleet.
// A stronger baseline, go-control-plane's LinearCache (one per type,
// per-resource versions, delta-capable, only the changed resources
// updated), runs as the target "linear". The target "floor" is no control
// plane but a lower bound for the bridge, played against the same clients
// in the same run: the least a gRPC server does for them (each resource
// version encoded once, a response assembled from those bytes, one
// response in flight per stream and type, ACKs read by hand), so that
// what gRPC-go and the runtime cost per change and client reached is
// measured rather than read off a profile. It ignores resumes (a client
// reconnecting is sent everything again), so the report compares the
// bridge's storm with the floor's in no ratio.
//
// How it measures:
//
//   - The serving side runs in a child process ("xdsload serve", ServeMain);
//     its CPU seconds and peak RSS are its own (getrusage). The clients run
//     in the harness process, many ADS streams per gRPC connection
//     (Scenario.StreamsPerConn), on the same cores, so they compete with the
//     server. The delta clients share connections among themselves, whose
//     HTTP/2 windows are Scenario.DeltaWindow (the named scenarios: Envoy's,
//     256 MiB); the sotw clients theirs, with grpc-go's (64 KiB, grown by
//     its bandwidth-delay estimate).
//   - Changes are applied at the serving side in-process (translate and the
//     cache's PublishServices, no source, no merge-loop debounce); changes
//     queued while the previous one is applied are applied together (the
//     baseline rebuilds one snapshot for them). A change sets one endpoint's
//     port to 1000+sequence number, which is how a client recognises it.
//   - Clients: a share are delta ADS like Envoy (wildcard CDS, then EDS for
//     every cluster learned, every response ACKed; on reconnect they send
//     initial_resource_versions), the rest sotw ADS like grpc-go (CDS and EDS
//     for a few clusters each, ACKs carry version and nonce). Latency is
//     change → the client ACKed a response holding it (or a later change of
//     the same service), over every (change, following client) pair; "fleet"
//     is per change, until the last client ACKed. Bytes are payload bytes
//     (proto.Size of the responses), not TCP bytes.
//   - Encodings per resource version: the bridge cache's encoding counter
//     over the versions the changes created; for the baseline, the resources
//     in its responses (each encoded per response) plus those hashed for its
//     delta version maps; for the LinearCache, the distinct encodings its
//     responses carried (it encodes a resource version once and shares the
//     bytes); for the floor, its proto.Marshal calls (one per version).
//   - The baselines' change phase may run at their own rate and duration
//     (-baseline-rate, -baseline-duration); the floor's runs at the
//     bridge's.
//
// The files: scenario.go (workloads, the synthetic fleet, Run), target.go
// (the serving side in or out of process), serve.go (the serving process
// and the bridge target), baseline.go (the SnapshotCache target),
// baseline_linear.go (the LinearCache target), baseline_floor.go and
// baseline_floor_stream.go (the floor target), client.go
// (the simulated clients), storm.go (the reconnect storm), report.go (the
// figures, JSON and text), plot.go (the latency plot), curves.go
// ("xdsload curves": the scenario once per point of a sweep of clients
// or services, least-squares growth per figure, JSON, PNGs, Markdown).
package load
