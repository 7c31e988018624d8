// The report: latency distributions, per-mode and per-target figures,
// ratios between targets, and the JSON and text forms.

package load

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"sort"
	"strings"
	"time"
)

// Report is what -json writes.
type Report struct {
	Scenario Scenario           `json:"scenario"`
	Machine  Machine            `json:"machine"`
	Started  time.Time          `json:"started"`
	CLABytes int                `json:"cla_bytes"` // one service's ClusterLoadAssignment, encoded
	Targets  []*TargetReport    `json:"targets"`
	Ratios   map[string]float64 `json:"ratios,omitempty"` // bridge / baseline (SnapshotCache)
	// RatiosLinear are bridge / linear (LinearCache).
	RatiosLinear map[string]float64 `json:"ratios_linear,omitempty"`
	// RatiosFloor are bridge / floor (the least a server does for these
	// clients).
	RatiosFloor map[string]float64 `json:"ratios_floor,omitempty"`
	// Delta vs sotw within the bridge.
	SotwVsDelta map[string]float64 `json:"bridge_sotw_over_delta,omitempty"`
}

// Machine is where the run ran.
type Machine struct {
	CPU    string `json:"cpu"`
	Cores  int    `json:"cores"`
	Memory string `json:"memory"`
	Go     string `json:"go"`
	OS     string `json:"os"`
}

func describeMachine() Machine {
	m := Machine{Cores: runtime.NumCPU(), Go: runtime.Version(), OS: runtime.GOOS + "/" + runtime.GOARCH}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for l := range strings.SplitSeq(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		if l, _, ok := strings.Cut(string(b), "\n"); ok {
			m.Memory = strings.Join(strings.Fields(strings.TrimPrefix(l, "MemTotal:")), " ")
		}
	}
	return m
}

// Latency is a distribution in milliseconds.
type Latency struct {
	N       int     `json:"n"`
	Missing int     `json:"missing"` // (change, client) pairs never observed
	P50     float64 `json:"p50_ms"`
	P90     float64 `json:"p90_ms"`
	P99     float64 `json:"p99_ms"`
	Max     float64 `json:"max_ms"`
}

func distribution(ms []float64, missing int) Latency {
	l := Latency{N: len(ms), Missing: missing}
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

// ModeReport is the client side, per protocol variant.
type ModeReport struct {
	Mode    string `json:"mode"`
	Clients int    `json:"clients"`
	// Change → this client received / ACKed it, over (change, client) pairs
	// for the clients that follow the changed service.
	Recv Latency `json:"receive_latency"`
	Ack  Latency `json:"ack_latency"`
	// Payload bytes (proto.Size of the responses, not TCP bytes) and
	// responses, per change per client, during the change phase.
	BytesPerChangePerClient     float64 `json:"bytes_per_change_per_client"`
	ResponsesPerChangePerClient float64 `json:"responses_per_change_per_client"`
	// Per change that concerns the client (a service it follows).
	BytesPerRelevantChange float64 `json:"bytes_per_relevant_change"`
	InitBytesPerClient     float64 `json:"initial_bytes_per_client"`
}

// StormReport is the reconnect storm (storm.go).
type StormReport struct {
	Clients int     `json:"clients"`
	Window  float64 `json:"window_s"`
	// ResyncS: from the drop until the last client resynced: each of its
	// reconnected streams had (and ACKed) an answer of every type its
	// first requests asked for; Resynced: the clients that were, before
	// the change. ConvergedS: ResyncS if every client resynced, else
	// ChangeAckedS.
	ResyncS    float64 `json:"resync_s"`
	Resynced   int     `json:"resynced"`
	ConvergedS float64 `json:"converged_s"`
	// ChangeAtS: when the change was made, after every client reissued
	// its requests and no bytes flowed for 600 ms (to count the bytes
	// resent apart from the change); ChangeS: from the change until the
	// last client ACKed it; ChangeAckedS: from the drop until then.
	ChangeAtS    float64 `json:"change_at_s"`
	ChangeS      float64 `json:"change_s"`
	ChangeAckedS float64 `json:"change_acked_s"`
	Converged    bool    `json:"converged"`
	// ResentFraction: payload bytes received on reconnect (before that
	// change) over the initial full-state bytes, per mode.
	ResentFraction map[string]float64 `json:"resent_fraction"`
	CPUSeconds     float64            `json:"cpu_seconds"`
	// PeakRSS: the serving process's peak RSS at the end of the storm
	// (its run's, the storm included); PeakRSSBefore: at its start.
	PeakRSS       int64 `json:"peak_rss_bytes"`
	PeakRSSBefore int64 `json:"peak_rss_before_bytes"`
	// The harness's (the simulated clients') and the serving process's
	// CPU seconds from the drop to the first sample after ResyncS, and
	// both through the storm (every 250 ms, and at its end).
	HarnessCPUToResync float64     `json:"harness_cpu_s_to_resync"`
	ServerCPUToResync  float64     `json:"server_cpu_s_to_resync"`
	Samples            []CPUSample `json:"cpu_samples"`
}

// minBusyPhase is the shortest change phase whose cores busy a report
// gives: over less, a few milliseconds of CPU either side of it would
// weigh as cores.
const minBusyPhase = 0.1 // seconds

// TargetReport is one target's run of the scenario.
type TargetReport struct {
	Target string  `json:"target"`
	InitS  float64 `json:"initial_sync_s"`
	// The serving process's CPU seconds from the clients' start to the
	// initial sync, and per (client × resource it was sent: its clusters
	// and assignments).
	InitCPUSeconds    float64 `json:"initial_sync_cpu_seconds"`
	InitCPUPerClientR float64 `json:"initial_sync_cpu_us_per_client_resource"`
	Changes           int     `json:"changes"`
	Applied           int64   `json:"changes_applied"`
	Batches           int64   `json:"batches"`
	ChangePhase       float64 `json:"change_phase_s"`
	Converged         bool    `json:"converged"`
	ConvergeS         float64 `json:"converge_after_last_change_s"`
	// The serving process, during the change phase (to convergence).
	CPUSeconds   float64 `json:"cpu_seconds"`
	CPUPerChange float64 `json:"cpu_ms_per_change"`
	// Reached: (change, client following the changed service) pairs;
	// CPUPerReach: the change phase's CPU over them, in µs.
	Reached     int     `json:"changes_reached"`
	CPUPerReach float64 `json:"cpu_us_per_change_per_client_reached"`
	// Responses: those the clients received in the change phase;
	// CPUPerResponse: the change phase's CPU over them, in µs (a response
	// carries one change or several, as they coalesce).
	Responses      int64   `json:"responses"`
	CPUPerResponse float64 `json:"cpu_us_per_response"`
	// HarnessCPUSeconds: the harness process's own CPU seconds over the
	// change phase (its clients, and its driving and checking of them),
	// beside the serving process's CPUSeconds (none when the target serves
	// in the harness's process, whose CPUSeconds are both). CoresBusy:
	// the two together over the change phase's wall time, in cores (none
	// for a phase of no changes, or shorter than minBusyPhase): near the
	// machine's cores, the harness and the server share a saturated
	// machine, a response made cheaper shows as responses carrying fewer
	// changes each, and the latencies measure the machine as much as the
	// server.
	HarnessCPUSeconds float64 `json:"harness_cpu_seconds,omitempty"`
	CoresBusy         float64 `json:"cores_busy,omitempty"`
	PeakRSS           int64   `json:"peak_rss_bytes"`
	Goroutines        int     `json:"goroutines"`
	Encodings         uint64  `json:"encodings"`
	Versions          uint64  `json:"resource_versions"`
	EncPerVer         float64 `json:"encodings_per_resource_version"`
	// Fleet: per change, the time until every following client ACKed it.
	Fleet Latency `json:"fleet_ack_latency"`
	// All clients, all modes.
	Ack                     Latency       `json:"ack_latency"`
	BytesPerChangePerClient float64       `json:"bytes_per_change_per_client"`
	RespPerChangePerClient  float64       `json:"responses_per_change_per_client"`
	Modes                   []ModeReport  `json:"modes"`
	Storm                   *StormReport  `json:"storm,omitempty"`
	Errors                  []string      `json:"errors,omitempty"`
	Server                  []ServerStats `json:"server_stats"`

	ackSamples []float64
}

// latencies fills the latency and byte figures of the change phase.
func latencies(rep *TargetReport, clients []*client, changes []changeRec, b0, b1, r0, r1, initBytes []int64) {
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
	rep.Reached = 0
	for _, a := range modes {
		rep.Reached += a.relevant
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
		mr := ModeReport{Mode: m, Clients: a.clients, Recv: distribution(a.recv, a.missing), Ack: distribution(a.ack, a.missing)}
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
	rep.Responses = totalResp
}

func (r *Report) target(name string) *TargetReport {
	for _, t := range r.Targets {
		if t.Target == name {
			return t
		}
	}
	return nil
}

func (t *TargetReport) mode(name string) *ModeReport {
	for i := range t.Modes {
		if t.Modes[i].Mode == name {
			return &t.Modes[i]
		}
	}
	return nil
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return round3(a / b)
}

// ratiosOver are the bridge's figures over another target's (nil when
// either did not run); a figure the other target does not have (a storm
// not run, no changes) is left out, and so is the storm when storm is
// false (the floor resends everything on a resume, so its storm is no
// lower bound).
func ratiosOver(br, bl *TargetReport, storm bool) map[string]float64 {
	if br == nil || bl == nil {
		return nil
	}
	out := map[string]float64{}
	put := func(k string, a, b float64) {
		if b != 0 {
			out[k] = ratio(a, b)
		}
	}
	put("cpu_per_change", br.CPUPerChange, bl.CPUPerChange)
	put("cpu_per_change_per_client_reached", br.CPUPerReach, bl.CPUPerReach)
	put("bytes_per_change_per_client", br.BytesPerChangePerClient, bl.BytesPerChangePerClient)
	put("ack_latency_p50", br.Ack.P50, bl.Ack.P50)
	put("ack_latency_p99", br.Ack.P99, bl.Ack.P99)
	put("initial_sync_s", br.InitS, bl.InitS)
	put("initial_sync_cpu_seconds", br.InitCPUSeconds, bl.InitCPUSeconds)
	put("peak_rss", float64(br.PeakRSS), float64(bl.PeakRSS))
	for _, m := range []string{"delta", "sotw"} {
		a, b := br.mode(m), bl.mode(m)
		if a != nil && b != nil {
			put("bytes_per_change_per_client_"+m, a.BytesPerChangePerClient, b.BytesPerChangePerClient)
		}
	}
	if a, b := br.Storm, bl.Storm; storm && a != nil && b != nil {
		put("storm_converged_s", a.ConvergedS, b.ConvergedS)
		put("storm_change_acked_s", a.ChangeAckedS, b.ChangeAckedS)
		put("storm_cpu_seconds", a.CPUSeconds, b.CPUSeconds)
		put("storm_peak_rss", float64(a.PeakRSS), float64(b.PeakRSS))
	}
	return out
}

func (r *Report) ratios() {
	br := r.target(TargetBridge)
	r.Ratios = ratiosOver(br, r.target(TargetBaseline), true)
	r.RatiosLinear = ratiosOver(br, r.target(TargetLinear), true)
	r.RatiosFloor = ratiosOver(br, r.target(TargetFloor), false)
	if br != nil {
		d, s := br.mode("delta"), br.mode("sotw")
		if d != nil && s != nil {
			r.SotwVsDelta = map[string]float64{
				"bytes_per_relevant_change": ratio(s.BytesPerRelevantChange, d.BytesPerRelevantChange),
				"ack_latency_p50":           ratio(s.Ack.P50, d.Ack.P50),
				"ack_latency_p99":           ratio(s.Ack.P99, d.Ack.P99),
			}
		}
	}
}

// WriteJSON writes the report, indented, to path.
func WriteJSON(path string, rep *Report) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// PrintTable writes the report as text tables.
func PrintTable(w io.Writer, rep *Report) {
	sc := rep.Scenario
	fmt.Fprintf(w, "scenario %s: %d services × %d endpoints, %d clients (%.0f%% sotw, %d clusters each), %.0f changes/s for %s; %s, %d cores\n",
		sc.Name, sc.Services, sc.Endpoints, sc.Clients, sc.SotwShare*100, sc.SotwClusters, sc.Rate, sc.Duration, rep.Machine.CPU, rep.Machine.Cores)
	fmt.Fprintf(w, "one ClusterLoadAssignment: %d bytes\n\n", rep.CLABytes)
	fmt.Fprintf(w, "%-9s %-6s %7s %9s %9s %9s %9s %9s %12s %9s\n",
		"target", "mode", "clients", "ack p50", "ack p90", "ack p99", "ack max", "missing", "B/chg/client", "resp/chg")
	for _, t := range rep.Targets {
		rows := append([]ModeReport{{Mode: "all", Clients: sc.Clients, Ack: t.Ack, BytesPerChangePerClient: t.BytesPerChangePerClient, ResponsesPerChangePerClient: t.RespPerChangePerClient}}, t.Modes...)
		for _, m := range rows {
			fmt.Fprintf(w, "%-9s %-6s %7d %7.1fms %7.1fms %7.1fms %7.1fms %9d %12.1f %9.3f\n",
				t.Target, m.Mode, m.Clients, m.Ack.P50, m.Ack.P90, m.Ack.P99, m.Ack.Max, m.Ack.Missing, m.BytesPerChangePerClient, m.ResponsesPerChangePerClient)
		}
	}
	fmt.Fprintf(w, "\n%-9s %8s %10s %9s %8s %8s %9s %10s %10s %9s %10s %9s %10s %10s %9s %9s\n",
		"target", "init s", "init cpu s", "µs/cl·res", "changes", "batches", "cpu s", "cpu/chg", "µs/reach", "µs/resp", "peak RSS", "gorout.", "enc/ver", "fleet p50", "fleet p99", "conv.")
	for _, t := range rep.Targets {
		fmt.Fprintf(w, "%-9s %8.2f %10.2f %9.2f %8d %8d %9.2f %8.2fms %10.2f %9.2f %7.0fMiB %9d %10.2f %8.1fms %7.1fms %9v\n",
			t.Target, t.InitS, t.InitCPUSeconds, t.InitCPUPerClientR, t.Changes, t.Batches, t.CPUSeconds, t.CPUPerChange, t.CPUPerReach, t.CPUPerResponse,
			float64(t.PeakRSS)/(1<<20), t.Goroutines, t.EncPerVer, t.Fleet.P50, t.Fleet.P99, t.Converged)
	}
	for _, t := range rep.Targets {
		switch {
		case t.CoresBusy == 0:
		case !sc.InProcess:
			fmt.Fprintf(w, "%-9s change phase: %.2f of %d cores busy (%.2f cpu s serving, %.2f the harness, over %.2fs)\n",
				t.Target, t.CoresBusy, rep.Machine.Cores, t.CPUSeconds, t.HarnessCPUSeconds, t.ChangePhase)
		default:
			fmt.Fprintf(w, "%-9s change phase: %.2f of %d cores busy (%.2f cpu s serving and the harness, in one process, over %.2fs)\n",
				t.Target, t.CoresBusy, rep.Machine.Cores, t.CPUSeconds, t.ChangePhase)
		}
	}
	for _, t := range rep.Targets {
		if s := t.Storm; s != nil {
			fmt.Fprintf(w, "%-9s storm: %d clients reconnect within %.1fs: %d resynced in %.2fs (cpu s: harness %.2f, server %.2f), converged %v in %.2fs; change made at %.2fs, acked by all in %.2fs (%.2fs from the drop); resent %v of the initial bytes, %.2f cpu s, peak RSS %.0fMiB (%.0fMiB before)\n",
				t.Target, s.Clients, s.Window, s.Resynced, s.ResyncS, s.HarnessCPUToResync, s.ServerCPUToResync, s.Converged, s.ConvergedS,
				s.ChangeAtS, s.ChangeS, s.ChangeAckedS, s.ResentFraction, s.CPUSeconds, float64(s.PeakRSS)/(1<<20), float64(s.PeakRSSBefore)/(1<<20))
		}
		for _, e := range t.Errors {
			fmt.Fprintf(w, "%-9s error: %s\n", t.Target, e)
		}
	}
	if len(rep.Ratios) > 0 {
		fmt.Fprintf(w, "\nbridge / baseline: %s\n", fmtMap(rep.Ratios))
	}
	if len(rep.RatiosLinear) > 0 {
		fmt.Fprintf(w, "bridge / linear: %s\n", fmtMap(rep.RatiosLinear))
	}
	if len(rep.RatiosFloor) > 0 {
		fmt.Fprintf(w, "bridge / floor: %s\n", fmtMap(rep.RatiosFloor))
	}
	if len(rep.SotwVsDelta) > 0 {
		fmt.Fprintf(w, "bridge sotw / delta: %s\n", fmtMap(rep.SotwVsDelta))
	}
}

func fmtMap(m map[string]float64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %.3g", k, m[k])
	}
	return b.String()
}
