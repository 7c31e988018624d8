package load

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

// TestLinearTargetSmoke plays the smoke scenario against the bridge and
// both baselines, the SnapshotCache named by its alias "snapshot", in this
// process and in a child process: every client of every target converges,
// the LinearCache target encodes each resource version once, resends
// nothing to resuming delta clients, updates only the changed resources
// (its sotw clients get no more per change than the bridge's), and the
// report carries the ratios against both baselines.
func TestLinearTargetSmoke(t *testing.T) {
	eachServingSide(t, func(t *testing.T, sc Scenario) {
		sc.Targets = []string{"bridge", "snapshot", "linear"}
		rep, err := Run(sc, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, tr := range rep.Targets {
			got = append(got, tr.Target)
		}
		if strings.Join(got, ",") != "bridge,baseline,linear" {
			t.Fatalf("targets %v, want bridge, baseline, linear", got)
		}
		for _, tr := range rep.Targets {
			t.Logf("%s: %d changes, %d applied in %d batches, %d (change, client) pairs, %d missing, ack p50 %.1f ms p99 %.1f ms, %.2f encodings per version, %.3f ms CPU per change",
				tr.Target, tr.Changes, tr.Applied, tr.Batches, tr.Ack.N, tr.Ack.Missing, tr.Ack.P50, tr.Ack.P99, tr.EncPerVer, tr.CPUPerChange)
			checkTargetRun(t, tr)
			if tr.Storm == nil || !tr.Storm.Converged {
				t.Errorf("%s: storm %+v", tr.Target, tr.Storm)
			}
		}
		br, li := rep.target(TargetBridge), rep.target(TargetLinear)
		if li.EncPerVer != 1 {
			t.Errorf("linear: %d encodings for %d resource versions, want one each", li.Encodings, li.Versions)
		}
		if f := li.Storm.ResentFraction["delta"]; f > 0.05 {
			t.Errorf("linear: delta clients were resent %.2f of their initial bytes", f)
		}
		bs, ls := br.mode("sotw"), li.mode("sotw")
		t.Logf("sotw bytes per relevant change: bridge %.1f, linear %.1f; delta bytes per change per client: bridge %.1f, linear %.1f",
			bs.BytesPerRelevantChange, ls.BytesPerRelevantChange, br.mode("delta").BytesPerChangePerClient, li.mode("delta").BytesPerChangePerClient)
		if ls.BytesPerRelevantChange > 1.5*bs.BytesPerRelevantChange {
			t.Errorf("linear: sotw clients got %.1f bytes per relevant change, the bridge's %.1f: more than the changed resources",
				ls.BytesPerRelevantChange, bs.BytesPerRelevantChange)
		}
		back := reportRoundTrip(t, rep)
		if back.Ratios["cpu_per_change"] == 0 || back.RatiosLinear["cpu_per_change"] == 0 || back.RatiosLinear["bytes_per_change_per_client_sotw"] == 0 {
			t.Errorf("report JSON: ratios %v, ratios_linear %v", back.Ratios, back.RatiosLinear)
		}
		var out bytes.Buffer
		PrintTable(&out, rep)
		if !strings.Contains(out.String(), "\nbridge / linear: ") || !strings.Contains(out.String(), "\nlinear    sotw ") {
			t.Errorf("table without the linear target:\n%s", out.String())
		}
	})
}
