// Command xdsload plays a fleet of simulated xDS clients against the
// bridge's xDS serving path and against a baseline built the way most
// control planes use go-control-plane (SnapshotCache; and LinearCache,
// -targets bridge,snapshot,linear), and reports how fast and how cheaply
// a change reaches the fleet (internal/load says how it measures).
//
//	xdsload -scenario small|large|storm [-json report.json] [-plot latency.png]
//	xdsload serve ...   (the serving side, run by xdsload itself)
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
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
	targets := fs.String("targets", load.TargetBridge+","+load.TargetBaseline, "targets to run, in order: bridge, baseline (or snapshot: SnapshotCache), linear (LinearCache)")
	inproc := fs.Bool("inprocess", false, "run the serving side in this process (CPU/RSS then include the clients)")
	timeout := fs.Duration("timeout", 5*time.Minute, "give up waiting for convergence after this")
	jsonOut := fs.String("json", "", "write the JSON report to this file")
	plotOut := fs.String("plot", "", "write a PNG of the latency distributions to this file")
	profDir := fs.String("cpuprofile-dir", "", "write a CPU profile of each serving process to this directory")
	if err := fs.Parse(args); err != nil {
		return 2
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
