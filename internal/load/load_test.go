package load

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The serving side of the child-process mode is this test binary itself,
// re-executed with childEnv set.
func TestMain(m *testing.M) {
	if os.Getenv(ChildEnv) == "1" {
		args := os.Args[1:]
		if len(args) > 0 && args[0] == "serve" {
			args = args[1:]
		}
		os.Exit(ServeMain(args, os.Stdin, os.Stdout))
	}
	os.Exit(m.Run())
}

func smallScenario(inProcess bool) Scenario {
	return Scenario{
		Name: "smoke", Services: 20, Endpoints: 5, Clients: 20,
		SotwShare: 0.25, SotwClusters: 4,
		Rate: 20, Duration: 500 * time.Millisecond,
		Storm: true, StormWindow: 200 * time.Millisecond,
		StreamsPerConn: 8, InProcess: inProcess, Timeout: 30 * time.Second,
	}
}

// eachServingSide runs f as a subtest on the small scenario, its serving
// side in this process ("inprocess") and in a child process ("child").
func eachServingSide(t *testing.T, f func(t *testing.T, sc Scenario)) {
	for _, inProcess := range []bool{true, false} {
		name := "child"
		if inProcess {
			name = "inprocess"
		}
		t.Run(name, func(t *testing.T) { f(t, smallScenario(inProcess)) })
	}
}

// TestSmallScenarioSmoke checks that the harness works, not how fast
// anything is: every client of both targets converges to the final state,
// each resource version is encoded once, and the report is well formed.
func TestSmallScenarioSmoke(t *testing.T) {
	eachServingSide(t, func(t *testing.T, sc Scenario) {
		profDir := t.TempDir()
		if !sc.InProcess {
			sc.CPUProfileDir = profDir
		}
		rep, err := Run(sc, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Targets) != 2 {
			t.Fatalf("targets: %d, want 2", len(rep.Targets))
		}
		for _, tr := range rep.Targets {
			checkTargetRun(t, tr)
			if tr.Storm == nil || !tr.Storm.Converged || tr.Storm.PeakRSSBefore <= 0 || tr.Storm.PeakRSS < tr.Storm.PeakRSSBefore {
				t.Errorf("%s: storm %+v", tr.Target, tr.Storm)
			}
			// Every (change, following client) pair is reached once.
			if tr.Responses <= 0 || tr.CPUPerResponse <= 0 {
				t.Errorf("%s: %d responses in the change phase, %.2f µs each", tr.Target, tr.Responses, tr.CPUPerResponse)
			}
			if tr.Reached != tr.Ack.N+tr.Ack.Missing || tr.CPUPerReach <= 0 {
				t.Errorf("%s: %d pairs reached (%d observed, %d missing), %.2f µs each", tr.Target, tr.Reached, tr.Ack.N, tr.Ack.Missing, tr.CPUPerReach)
			}
			// The harness's CPU is counted apart only when the server
			// runs in a process of its own; the cores busy are both,
			// over the phase (the same rounded figures, to the rounding of
			// the quotient).
			busy := (tr.CPUSeconds + tr.HarnessCPUSeconds) / tr.ChangePhase
			if harness := tr.HarnessCPUSeconds > 0; harness == sc.InProcess || tr.CoresBusy <= 0 ||
				math.Abs(tr.CoresBusy-busy) > 0.001 || tr.CoresBusy > 1.1*float64(rep.Machine.Cores) {
				t.Errorf("%s: change phase of %.3f s: %.3f CPU s serving, harness %.3f, %.3f cores busy of %d", tr.Target, tr.ChangePhase,
					tr.CPUSeconds, tr.HarnessCPUSeconds, tr.CoresBusy, rep.Machine.Cores)
			}
			if tr.InitCPUSeconds <= 0 || tr.InitCPUPerClientR <= 0 {
				t.Errorf("%s: initial sync: %.3f CPU s, %.3f µs per (client × resource)", tr.Target, tr.InitCPUSeconds, tr.InitCPUPerClientR)
			}
			if !sc.InProcess {
				for _, phase := range []string{"init", "change", "storm"} {
					p := filepath.Join(profDir, fmt.Sprintf("%s-%s-%s.cpu.pprof", sc.Name, tr.Target, phase))
					if st, err := os.Stat(p); err != nil || st.Size() == 0 {
						t.Errorf("%s: %s profile: %v", tr.Target, phase, err)
					}
				}
			}
			if tr.Target == TargetBridge {
				if tr.EncPerVer != 1 {
					t.Errorf("bridge: %d encodings for %d resource versions, want one each", tr.Encodings, tr.Versions)
				}
				// Delta clients that resume with matching versions
				// get (almost) nothing again.
				if f := tr.Storm.ResentFraction["delta"]; f > 0.05 {
					t.Errorf("bridge: delta clients were resent %.2f of their initial bytes", f)
				}
				// Every client is answered on its reconnected
				// streams, before the change is made.
				if s := tr.Storm; s.Resynced != sc.Clients || s.ResyncS <= 0 || s.ResyncS > s.ChangeAtS || s.ConvergedS != s.ResyncS ||
					s.ChangeS <= 0 || s.ChangeAckedS < s.ChangeAtS || len(s.Samples) == 0 || s.ServerCPUToResync <= 0 || s.CPUSeconds+0.002 < s.ServerCPUToResync {
					t.Errorf("bridge: storm %+v", s)
				}
			}
		}
		dir := t.TempDir()
		jp := filepath.Join(dir, "report.json")
		if err := WriteJSON(jp, rep); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(jp)
		if err != nil {
			t.Fatal(err)
		}
		var back Report
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("report JSON: %v", err)
		}
		if len(back.Targets) != 2 || back.Ratios["cpu_per_change"] == 0 || back.Ratios["storm_cpu_seconds"] == 0 {
			t.Errorf("report JSON round trip: %d targets, ratios %v", len(back.Targets), back.Ratios)
		}
		pp := filepath.Join(dir, "latency.png")
		if err := WritePlot(pp, rep); err != nil {
			t.Fatal(err)
		}
		if st, err := os.Stat(pp); err != nil || st.Size() == 0 {
			t.Errorf("plot: %v", err)
		}
		var table strings.Builder
		PrintTable(&table, rep)
		// A line per target under the table, naming the harness's CPU
		// apart when the server has a process of its own.
		for _, tr := range rep.Targets {
			want := fmt.Sprintf("%-9s change phase: %.2f of %d cores busy (%.2f cpu s serving, %.2f the harness,", tr.Target, tr.CoresBusy, rep.Machine.Cores, tr.CPUSeconds, tr.HarnessCPUSeconds)
			if sc.InProcess {
				want = fmt.Sprintf("%-9s change phase: %.2f of %d cores busy (%.2f cpu s serving and the harness, in one process,", tr.Target, tr.CoresBusy, rep.Machine.Cores, tr.CPUSeconds)
			}
			if !strings.Contains(table.String(), want) {
				t.Errorf("the table has no line %q:\n%s", want, table.String())
			}
		}
	})
}

// checkTargetRun fails t unless tr converged without errors, applied
// every change made, saw every (change, client) pair and ran both modes.
func checkTargetRun(t *testing.T, tr *TargetReport) {
	t.Helper()
	if !tr.Converged || len(tr.Errors) > 0 {
		t.Errorf("%s: converged %v, errors %v", tr.Target, tr.Converged, tr.Errors)
	}
	if tr.Changes == 0 || tr.Applied != int64(tr.Changes) {
		t.Errorf("%s: %d changes made, %d applied", tr.Target, tr.Changes, tr.Applied)
	}
	if tr.Ack.Missing != 0 || tr.Ack.N == 0 {
		t.Errorf("%s: %d (change, client) pairs observed, %d missing", tr.Target, tr.Ack.N, tr.Ack.Missing)
	}
	if len(tr.Modes) != 2 {
		t.Errorf("%s: modes %v, want delta and sotw", tr.Target, tr.Modes)
	}
}

// reportRoundTrip is rep written as JSON and read back.
func reportRoundTrip(t *testing.T, rep *Report) Report {
	t.Helper()
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	return back
}
