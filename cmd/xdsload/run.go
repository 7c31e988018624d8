package main

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/xdsbridge/xdsbridge/translate"
)

// scenario is one workload, played against each target in turn.
type scenario struct {
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
	// Baseline overrides for the change phase (0: same as the bridge).
	BaselineRate     float64       `json:"baseline_changes_per_second"`
	BaselineDuration time.Duration `json:"baseline_duration_ns"`
	Storm            bool          `json:"storm"`
	StormWindow      time.Duration `json:"storm_window_ns"`
	StreamsPerConn   int           `json:"streams_per_conn"`
	InProcess        bool          `json:"in_process"`
	Seed             uint64        `json:"seed"`
	Timeout          time.Duration `json:"timeout_ns"`
	Targets          []string      `json:"targets"`
	CPUProfileDir    string        `json:"-"`
}

var scenarios = map[string]scenario{
	"small": {Name: "small", Services: 100, Endpoints: 10, Clients: 100, SotwShare: 0.2, SotwClusters: 10,
		Rate: 20, Duration: 10 * time.Second},
	"large": {Name: "large", Services: 5000, Endpoints: 10, Clients: 1000, SotwShare: 0.2, SotwClusters: 10,
		Rate: 100, Duration: 60 * time.Second},
	"storm": {Name: "storm", Services: 5000, Endpoints: 10, Clients: 1000, SotwShare: 0.2, SotwClusters: 10,
		Storm: true, StormWindow: 2 * time.Second},
}

func (sc *scenario) defaults() {
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
		sc.Targets = []string{targetBridge, targetBaseline}
	}
}

// latency is a distribution in milliseconds.
type latency struct {
	N       int     `json:"n"`
	Missing int     `json:"missing"` // (change, client) pairs never observed
	P50     float64 `json:"p50_ms"`
	P90     float64 `json:"p90_ms"`
	P99     float64 `json:"p99_ms"`
	Max     float64 `json:"max_ms"`
}

func distribution(ms []float64, missing int) latency {
	l := latency{N: len(ms), Missing: missing}
	if len(ms) == 0 {
		return l
	}
	sort.Float64s(ms)
	q := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(ms)))) - 1
		return round3(ms[max(0, min(i, len(ms)-1))])
	}
	l.P50, l.P90, l.P99, l.Max = q(0.50), q(0.90), q(0.99), round3(ms[len(ms)-1])
	return l
}

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

// modeReport is the client side, per protocol variant.
type modeReport struct {
	Mode    string `json:"mode"`
	Clients int    `json:"clients"`
	// Change → this client received / ACKed it, over (change, client) pairs
	// for the clients that follow the changed service.
	Recv latency `json:"receive_latency"`
	Ack  latency `json:"ack_latency"`
	// Payload bytes (proto.Size of the responses, not TCP bytes) and
	// responses, per change per client, during the change phase.
	BytesPerChangePerClient     float64 `json:"bytes_per_change_per_client"`
	ResponsesPerChangePerClient float64 `json:"responses_per_change_per_client"`
	// Per change that concerns the client (a service it follows).
	BytesPerRelevantChange float64 `json:"bytes_per_relevant_change"`
	InitBytesPerClient     float64 `json:"initial_bytes_per_client"`
}

type stormReport struct {
	Clients int     `json:"clients"`
	Window  float64 `json:"window_s"`
	// ConvergedS: from the drop until every client, reconnected with its
	// known versions, holds (and ACKed) a change made once all had reissued
	// their requests.
	ConvergedS float64 `json:"converged_s"`
	Converged  bool    `json:"converged"`
	// ResentFraction: payload bytes received on reconnect (before that
	// change) over the initial full-state bytes, per mode.
	ResentFraction map[string]float64 `json:"resent_fraction"`
	CPUSeconds     float64            `json:"cpu_seconds"`
}

type targetReport struct {
	Target      string  `json:"target"`
	InitS       float64 `json:"initial_sync_s"`
	Changes     int     `json:"changes"`
	Applied     int64   `json:"changes_applied"`
	Batches     int64   `json:"batches"`
	ChangePhase float64 `json:"change_phase_s"`
	Converged   bool    `json:"converged"`
	ConvergeS   float64 `json:"converge_after_last_change_s"`
	// The serving process, during the change phase (to convergence).
	CPUSeconds   float64 `json:"cpu_seconds"`
	CPUPerChange float64 `json:"cpu_ms_per_change"`
	PeakRSS      int64   `json:"peak_rss_bytes"`
	Goroutines   int     `json:"goroutines"`
	Encodings    uint64  `json:"encodings"`
	Versions     uint64  `json:"resource_versions"`
	EncPerVer    float64 `json:"encodings_per_resource_version"`
	// Fleet: per change, the time until every following client ACKed it.
	Fleet latency `json:"fleet_ack_latency"`
	// All clients, all modes.
	Ack                     latency       `json:"ack_latency"`
	BytesPerChangePerClient float64       `json:"bytes_per_change_per_client"`
	RespPerChangePerClient  float64       `json:"responses_per_change_per_client"`
	Modes                   []modeReport  `json:"modes"`
	Storm                   *stormReport  `json:"storm,omitempty"`
	Errors                  []string      `json:"errors,omitempty"`
	Server                  []serverStats `json:"server_stats"`

	ackSamples []float64
}

type changeRec struct {
	seq, svc int
	at       int64
}

// runTarget plays the scenario against one target.
func runTarget(sc scenario, name string) (*targetReport, error) {
	rep := &targetReport{Target: name}
	prof := ""
	if sc.CPUProfileDir != "" {
		prof = fmt.Sprintf("%s/%s-%s.cpu.pprof", sc.CPUProfileDir, sc.Name, name)
	}
	var tg target
	if sc.InProcess {
		s, err := startServer(name, sc.Services, sc.Endpoints, sc.Clients)
		if err != nil {
			return nil, err
		}
		tg = inProcess{s}
	} else {
		ch, err := startChild(name, sc.Services, sc.Endpoints, sc.Clients, prof)
		if err != nil {
			return nil, err
		}
		tg = ch
	}
	defer tg.Close()

	fl := newFleet(sc.Services)
	nconns := (sc.Clients + sc.StreamsPerConn - 1) / sc.StreamsPerConn
	conns := make([]*grpc.ClientConn, nconns)
	for i := range conns {
		cc, err := grpc.NewClient(tg.Addr(),
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(256<<20)))
		if err != nil {
			return nil, err
		}
		defer cc.Close()
		conns[i] = cc
	}
	rng := rand.New(rand.NewPCG(sc.Seed, 7))
	clients := make([]*client, sc.Clients)
	sotwEvery := 0
	if sc.SotwShare > 0 {
		sotwEvery = int(math.Round(1 / sc.SotwShare))
	}
	for i := range clients {
		delta := sotwEvery == 0 || i%sotwEvery != sotwEvery-1
		var subset []int
		if !delta && sc.SotwClusters > 0 && sc.SotwClusters < sc.Services {
			for j := range sc.SotwClusters {
				subset = append(subset, (i*sc.SotwClusters+j*(sc.Services/sc.SotwClusters+1))%sc.Services)
			}
			sort.Ints(subset)
			subset = dedup(subset)
		}
		clients[i] = newClient(i, delta, conns[i%nconns], fl, subset)
	}
	defer func() {
		for _, c := range clients {
			c.stop()
		}
	}()

	// Initial sync.
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
	initBytes := make([]int64, len(clients))
	for i, c := range clients {
		initBytes[i] = c.bytes.Load()
	}

	// Change phase.
	rate, dur := sc.Rate, sc.Duration
	if name == targetBaseline {
		if sc.BaselineRate > 0 {
			rate = sc.BaselineRate
		}
		if sc.BaselineDuration > 0 {
			dur = sc.BaselineDuration
		}
	}
	n := int(rate * dur.Seconds())
	n = min(n, maxChanges-1)
	st0, err := tg.Stats()
	if err != nil {
		return nil, err
	}
	rep.Server = append(rep.Server, st0)
	b0, r0 := counters(clients)
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
	st1, err := tg.Stats()
	if err != nil {
		return nil, err
	}
	rep.Server = append(rep.Server, st1)
	b1, r1 := counters(clients)
	rep.Changes = len(changes)
	rep.Applied = st1.Changes - st0.Changes
	rep.Batches = st1.Batches - st0.Batches
	rep.CPUSeconds = round3(st1.CPUSeconds - st0.CPUSeconds)
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

	if sc.Storm {
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

// latencies fills the latency and byte figures of the change phase.
func latencies(rep *targetReport, clients []*client, changes []changeRec, b0, b1, r0, r1, initBytes []int64) {
	type acc struct {
		clients                 int
		recv, ack               []float64
		missing                 int
		bytes, responses, initB int64
		relevant                int
	}
	modes := map[string]*acc{}
	fleetMax := make([]float64, len(changes))
	fleetMissing := make([]bool, len(changes))
	var all []float64
	allMissing := 0
	for i, c := range clients {
		m := "sotw"
		if c.delta {
			m = "delta"
		}
		a := modes[m]
		if a == nil {
			a = &acc{}
			modes[m] = a
		}
		a.clients++
		a.bytes += b1[i] - b0[i]
		a.responses += r1[i] - r0[i]
		a.initB += initBytes[i]
		bySvc := map[int32][]obs{}
		var global []obs
		for _, o := range c.observations() {
			if o.svc < 0 {
				global = append(global, o)
			} else {
				bySvc[o.svc] = append(bySvc[o.svc], o)
			}
		}
		for k, ch := range changes {
			if !c.wants[ch.svc] {
				continue
			}
			a.relevant++
			seq := int32(ch.seq)
			best, found := obs{}, false
			for _, list := range [][]obs{bySvc[int32(ch.svc)], global} {
				j := sort.Search(len(list), func(j int) bool { return list[j].marker >= seq })
				if j < len(list) && (!found || list[j].ack < best.ack) {
					best, found = list[j], true
				}
			}
			if !found {
				a.missing++
				allMissing++
				fleetMissing[k] = true
				continue
			}
			rl := float64(best.recv-ch.at) / 1e6
			al := float64(best.ack-ch.at) / 1e6
			a.recv = append(a.recv, rl)
			a.ack = append(a.ack, al)
			all = append(all, al)
			fleetMax[k] = max(fleetMax[k], al)
		}
	}
	var fleet []float64
	fm := 0
	for k := range changes {
		if fleetMissing[k] {
			fm++
			continue
		}
		fleet = append(fleet, fleetMax[k])
	}
	rep.Fleet = distribution(fleet, fm)
	rep.ackSamples = append([]float64(nil), all...)
	rep.Ack = distribution(all, allMissing)
	var totalBytes, totalResp int64
	for _, m := range []string{"delta", "sotw"} {
		a := modes[m]
		if a == nil {
			continue
		}
		totalBytes += a.bytes
		totalResp += a.responses
		mr := modeReport{Mode: m, Clients: a.clients, Recv: distribution(a.recv, a.missing), Ack: distribution(a.ack, a.missing)}
		if len(changes) > 0 {
			mr.BytesPerChangePerClient = round3(float64(a.bytes) / float64(len(changes)) / float64(a.clients))
			mr.ResponsesPerChangePerClient = round3(float64(a.responses) / float64(len(changes)) / float64(a.clients))
		}
		if a.relevant > 0 {
			mr.BytesPerRelevantChange = round3(float64(a.bytes) / float64(a.relevant))
		}
		mr.InitBytesPerClient = round3(float64(a.initB) / float64(a.clients))
		rep.Modes = append(rep.Modes, mr)
	}
	if len(changes) > 0 {
		rep.BytesPerChangePerClient = round3(float64(totalBytes) / float64(len(changes)) / float64(len(clients)))
		rep.RespPerChangePerClient = round3(float64(totalResp) / float64(len(changes)) / float64(len(clients)))
	}
}

// storm drops every stream and reopens it, each at a random time within the
// window, with the client's known versions; then makes one change and waits
// until every client holds it.
func storm(sc scenario, tg target, clients []*client, rng *rand.Rand, seq int, initBytes []int64) (*stormReport, error) {
	rep := &stormReport{Clients: len(clients), Window: sc.StormWindow.Seconds(), ResentFraction: map[string]float64{}}
	st0, err := tg.Stats()
	if err != nil {
		return nil, err
	}
	b0, _ := counters(clients)
	offsets := make([]time.Duration, len(clients))
	for i := range offsets {
		offsets[i] = time.Duration(rng.Int64N(int64(sc.StormWindow)))
	}
	start := time.Now()
	for _, c := range clients {
		c.stop()
	}
	done := make(chan struct{})
	for i, c := range clients {
		go func() {
			time.Sleep(time.Until(start.Add(offsets[i])))
			c.start(true)
			done <- struct{}{}
		}()
	}
	for range clients {
		<-done
	}
	if err := waitFor(sc.Timeout, func() bool {
		for _, c := range clients {
			if !c.up.Load() {
				return false
			}
		}
		return true
	}, clients); err != nil {
		return nil, fmt.Errorf("storm: reconnect: %w", err)
	}
	// Let the reconnect responses drain: no new bytes for 600ms.
	prev := int64(-1)
	for quiet := 0; quiet < 3; {
		time.Sleep(200 * time.Millisecond)
		b, _ := counters(clients)
		var sum int64
		for _, v := range b {
			sum += v
		}
		if sum == prev {
			quiet++
		} else {
			quiet = 0
		}
		prev = sum
	}
	b1, _ := counters(clients)
	resent := map[string][2]int64{}
	for i, c := range clients {
		m := "sotw"
		if c.delta {
			m = "delta"
		}
		r := resent[m]
		r[0] += b1[i] - b0[i]
		r[1] += initBytes[i]
		resent[m] = r
	}
	for m, r := range resent {
		if r[1] > 0 {
			rep.ResentFraction[m] = round3(float64(r[0]) / float64(r[1]))
		}
	}
	// One change, after every client reissued its requests, to a service
	// every client follows if any (sotw clients follow a subset).
	svc := rng.IntN(sc.Services)
	for s := range sc.Services {
		ok := true
		for _, c := range clients {
			ok = ok && c.wants[s]
		}
		if ok {
			svc = s
			break
		}
	}
	if err := tg.Change(seq, svc); err != nil {
		return nil, err
	}
	final := make([]int32, sc.Services)
	final[svc] = int32(seq)
	err = waitFor(sc.Timeout, func() bool {
		for _, c := range clients {
			if !c.convergedTo(final, []int{svc}) {
				return false
			}
		}
		return true
	}, clients)
	rep.Converged = err == nil
	var last int64
	for _, c := range clients {
		if !c.wants[svc] {
			continue
		}
		for _, o := range c.observations() {
			if (o.svc == int32(svc) || o.svc < 0) && o.marker >= int32(seq) {
				last = max(last, o.ack)
				break
			}
		}
	}
	if last > 0 {
		rep.ConvergedS = round3(float64(last-start.UnixNano()) / 1e9)
	}
	st1, err := tg.Stats()
	if err != nil {
		return nil, err
	}
	rep.CPUSeconds = round3(st1.CPUSeconds - st0.CPUSeconds)
	return rep, nil
}

// claSize is the encoded size of one service's ClusterLoadAssignment.
func claSize(endpoints int) int {
	r, _ := translate.Service(service(1, endpoints, 1))
	return proto.Size(r.Load)
}
