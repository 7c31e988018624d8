// Scenarios, the synthetic fleet they serve, and how one is played
// against each target.

package load

import (
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"time"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/xdsbridge/xdsbridge/sources"
	"github.com/xdsbridge/xdsbridge/translate"
)

// Scenario is one workload, played against each target in turn.
type Scenario struct {
	Name      string  `json:"name"`
	Services  int     `json:"services"`
	Endpoints int     `json:"endpoints_per_service"`
	Clients   int     `json:"clients"`
	SotwShare float64 `json:"sotw_share"` // fraction of clients on sotw
	// SotwClusters is how many clusters a sotw (grpc-go-like) client uses;
	// 0: every cluster (wildcard CDS, EDS for all).
	SotwClusters int           `json:"sotw_clusters"`
	Rate         float64       `json:"changes_per_second"`
	Duration     time.Duration `json:"duration_ns"`
	// Overrides for the change phase of the baselines (SnapshotCache and
	// LinearCache; 0: same as the bridge).
	BaselineRate     float64       `json:"baseline_changes_per_second"`
	BaselineDuration time.Duration `json:"baseline_duration_ns"`
	Storm            bool          `json:"storm"`
	StormWindow      time.Duration `json:"storm_window_ns"`
	StreamsPerConn   int           `json:"streams_per_conn"`
	// DeltaWindow is the HTTP/2 flow-control window, of each stream and
	// of the connection, that the delta clients' connections advertise:
	// Envoy's default (Http2ProtocolOptions initial_stream_window_size and
	// initial_connection_window_size) is EnvoyWindow. 0: grpc-go's
	// default (64 KiB, grown by its bandwidth-delay estimate), which the
	// sotw clients' connections always use. A server writes to a client
	// with a small window in smaller pieces, between its window updates.
	DeltaWindow   int           `json:"delta_window_bytes"`
	InProcess     bool          `json:"in_process"`
	Seed          uint64        `json:"seed"`
	Timeout       time.Duration `json:"timeout_ns"`
	Targets       []string      `json:"targets"`
	CPUProfileDir string        `json:"-"`
}

// EnvoyWindow is Envoy's default HTTP/2 flow-control window, of a stream
// and of a connection: 256 MiB.
const EnvoyWindow = 256 << 20

// Scenarios are the named workloads (-scenario); flags override their
// sizes.
var Scenarios = map[string]Scenario{
	"small": {Name: "small", Services: 100, Endpoints: 10, Clients: 100, SotwShare: 0.2, SotwClusters: 10,
		Rate: 20, Duration: 10 * time.Second, DeltaWindow: EnvoyWindow},
	"large": {Name: "large", Services: 5000, Endpoints: 10, Clients: 1000, SotwShare: 0.2, SotwClusters: 10,
		Rate: 100, Duration: 60 * time.Second, DeltaWindow: EnvoyWindow},
	"storm": {Name: "storm", Services: 5000, Endpoints: 10, Clients: 1000, SotwShare: 0.2, SotwClusters: 10,
		Storm: true, StormWindow: 2 * time.Second, DeltaWindow: EnvoyWindow},
}

func (sc *Scenario) defaults() {
	if sc.StreamsPerConn <= 0 {
		sc.StreamsPerConn = 16
	}
	if sc.Timeout <= 0 {
		sc.Timeout = 5 * time.Minute
	}
	if sc.StormWindow <= 0 {
		sc.StormWindow = 2 * time.Second
	}
	if sc.Seed == 0 {
		sc.Seed = 1
	}
	if len(sc.Targets) == 0 {
		sc.Targets = []string{TargetBridge, TargetBaseline}
	}
	targets := make([]string, len(sc.Targets))
	for i, t := range sc.Targets {
		if a, ok := targetAliases[t]; ok {
			t = a
		}
		targets[i] = t
	}
	sc.Targets = targets
}

// The synthetic fleet: service i is "svc-%05d" with endpoints
// 10.<i>>8>.<i&255>.<j+1>:80. A change number seq sets the port of the
// service's first endpoint to markerBase+seq, so a client that receives the
// service's ClusterLoadAssignment can tell which change it carries (a later
// change to the same service carries every earlier one).
const (
	markerBase = 1000
	maxChanges = 65535 - markerBase
)

func svcName(i int) string { return fmt.Sprintf("svc-%05d", i) }

func svcIndex(name string) int {
	n, err := strconv.Atoi(strings.TrimPrefix(name, "svc-"))
	if err != nil {
		return -1
	}
	return n
}

// service is service i at change marker (0: its initial state).
func service(i, endpoints, marker int) sources.Service {
	s := sources.Service{Name: svcName(i), Endpoints: make([]sources.Endpoint, 0, endpoints)}
	for j := range endpoints {
		port := uint32(80)
		if j == 0 && marker > 0 {
			port = uint32(markerBase + marker)
		}
		s.Endpoints = append(s.Endpoints, sources.Endpoint{
			Address: fmt.Sprintf("10.%d.%d.%d", (i>>8)&255, i&255, j+1),
			Port:    port,
			Health:  sources.HealthHealthy,
		})
	}
	return s
}

// markerOf is the change number a ClusterLoadAssignment carries (0: none).
func markerOf(cla *endpoint.ClusterLoadAssignment) int32 {
	var m int32
	for _, g := range cla.GetEndpoints() {
		for _, lb := range g.GetLbEndpoints() {
			p := int32(lb.GetEndpoint().GetAddress().GetSocketAddress().GetPortValue())
			if p >= markerBase && p-markerBase > m {
				m = p - markerBase
			}
		}
	}
	return m
}

// Run plays the scenario against each of its targets in turn.
func Run(sc Scenario, log io.Writer) (*Report, error) {
	sc.defaults()
	if sc.Rate > 0 && sc.Rate*sc.Duration.Seconds() > maxChanges-1 {
		return nil, fmt.Errorf("at most %d changes per run", maxChanges-1)
	}
	// grpc-go ignores a window under HTTP/2's initial 65,535 bytes (and
	// still turns its bandwidth-delay estimate off), and int32 wraps one
	// over 2^31-1: either would run with a static 64 KiB window.
	if w := sc.DeltaWindow; w != 0 && (w < 65535 || w > math.MaxInt32) {
		return nil, fmt.Errorf("delta window %d: 0 (grpc-go's default) or 65535..%d bytes", w, math.MaxInt32)
	}
	rep := &Report{Scenario: sc, Machine: describeMachine(), Started: time.Now().UTC(), CLABytes: claSize(sc.Endpoints)}
	for _, t := range sc.Targets {
		fmt.Fprintf(log, "xdsload: %s: %s (%d services × %d endpoints, %d clients)\n", sc.Name, t, sc.Services, sc.Endpoints, sc.Clients)
		tr, err := runTarget(sc, t)
		if err != nil {
			return nil, err
		}
		rep.Targets = append(rep.Targets, tr)
	}
	rep.ratios()
	return rep, nil
}

type changeRec struct {
	seq, svc int
	at       int64
}

// runTarget plays the scenario against one target.
func runTarget(sc Scenario, name string) (*TargetReport, error) {
	rep := &TargetReport{Target: name}
	// One CPU profile per phase: init (start-up and the initial sync),
	// change, storm.
	prof := func(phase string) string {
		if sc.CPUProfileDir == "" {
			return ""
		}
		return fmt.Sprintf("%s/%s-%s-%s.cpu.pprof", sc.CPUProfileDir, sc.Name, name, phase)
	}
	profile := func(tg target, phase string) error {
		if sc.CPUProfileDir == "" {
			return nil
		}
		return tg.Profile(prof(phase))
	}
	var tg target
	if sc.InProcess {
		s, err := startServer(name, sc.Services, sc.Endpoints, sc.Clients)
		if err != nil {
			return nil, err
		}
		tg = inProcess{s}
	} else {
		ch, err := startChild(name, sc.Services, sc.Endpoints, sc.Clients, prof("init"))
		if err != nil {
			return nil, err
		}
		tg = ch
	}
	defer tg.Close()

	fl := newFleet(sc.Services)
	isDelta, connOf, conns, err := dialClients(tg.Addr(), sc)
	defer closeAll(conns)
	if err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(sc.Seed, 7))
	clients := make([]*client, sc.Clients)
	for i := range clients {
		delta, conn := isDelta[i], connOf[i]
		var subset []int
		if !delta && sc.SotwClusters > 0 && sc.SotwClusters < sc.Services {
			for j := range sc.SotwClusters {
				subset = append(subset, (i*sc.SotwClusters+j*(sc.Services/sc.SotwClusters+1))%sc.Services)
			}
			sort.Ints(subset)
			subset = dedup(subset)
		}
		clients[i] = newClient(i, delta, conn, fl, subset)
	}
	defer func() {
		for _, c := range clients {
			c.stop()
		}
	}()

	// Initial sync.
	// Each phase's CPU is read with Usage (see target.Usage).
	if _, err := tg.Stats(); err != nil {
		return nil, err
	}
	uInit, err := tg.Usage()
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	for _, c := range clients {
		c.start(false)
	}
	if err := waitFor(sc.Timeout, func() bool {
		for _, c := range clients {
			if !c.ready.Load() {
				return false
			}
		}
		return true
	}, clients); err != nil {
		notReady := 0
		example := ""
		for _, c := range clients {
			if !c.ready.Load() {
				notReady++
				c.mu.Lock()
				example = fmt.Sprintf("client %d (delta %v): %d/%d clusters, %d/%d assignments", c.id, c.delta, c.nClusters, c.expected(), c.nEDS, c.expected())
				c.mu.Unlock()
			}
		}
		return nil, fmt.Errorf("%s: initial sync: %w: %d clients not ready, e.g. %s", name, err, notReady, example)
	}
	rep.InitS = round3(time.Since(t0).Seconds())
	uSynced, err := tg.Usage()
	if err != nil {
		return nil, err
	}
	if _, err := tg.Stats(); err != nil { // the synced heap's profile
		return nil, err
	}
	rep.InitCPUSeconds = round3(uSynced.CPUSeconds - uInit.CPUSeconds)
	clientResources := 0
	for _, c := range clients {
		clientResources += 2 * c.expected() // its clusters and assignments
	}
	if clientResources > 0 {
		rep.InitCPUPerClientR = round3(rep.InitCPUSeconds * 1e6 / float64(clientResources))
	}
	initBytes := make([]int64, len(clients))
	for i, c := range clients {
		initBytes[i] = c.bytes.Load()
	}

	// Change phase.
	rate, dur := sc.Rate, sc.Duration
	if name == TargetBaseline || name == TargetLinear {
		if sc.BaselineRate > 0 {
			rate = sc.BaselineRate
		}
		if sc.BaselineDuration > 0 {
			dur = sc.BaselineDuration
		}
	}
	n := int(rate * dur.Seconds())
	n = min(n, maxChanges-1)
	if err := profile(tg, "change"); err != nil {
		return nil, err
	}
	st0, err := tg.Stats()
	if err != nil {
		return nil, err
	}
	rep.Server = append(rep.Server, st0)
	b0, r0 := counters(clients)
	// The phase's CPU, the serving process's and the harness's, over the
	// phase's wall time.
	u0, err := tg.Usage()
	if err != nil {
		return nil, err
	}
	h0 := cpuSeconds()
	final := make([]int32, sc.Services)
	var changes []changeRec
	var changedSvcs []int
	start := time.Now()
	for seq := 1; seq <= n; seq++ {
		due := start.Add(time.Duration(float64(seq-1) / rate * float64(time.Second)))
		time.Sleep(time.Until(due))
		svc := rng.IntN(sc.Services)
		at := time.Now().UnixNano()
		if err := tg.Change(seq, svc); err != nil {
			return nil, err
		}
		if final[svc] == 0 {
			changedSvcs = append(changedSvcs, svc)
		}
		final[svc] = int32(seq)
		changes = append(changes, changeRec{seq, svc, at})
	}
	lastChange := time.Now()
	err = waitFor(sc.Timeout, func() bool {
		for _, c := range clients {
			if !c.convergedTo(final, changedSvcs) {
				return false
			}
		}
		return true
	}, clients)
	rep.Converged = err == nil
	if err != nil {
		rep.Errors = append(rep.Errors, "change phase: "+err.Error())
	}
	rep.ConvergeS = round3(time.Since(lastChange).Seconds())
	rep.ChangePhase = round3(time.Since(start).Seconds())
	h1 := cpuSeconds()
	u1, err := tg.Usage()
	if err != nil {
		return nil, err
	}
	st1, err := tg.Stats()
	if err != nil {
		return nil, err
	}
	rep.Server = append(rep.Server, st1)
	b1, r1 := counters(clients)
	rep.Changes = len(changes)
	rep.Applied = st1.Changes - st0.Changes
	rep.Batches = st1.Batches - st0.Batches
	rep.CPUSeconds = round3(u1.CPUSeconds - u0.CPUSeconds)
	busy := rep.CPUSeconds // in process: the harness's too
	if !sc.InProcess {
		rep.HarnessCPUSeconds = round3(h1 - h0)
		busy += rep.HarnessCPUSeconds
	}
	if len(changes) > 0 && rep.ChangePhase >= minBusyPhase {
		rep.CoresBusy = round3(busy / rep.ChangePhase)
	}
	rep.Encodings = st1.Encodings - st0.Encodings
	rep.Versions = st1.Versions - st0.Versions
	if rep.Versions > 0 {
		rep.EncPerVer = round3(float64(rep.Encodings) / float64(rep.Versions))
	}
	if len(changes) > 0 {
		rep.CPUPerChange = round3(rep.CPUSeconds * 1000 / float64(len(changes)))
	}
	rep.Goroutines = st1.Goroutines
	latencies(rep, clients, changes, b0, b1, r0, r1, initBytes)
	if rep.Reached > 0 {
		rep.CPUPerReach = round3(rep.CPUSeconds * 1e6 / float64(rep.Reached))
	}
	if rep.Responses > 0 {
		rep.CPUPerResponse = round3(rep.CPUSeconds * 1e6 / float64(rep.Responses))
	}

	if sc.Storm {
		if err := profile(tg, "storm"); err != nil {
			return nil, err
		}
		rep.Storm, err = storm(sc, tg, clients, rng, n+1, initBytes)
		if err != nil {
			return nil, err
		}
	}
	st2, err := tg.Stats()
	if err != nil {
		return nil, err
	}
	rep.Server = append(rep.Server, st2)
	rep.PeakRSS = st2.MaxRSSBytes
	for _, c := range clients {
		if err := c.err(); err != nil {
			rep.Errors = append(rep.Errors, fmt.Sprintf("client %d: %v", c.id, err))
			break
		}
	}
	return rep, nil
}

func dedup(s []int) []int {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

func counters(clients []*client) (bytes, responses []int64) {
	bytes = make([]int64, len(clients))
	responses = make([]int64, len(clients))
	for i, c := range clients {
		bytes[i], responses[i] = c.bytes.Load(), c.responses.Load()
	}
	return bytes, responses
}

// waitFor polls cond until it holds, a stream fails, or the timeout.
func waitFor(timeout time.Duration, cond func() bool, clients []*client) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		for _, c := range clients {
			if err := c.err(); err != nil {
				return fmt.Errorf("client %d: %w", c.id, err)
			}
		}
		if time.Now().After(deadline) {
			return errors.New("timed out")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// claSize is the encoded size of one service's ClusterLoadAssignment.
func claSize(endpoints int) int {
	r, _ := translate.Service(service(1, endpoints, 1))
	return proto.Size(r.Load)
}

// dialClients makes the clients' connections: isDelta[i] is whether
// client i is a delta client, connOf[i] its connection. The delta clients
// share connections among themselves, with HTTP/2 windows of
// sc.DeltaWindow; the sotw clients theirs, with grpc-go's default. conns
// is every connection made (to close, also with an error).
func dialClients(addr string, sc Scenario) (isDelta []bool, connOf, conns []*grpc.ClientConn, err error) {
	sotwEvery := 0
	if sc.SotwShare > 0 {
		sotwEvery = int(math.Round(1 / sc.SotwShare))
	}
	isDelta = make([]bool, sc.Clients)
	var nDelta int
	for i := range isDelta {
		isDelta[i] = sotwEvery == 0 || i%sotwEvery != sotwEvery-1
		if isDelta[i] {
			nDelta++
		}
	}
	deltaConns, err := dialAll(addr, nDelta, sc.StreamsPerConn, sc.DeltaWindow)
	conns = append(conns, deltaConns...)
	if err != nil {
		return nil, nil, conns, err
	}
	sotwConns, err := dialAll(addr, sc.Clients-nDelta, sc.StreamsPerConn, 0)
	conns = append(conns, sotwConns...)
	if err != nil {
		return nil, nil, conns, err
	}
	connOf = make([]*grpc.ClientConn, sc.Clients)
	var kinds [2]int // the clients given a connection so far of each kind: sotw, delta
	for i, delta := range isDelta {
		cs := sotwConns
		if delta {
			cs = deltaConns
		}
		connOf[i] = cs[kinds[b2i(delta)]%len(cs)]
		kinds[b2i(delta)]++
	}
	return isDelta, connOf, conns, nil
}

// dialAll makes the connections of n clients, perConn streams each, with
// HTTP/2 windows of window bytes (0: grpc-go's default, with its
// bandwidth-delay estimate).
func dialAll(addr string, n, perConn, window int) ([]*grpc.ClientConn, error) {
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(256 << 20)),
	}
	if window > 0 {
		opts = append(opts, grpc.WithInitialWindowSize(int32(window)), grpc.WithInitialConnWindowSize(int32(window)))
	}
	conns := make([]*grpc.ClientConn, 0, (n+perConn-1)/perConn)
	for range cap(conns) {
		cc, err := grpc.NewClient(addr, opts...)
		if err != nil {
			return conns, err
		}
		conns = append(conns, cc)
	}
	return conns, nil
}

func closeAll(conns []*grpc.ClientConn) {
	for _, cc := range conns {
		cc.Close()
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
