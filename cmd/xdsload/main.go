// Command xdsload plays a fleet of simulated xDS clients against the
// bridge's xDS serving path and against a baseline built the way most
// control planes use go-control-plane (one SnapshotCache snapshot rebuilt and
// set for every node on each change), and reports how fast and how cheaply a
// change reaches the fleet.
//
//	xdsload -scenario small|large|storm [-json report.json] [-plot latency.png]
//
// The serving side runs in a child process ("xdsload serve"), so its CPU
// and peak RSS are its own; the clients run in the harness process, many
// ADS streams per gRPC connection (-streams-per-conn). Changes are made
// in-process at the serving side (no source, no merge loop debounce): a
// change sets one endpoint's port in one service, which is how clients
// recognise it.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"
)

func main() {
	if os.Getenv(childEnv) == "1" || (len(os.Args) > 1 && os.Args[1] == "serve") {
		args := os.Args[1:]
		if len(args) > 0 && args[0] == "serve" {
			args = args[1:]
		}
		os.Exit(serveMain(args, os.Stdin, os.Stdout))
	}
	os.Exit(runMain(os.Args[1:], os.Stdout, os.Stderr))
}

// report is what -json writes.
type report struct {
	Scenario scenario           `json:"scenario"`
	Machine  machine            `json:"machine"`
	Started  time.Time          `json:"started"`
	CLABytes int                `json:"cla_bytes"` // one service's ClusterLoadAssignment, encoded
	Targets  []*targetReport    `json:"targets"`
	Ratios   map[string]float64 `json:"ratios,omitempty"` // bridge / baseline
	// Delta vs sotw within the bridge.
	SotwVsDelta map[string]float64 `json:"bridge_sotw_over_delta,omitempty"`
}

type machine struct {
	CPU    string `json:"cpu"`
	Cores  int    `json:"cores"`
	Memory string `json:"memory"`
	Go     string `json:"go"`
	OS     string `json:"os"`
}

func describeMachine() machine {
	m := machine{Cores: runtime.NumCPU(), Go: runtime.Version(), OS: runtime.GOOS + "/" + runtime.GOARCH}
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

func runMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("xdsload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	name := fs.String("scenario", "small", "small, large or storm (sizes below override it)")
	services := fs.Int("services", 0, "services")
	endpoints := fs.Int("endpoints", 0, "endpoints per service")
	clients := fs.Int("clients", 0, "simulated xDS clients")
	sotw := fs.Float64("sotw", -1, "share of clients on sotw ADS (grpc-go-like); the rest are delta ADS (Envoy-like)")
	sotwClusters := fs.Int("sotw-clusters", -1, "clusters each sotw client uses (0: all, wildcard CDS)")
	rate := fs.Float64("rate", -1, "changes per second")
	duration := fs.Duration("duration", -1, "change phase duration")
	baseRate := fs.Float64("baseline-rate", 0, "baseline change rate (default: -rate)")
	baseDuration := fs.Duration("baseline-duration", 0, "baseline change phase (default: -duration)")
	stormOn := fs.Bool("storm", false, "after the change phase, drop and reconnect every client")
	stormWindow := fs.Duration("storm-window", 0, "clients reconnect at random times within this window")
	spc := fs.Int("streams-per-conn", 16, "ADS streams per gRPC client connection")
	targets := fs.String("targets", "bridge,baseline", "targets to run, in order")
	inproc := fs.Bool("inprocess", false, "run the serving side in this process (CPU/RSS then include the clients)")
	timeout := fs.Duration("timeout", 5*time.Minute, "give up waiting for convergence after this")
	jsonOut := fs.String("json", "", "write the JSON report to this file")
	plotOut := fs.String("plot", "", "write a PNG of the latency distributions to this file")
	profDir := fs.String("cpuprofile-dir", "", "write a CPU profile of each serving process to this directory")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	sc, ok := scenarios[*name]
	if !ok {
		fmt.Fprintf(stderr, "xdsload: unknown scenario %q\n", *name)
		return 2
	}
	setInt := func(dst *int, v int) {
		if v > 0 {
			*dst = v
		}
	}
	setInt(&sc.Services, *services)
	setInt(&sc.Endpoints, *endpoints)
	setInt(&sc.Clients, *clients)
	if *sotw >= 0 {
		sc.SotwShare = *sotw
	}
	if *sotwClusters >= 0 {
		sc.SotwClusters = *sotwClusters
	}
	if *rate >= 0 {
		sc.Rate = *rate
	}
	if *duration >= 0 {
		sc.Duration = *duration
	}
	sc.BaselineRate, sc.BaselineDuration = *baseRate, *baseDuration
	sc.Storm = sc.Storm || *stormOn
	if *stormWindow > 0 {
		sc.StormWindow = *stormWindow
	}
	sc.StreamsPerConn, sc.InProcess, sc.Timeout = *spc, *inproc, *timeout
	sc.Targets = strings.Split(*targets, ",")
	sc.CPUProfileDir = *profDir
	rep, err := run(sc, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "xdsload:", err)
		return 1
	}
	printTable(stdout, rep)
	if *jsonOut != "" {
		if err := writeJSON(*jsonOut, rep); err != nil {
			fmt.Fprintln(stderr, "xdsload:", err)
			return 1
		}
	}
	if *plotOut != "" {
		if err := writePlot(*plotOut, rep); err != nil {
			fmt.Fprintln(stderr, "xdsload:", err)
			return 1
		}
	}
	return 0
}

func run(sc scenario, log io.Writer) (*report, error) {
	sc.defaults()
	if sc.Rate > 0 && sc.Rate*sc.Duration.Seconds() > maxChanges-1 {
		return nil, fmt.Errorf("at most %d changes per run", maxChanges-1)
	}
	rep := &report{Scenario: sc, Machine: describeMachine(), Started: time.Now().UTC(), CLABytes: claSize(sc.Endpoints)}
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

func (r *report) target(name string) *targetReport {
	for _, t := range r.Targets {
		if t.Target == name {
			return t
		}
	}
	return nil
}

func (t *targetReport) mode(name string) *modeReport {
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

func (r *report) ratios() {
	br, bl := r.target(targetBridge), r.target(targetBaseline)
	if br != nil && bl != nil {
		r.Ratios = map[string]float64{
			"cpu_per_change":              ratio(br.CPUPerChange, bl.CPUPerChange),
			"bytes_per_change_per_client": ratio(br.BytesPerChangePerClient, bl.BytesPerChangePerClient),
			"ack_latency_p50":             ratio(br.Ack.P50, bl.Ack.P50),
			"ack_latency_p99":             ratio(br.Ack.P99, bl.Ack.P99),
		}
		for _, m := range []string{"delta", "sotw"} {
			a, b := br.mode(m), bl.mode(m)
			if a != nil && b != nil {
				r.Ratios["bytes_per_change_per_client_"+m] = ratio(a.BytesPerChangePerClient, b.BytesPerChangePerClient)
			}
		}
	}
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

func writeJSON(path string, rep *report) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func printTable(w io.Writer, rep *report) {
	sc := rep.Scenario
	fmt.Fprintf(w, "scenario %s: %d services × %d endpoints, %d clients (%.0f%% sotw, %d clusters each), %.0f changes/s for %s; %s, %d cores\n",
		sc.Name, sc.Services, sc.Endpoints, sc.Clients, sc.SotwShare*100, sc.SotwClusters, sc.Rate, sc.Duration, rep.Machine.CPU, rep.Machine.Cores)
	fmt.Fprintf(w, "one ClusterLoadAssignment: %d bytes\n\n", rep.CLABytes)
	fmt.Fprintf(w, "%-9s %-6s %7s %9s %9s %9s %9s %9s %12s %9s\n",
		"target", "mode", "clients", "ack p50", "ack p90", "ack p99", "ack max", "missing", "B/chg/client", "resp/chg")
	for _, t := range rep.Targets {
		rows := append([]modeReport{{Mode: "all", Clients: sc.Clients, Ack: t.Ack, BytesPerChangePerClient: t.BytesPerChangePerClient, ResponsesPerChangePerClient: t.RespPerChangePerClient}}, t.Modes...)
		for _, m := range rows {
			fmt.Fprintf(w, "%-9s %-6s %7d %7.1fms %7.1fms %7.1fms %7.1fms %9d %12.1f %9.3f\n",
				t.Target, m.Mode, m.Clients, m.Ack.P50, m.Ack.P90, m.Ack.P99, m.Ack.Max, m.Ack.Missing, m.BytesPerChangePerClient, m.ResponsesPerChangePerClient)
		}
	}
	fmt.Fprintf(w, "\n%-9s %8s %8s %8s %9s %10s %10s %9s %10s %10s %9s %9s\n",
		"target", "init s", "changes", "batches", "cpu s", "cpu/chg", "peak RSS", "gorout.", "enc/ver", "fleet p50", "fleet p99", "conv.")
	for _, t := range rep.Targets {
		fmt.Fprintf(w, "%-9s %8.2f %8d %8d %9.2f %8.2fms %8.0fMB %9d %10.2f %8.1fms %7.1fms %9v\n",
			t.Target, t.InitS, t.Changes, t.Batches, t.CPUSeconds, t.CPUPerChange, float64(t.PeakRSS)/(1<<20), t.Goroutines, t.EncPerVer, t.Fleet.P50, t.Fleet.P99, t.Converged)
	}
	for _, t := range rep.Targets {
		if s := t.Storm; s != nil {
			fmt.Fprintf(w, "%-9s storm: %d clients reconnect within %.1fs: converged %v in %.2fs, resent %v of the initial bytes, %.2f cpu s\n",
				t.Target, s.Clients, s.Window, s.Converged, s.ConvergedS, s.ResentFraction, s.CPUSeconds)
		}
		for _, e := range t.Errors {
			fmt.Fprintf(w, "%-9s error: %s\n", t.Target, e)
		}
	}
	if len(rep.Ratios) > 0 {
		fmt.Fprintf(w, "\nbridge / baseline: %s\n", fmtMap(rep.Ratios))
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
	sortStrings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %.3g", k, m[k])
	}
	return b.String()
}
