package load

import (
	"bytes"
	"encoding/json"
	"image"
	_ "image/png"
	"io"
	"math"
	"os"
	"strings"
	"testing"
	"time"
)

// TestLeastSquares: exact on a line; known data (y = 2x + 1 with
// residuals ±1, slope 2, intercept 1 — computed by hand); errors on too
// few or identical x.
func TestLeastSquares(t *testing.T) {
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	f, err := LeastSquares([]float64{250, 500, 1000, 2000}, []float64{0.31*250 + 120, 0.31*500 + 120, 0.31*1000 + 120, 0.31*2000 + 120})
	if err != nil || !near(f.Slope, 0.31) || !near(f.Intercept, 120) || !near(f.R2, 1) || f.N != 4 {
		t.Errorf("exact line: %+v, %v; want slope 0.31, intercept 120, R² 1, 4 points", f, err)
	}
	// x 0..3, y = 2x+1 + (1,-1,-1,1): mean x 1.5, mean y 4; Sxy = 10,
	// Sxx = 5 → slope 2, intercept 1; SSR 4, Syy 24 → R² 5/6.
	f, err = LeastSquares([]float64{0, 1, 2, 3}, []float64{2, 2, 4, 8})
	if err != nil || !near(f.Slope, 2) || !near(f.Intercept, 1) || !near(f.R2, 5.0/6) {
		t.Errorf("known data: %+v, %v; want slope 2, intercept 1, R² 5/6", f, err)
	}
	if _, err := LeastSquares([]float64{1}, []float64{1}); err == nil {
		t.Error("one point: no error")
	}
	if _, err := LeastSquares([]float64{3, 3}, []float64{1, 2}); err == nil {
		t.Error("identical x: no error")
	}
	if _, err := LeastSquares([]float64{1, 2}, []float64{1}); err == nil {
		t.Error("mismatched lengths: no error")
	}
}

// TestParseSweep: the -sweep flag.
func TestParseSweep(t *testing.T) {
	p, v, err := ParseSweep("clients=250,500,1000,2000")
	if err != nil || p != SweepClients || len(v) != 4 || v[3] != 2000 {
		t.Errorf("clients: %q %v %v", p, v, err)
	}
	for _, bad := range []string{"clients=5", "nodes=1,2", "services=2,1", "services=1,x", "services"} {
		if _, _, err := ParseSweep(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestCurvesSmoke runs both sweeps at tiny sizes, each point's serving
// side in its own child process: every point converged with no (change,
// client) pair missing, the JSON and every PNG exist and decode, each fit
// has one point per sweep value, and the Markdown table has a row per
// point and a growth row per figure.
func TestCurvesSmoke(t *testing.T) {
	for _, tc := range []struct {
		param  string
		values []int
	}{
		{SweepClients, []int{4, 8}},
		{SweepServices, []int{10, 20}},
	} {
		t.Run(tc.param, func(t *testing.T) {
			sc := CurveScenario()
			sc.Services, sc.Clients, sc.Endpoints = 20, 4, 5
			sc.SotwShare, sc.SotwClusters = 0.25, 4
			sc.Rate, sc.Duration = 20, time.Second
			sc.StreamsPerConn, sc.Timeout = 4, 30*time.Second
			c, err := RunCurve(sc, tc.param, tc.values, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if len(c.Points) != len(tc.values) {
				t.Fatalf("%d points, want %d", len(c.Points), len(tc.values))
			}
			for i, p := range c.Points {
				t.Logf("%s=%d %s: %d changes, %d pairs missing, ack p50 %.1f ms p99 %.1f ms, %.3f ms CPU per change, peak RSS %.1f MiB, initial sync %.2f s",
					tc.param, p.X, p.Target, p.Changes, p.Missing, p.AckP50, p.AckP99, p.CPUPerChg, p.PeakRSSMB, p.InitS)
				if p.X != tc.values[i] || p.Target != TargetBridge {
					t.Errorf("point %d: %s=%d target %s, want %d bridge", i, tc.param, p.X, p.Target, tc.values[i])
				}
				if got := map[string]int{SweepClients: p.Clients, SweepServices: p.Services}[tc.param]; got != p.X {
					t.Errorf("point %d: ran with %s %d, want %d", i, tc.param, got, p.X)
				}
				if !p.Converged || p.Missing != 0 || len(p.Errors) > 0 || p.Changes == 0 {
					t.Errorf("point %d: converged %v, %d changes, %d pairs missing, errors %v", i, p.Converged, p.Changes, p.Missing, p.Errors)
				}
				if p.PeakRSSMB <= 0 || p.InitS <= 0 || p.AckP99 <= 0 || p.RSSPerClientMB <= 0 {
					t.Errorf("point %d: empty figures %+v", i, p)
				}
			}
			if tc.param == SweepServices {
				p0, p1 := c.Points[0], c.Points[1]
				want := (p1.PeakRSSMB - p0.PeakRSSMB) / float64(p1.X-p0.X)
				if p0.RSSPerServiceMB != 0 || math.Abs(p1.RSSPerServiceMB-want) > 1e-3 {
					t.Errorf("RSS per service: %g at the smallest point (want 0), %g at %d (want %g)", p0.RSSPerServiceMB, p1.RSSPerServiceMB, p1.X, want)
				}
			}
			dir := t.TempDir()
			if err := WriteCurve(dir, c); err != nil {
				t.Fatal(err)
			}
			files := CurveFiles(dir, tc.param)
			if len(files) != 5 {
				t.Errorf("files %v, want the JSON and 4 PNGs", files)
			}
			b, err := os.ReadFile(files[0])
			if err != nil {
				t.Fatal(err)
			}
			var back Curve
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatalf("curve JSON: %v", err)
			}
			if back.Param != tc.param || len(back.Points) != len(tc.values) || len(back.Fits[TargetBridge]) != len(curveMetrics) {
				t.Errorf("curve JSON: param %q, %d points, fits %v", back.Param, len(back.Points), back.Fits)
			}
			for _, m := range curveMetrics {
				if f := back.Fits[TargetBridge][m]; f.N != len(tc.values) {
					t.Errorf("fit %s: %d points, want %d", m, f.N, len(tc.values))
				}
			}
			for _, f := range files[1:] {
				fh, err := os.Open(f)
				if err != nil {
					t.Error(err)
					continue
				}
				img, format, err := image.Decode(fh)
				fh.Close()
				if err != nil || format != "png" || img.Bounds().Dx() < 100 {
					t.Errorf("%s: %v, format %q", f, err, format)
				}
			}
			var out bytes.Buffer
			PrintCurveTable(&out, c)
			rows := strings.Count(out.String(), "\n| bridge | ")
			if rows != len(tc.values)+len(curveMetrics) {
				t.Errorf("table: %d bridge rows, want %d:\n%s", rows, len(tc.values)+len(curveMetrics), out.String())
			}
			per := map[string]string{SweepClients: " per client ", SweepServices: " per service "}[tc.param]
			if !strings.Contains(out.String(), per) {
				t.Errorf("table without growth %q:\n%s", per, out.String())
			}
		})
	}
}
