// Command xdsload plays a fleet of simulated xDS clients against the
// bridge's xDS serving path and against a baseline built the way most
// control planes use go-control-plane (SnapshotCache; and LinearCache,
// -targets bridge,snapshot,linear), or against a floor (-targets
// bridge,floor: the least a gRPC server does for the same clients, a
// lower bound and no control plane), and reports how fast and how
// cheaply a change reaches the fleet (internal/load says how it
// measures).
//
//	xdsload -scenario small|large|storm [-json report.json] [-plot latency.png]
//	xdsload curves -sweep clients=250,500,1000,2000 -services 5000 -out DIR
//	xdsload curves -sweep services=1000,5000,20000 -clients 500 -out DIR
//	xdsload serve ...   (the serving side, run by xdsload itself)
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/xdsbridge/xdsbridge/internal/load"
)

func main() {
	if os.Getenv(load.ChildEnv) == "1" || (len(os.Args) > 1 && os.Args[1] == "serve") {
		args := os.Args[1:]
		if len(args) > 0 && args[0] == "serve" {
			args = args[1:]
		}
		os.Exit(load.ServeMain(args, os.Stdin, os.Stdout))
	}
	os.Exit(runMain(os.Args[1:], os.Stdout, os.Stderr))
}

func runMain(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "curves" {
		return curvesMain(args[1:], stdout, stderr)
	}
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
	baseRate := fs.Float64("baseline-rate", 0, "baseline and linear change rate (default: -rate)")
	baseDuration := fs.Duration("baseline-duration", 0, "baseline and linear change phase (default: -duration)")
	stormOn := fs.Bool("storm", false, "after the change phase, drop and reconnect every client")
	stormWindow := fs.Duration("storm-window", 0, "clients reconnect at random times within this window")
	spc := fs.Int("streams-per-conn", 16, "ADS streams per gRPC client connection")
	window := fs.Int("delta-window", load.EnvoyWindow, windowUsage)
	targets := fs.String("targets", load.TargetBridge+","+load.TargetBaseline, "targets to run, in order: bridge, baseline (or snapshot: SnapshotCache), linear (LinearCache), floor (the least a gRPC server does for these clients: a lower bound)")
	inproc := fs.Bool("inprocess", false, "run the serving side in this process (CPU/RSS then include the clients)")
	timeout := fs.Duration("timeout", 5*time.Minute, "give up waiting for convergence after this")
	jsonOut := fs.String("json", "", "write the JSON report to this file")
	plotOut := fs.String("plot", "", "write a PNG of the latency distributions to this file")
	profDir := fs.String("cpuprofile-dir", "", "write CPU profiles of each serving process to this directory, one per phase: SCENARIO-TARGET-{init,change,storm}.cpu.pprof")
	harnessProf := fs.String("harness-cpuprofile", "", "write a CPU profile of this process (the simulated clients) over the whole run to this file")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *harnessProf != "" {
		f, err := os.Create(*harnessProf)
		if err != nil {
			fmt.Fprintln(stderr, "xdsload:", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(stderr, "xdsload:", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	sc, ok := load.Scenarios[*name]
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
	sc.DeltaWindow = *window
	sc.Targets = strings.Split(*targets, ",")
	sc.CPUProfileDir = *profDir
	rep, err := load.Run(sc, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "xdsload:", err)
		return 1
	}
	load.PrintTable(stdout, rep)
	if *jsonOut != "" {
		if err := load.WriteJSON(*jsonOut, rep); err != nil {
			fmt.Fprintln(stderr, "xdsload:", err)
			return 1
		}
	}
	if *plotOut != "" {
		if err := load.WritePlot(*plotOut, rep); err != nil {
			fmt.Fprintln(stderr, "xdsload:", err)
			return 1
		}
	}
	return 0
}

// windowUsage describes -delta-window.
const windowUsage = "HTTP/2 flow-control window (bytes) of each stream and connection of the delta clients: Envoy's default, 256 MiB; 0: grpc-go's default (64 KiB, grown by its bandwidth-delay estimate), which the sotw clients use"

// curvesMain runs "xdsload curves": the large scenario's shape once per
// point of a sweep of clients or services, and writes the curve's JSON,
// one PNG per figure, and a Markdown table to stdout.
func curvesMain(args []string, stdout, stderr io.Writer) int {
	def := load.CurveScenario()
	fs := flag.NewFlagSet("xdsload curves", flag.ContinueOnError)
	fs.SetOutput(stderr)
	sweep := fs.String("sweep", "", "the swept size and its points: clients=250,500,1000,2000 or services=1000,5000,20000")
	services := fs.Int("services", def.Services, "services (when clients are swept)")
	clients := fs.Int("clients", 500, "simulated xDS clients (when services are swept)")
	endpoints := fs.Int("endpoints", def.Endpoints, "endpoints per service")
	sotw := fs.Float64("sotw", def.SotwShare, "share of clients on sotw ADS")
	sotwClusters := fs.Int("sotw-clusters", def.SotwClusters, "clusters each sotw client uses (0: all)")
	rate := fs.Float64("rate", def.Rate, "changes per second")
	duration := fs.Duration("duration", def.Duration, "change phase duration per point")
	spc := fs.Int("streams-per-conn", 16, "ADS streams per gRPC client connection")
	window := fs.Int("delta-window", def.DeltaWindow, windowUsage)
	targets := fs.String("targets", load.TargetBridge, "targets to run at each point: bridge, baseline (snapshot), linear, floor")
	timeout := fs.Duration("timeout", 5*time.Minute, "give up waiting for convergence after this")
	out := fs.String("out", "", "write curve-<param>.json and the PNGs to this directory")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *sweep == "" || *out == "" {
		fmt.Fprintln(stderr, "xdsload curves: -sweep and -out are required")
		return 2
	}
	param, values, err := load.ParseSweep(*sweep)
	if err != nil {
		fmt.Fprintln(stderr, "xdsload curves:", err)
		return 2
	}
	sc := def
	sc.Services, sc.Clients, sc.Endpoints = *services, *clients, *endpoints
	sc.SotwShare, sc.SotwClusters, sc.Rate, sc.Duration = *sotw, *sotwClusters, *rate, *duration
	sc.StreamsPerConn, sc.Timeout, sc.DeltaWindow = *spc, *timeout, *window
	sc.Targets = strings.Split(*targets, ",")
	c, err := load.RunCurve(sc, param, values, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "xdsload curves:", err)
		return 1
	}
	if err := load.WriteCurve(*out, c); err != nil {
		fmt.Fprintln(stderr, "xdsload curves:", err)
		return 1
	}
	load.PrintCurveTable(stdout, c)
	for _, p := range c.Points {
		if !p.Converged || p.Missing > 0 || len(p.Errors) > 0 {
			fmt.Fprintf(stderr, "xdsload curves: %s=%d %s: converged %v, %d pairs missing, errors %v\n", param, p.X, p.Target, p.Converged, p.Missing, p.Errors)
			return 1
		}
	}
	return 0
}
