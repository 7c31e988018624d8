// Scaling curves ("xdsload curves"): the scenario played once per point of
// a sweep of clients or services, each target in its own serving process
// per point (so its peak RSS is that run's), and how each figure grows
// with the swept size (a least-squares line per target and figure).

package load

import (
	"encoding/json"
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// The swept sizes.
const (
	SweepClients  = "clients"
	SweepServices = "services"
)

// CurveScenario is the shape every point of a curve runs: the large
// scenario's (10 endpoints per service, 20 % sotw clients on 10 clusters
// each, 100 changes/s), a shorter change phase, the bridge only.
func CurveScenario() Scenario {
	sc := Scenarios["large"]
	sc.Name = "curve"
	sc.Duration = 20 * time.Second
	sc.Targets = []string{TargetBridge}
	return sc
}

// ParseSweep parses "clients=250,500,1000" or "services=1000,5000".
func ParseSweep(s string) (param string, values []int, err error) {
	param, list, ok := strings.Cut(s, "=")
	if !ok || (param != SweepClients && param != SweepServices) {
		return "", nil, fmt.Errorf("sweep %q: want clients=N,N,... or services=N,N,...", s)
	}
	for f := range strings.SplitSeq(list, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v <= 0 {
			return "", nil, fmt.Errorf("sweep %q: %q is not a positive integer", s, f)
		}
		if len(values) > 0 && v <= values[len(values)-1] {
			return "", nil, fmt.Errorf("sweep %q: values must increase", s)
		}
		values = append(values, v)
	}
	if len(values) < 2 {
		return "", nil, fmt.Errorf("sweep %q: at least two points", s)
	}
	return param, values, nil
}

// Fit is a least-squares line y = Slope·x + Intercept over N points.
type Fit struct {
	Slope     float64 `json:"slope"`
	Intercept float64 `json:"intercept"`
	R2        float64 `json:"r2"`
	N         int     `json:"n"`
}

// At is the fitted value at x.
func (f Fit) At(x float64) float64 { return f.Slope*x + f.Intercept }

// LeastSquares fits y = a·x + b to the points (ordinary least squares).
// It needs at least two distinct x.
func LeastSquares(xs, ys []float64) (Fit, error) {
	if len(xs) != len(ys) {
		return Fit{}, fmt.Errorf("least squares: %d x, %d y", len(xs), len(ys))
	}
	n := float64(len(xs))
	if len(xs) < 2 {
		return Fit{}, errors.New("least squares: fewer than two points")
	}
	var mx, my float64
	for i := range xs {
		mx += xs[i]
		my += ys[i]
	}
	mx, my = mx/n, my/n
	var sxx, sxy, syy float64
	for i := range xs {
		dx, dy := xs[i]-mx, ys[i]-my
		sxx += dx * dx
		sxy += dx * dy
		syy += dy * dy
	}
	if sxx == 0 {
		return Fit{}, errors.New("least squares: every x is the same")
	}
	f := Fit{Slope: sxy / sxx, N: len(xs), R2: 1}
	f.Intercept = my - f.Slope*mx
	if syy > 0 {
		var ssr float64
		for i := range xs {
			r := ys[i] - f.At(xs[i])
			ssr += r * r
		}
		f.R2 = 1 - ssr/syy
	}
	return f, nil
}

// CurvePoint is one target's run at one point of the sweep.
type CurvePoint struct {
	Target    string  `json:"target"`
	X         int     `json:"x"` // the swept size
	Services  int     `json:"services"`
	Clients   int     `json:"clients"`
	Converged bool    `json:"converged"`
	Changes   int     `json:"changes"`
	Missing   int     `json:"missing"` // (change, client) pairs never observed
	AckP50    float64 `json:"ack_p50_ms"`
	AckP99    float64 `json:"ack_p99_ms"`
	FleetP99  float64 `json:"fleet_p99_ms"`
	CPUPerChg float64 `json:"cpu_ms_per_change"`
	// The RSS figures (…MB, "_mb") are MiB: bytes / 2^20.
	PeakRSSMB float64 `json:"peak_rss_mb"`
	// RSSPerClientMB is peak RSS over clients (the average, fixed cost
	// included; the fit's slope is the marginal cost).
	RSSPerClientMB float64 `json:"rss_per_client_mb"`
	// RSSPerServiceMB (services sweep): (RSS − RSS at the smallest point)
	// over (services − the smallest point's); 0 at the smallest point.
	RSSPerServiceMB float64  `json:"rss_per_service_mb,omitempty"`
	InitS           float64  `json:"initial_sync_s"`
	Errors          []string `json:"errors,omitempty"`
}

// The fitted figures.
const (
	MetricAckP50 = "ack_p50_ms"
	MetricAckP99 = "ack_p99_ms"
	MetricCPU    = "cpu_ms_per_change"
	MetricRSS    = "peak_rss_mb"
	MetricInit   = "initial_sync_s"
)

var curveMetrics = []string{MetricAckP50, MetricAckP99, MetricCPU, MetricRSS, MetricInit}

func (p CurvePoint) metric(m string) float64 {
	switch m {
	case MetricAckP50:
		return p.AckP50
	case MetricAckP99:
		return p.AckP99
	case MetricCPU:
		return p.CPUPerChg
	case MetricRSS:
		return p.PeakRSSMB
	case MetricInit:
		return p.InitS
	}
	return math.NaN()
}

// Curve is what curve-<param>.json holds.
type Curve struct {
	Param    string       `json:"param"` // clients or services
	Values   []int        `json:"values"`
	Scenario Scenario     `json:"scenario"` // the shape; the swept size varies
	Machine  Machine      `json:"machine"`
	Started  time.Time    `json:"started"`
	Points   []CurvePoint `json:"points"`
	// Fits: target → metric → the line over that target's points.
	Fits map[string]map[string]Fit `json:"fits"`
}

// RunCurve plays sc once per value of param (each target of sc in its own
// serving process per point) and fits every figure.
func RunCurve(sc Scenario, param string, values []int, log io.Writer) (*Curve, error) {
	if param != SweepClients && param != SweepServices {
		return nil, fmt.Errorf("curve: unknown parameter %q", param)
	}
	if len(values) < 2 {
		return nil, errors.New("curve: at least two points")
	}
	sc.Storm = false
	sc.defaults()
	c := &Curve{Param: param, Values: values, Scenario: sc, Machine: describeMachine(), Started: time.Now().UTC()}
	base := map[string]CurvePoint{}
	for _, v := range values {
		p := sc
		p.Name = fmt.Sprintf("%s-%s-%d", sc.Name, param, v)
		if param == SweepClients {
			p.Clients = v
		} else {
			p.Services = v
		}
		rep, err := Run(p, log)
		if err != nil {
			return nil, fmt.Errorf("curve %s=%d: %w", param, v, err)
		}
		for _, t := range rep.Targets {
			cp := CurvePoint{
				Target: t.Target, X: v, Services: p.Services, Clients: p.Clients,
				Converged: t.Converged, Changes: t.Changes, Missing: t.Ack.Missing,
				AckP50: t.Ack.P50, AckP99: t.Ack.P99, FleetP99: t.Fleet.P99,
				CPUPerChg: t.CPUPerChange, PeakRSSMB: round3(float64(t.PeakRSS) / (1 << 20)),
				InitS: t.InitS, Errors: t.Errors,
			}
			if p.Clients > 0 {
				cp.RSSPerClientMB = round3(cp.PeakRSSMB / float64(p.Clients))
			}
			if param == SweepServices {
				if b, ok := base[t.Target]; ok && v > b.X {
					cp.RSSPerServiceMB = round3(1000*(cp.PeakRSSMB-b.PeakRSSMB)/float64(v-b.X)) / 1000
				} else {
					base[t.Target] = cp
				}
			}
			fmt.Fprintf(log, "xdsload: curve %s=%d %s: converged %v, ack p50 %.1f ms p99 %.1f ms, %.3f ms CPU per change, peak RSS %.1f MiB, initial sync %.2f s\n",
				param, v, t.Target, cp.Converged, cp.AckP50, cp.AckP99, cp.CPUPerChg, cp.PeakRSSMB, cp.InitS)
			c.Points = append(c.Points, cp)
		}
	}
	if err := c.fit(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Curve) targets() []string {
	var out []string
	seen := map[string]bool{}
	for _, p := range c.Points {
		if !seen[p.Target] {
			seen[p.Target] = true
			out = append(out, p.Target)
		}
	}
	return out
}

func (c *Curve) points(target string) []CurvePoint {
	var out []CurvePoint
	for _, p := range c.Points {
		if p.Target == target {
			out = append(out, p)
		}
	}
	return out
}

func (c *Curve) fit() error {
	c.Fits = map[string]map[string]Fit{}
	for _, t := range c.targets() {
		pts := c.points(t)
		c.Fits[t] = map[string]Fit{}
		for _, m := range curveMetrics {
			xs, ys := make([]float64, len(pts)), make([]float64, len(pts))
			for i, p := range pts {
				xs[i], ys[i] = float64(p.X), p.metric(m)
			}
			f, err := LeastSquares(xs, ys)
			if err != nil {
				return fmt.Errorf("curve %s %s: %w", t, m, err)
			}
			c.Fits[t][m] = f
		}
	}
	return nil
}

// CurvePlots are the PNGs WriteCurve draws: name suffix → the metrics on
// it.
var curvePlots = []struct {
	name, title, ylabel, unit string
	metrics                   []string
}{
	{"latency", "change → ACK latency", "latency (ms)", "ms", []string{MetricAckP50, MetricAckP99}},
	{"cpu", "CPU per change", "serving CPU per change (ms)", "ms", []string{MetricCPU}},
	{"rss", "peak RSS", "serving process peak RSS (MiB)", "MiB", []string{MetricRSS}},
	{"sync", "initial sync", "initial sync of the fleet (s)", "s", []string{MetricInit}},
}

// CurveFiles are the files WriteCurve writes for a sweep of param.
func CurveFiles(dir, param string) []string {
	out := []string{filepath.Join(dir, "curve-"+param+".json")}
	for _, p := range curvePlots {
		out = append(out, filepath.Join(dir, param+"-"+p.name+".png"))
	}
	return out
}

// WriteCurve writes DIR/curve-<param>.json and one PNG per figure
// (DIR/<param>-latency.png, -cpu.png, -rss.png, -sync.png).
func WriteCurve(dir string, c *Curve) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "curve-"+c.Param+".json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	for _, cp := range curvePlots {
		if err := c.plot(filepath.Join(dir, c.Param+"-"+cp.name+".png"), cp.title, cp.ylabel, cp.unit, cp.metrics); err != nil {
			return err
		}
	}
	return nil
}

func (c *Curve) per() string {
	if c.Param == SweepClients {
		return "client"
	}
	return "service"
}

// fitText is "0.31 MiB per client + 120 MiB".
func (c *Curve) fitText(f Fit, unit string) string {
	sign, b := "+", f.Intercept
	if b < 0 {
		sign, b = "−", -b
	}
	return fmt.Sprintf("%.4g %s per %s %s %.4g %s", f.Slope, unit, c.per(), sign, b, unit)
}

func metricLabel(m string) string {
	switch m {
	case MetricAckP50:
		return "p50"
	case MetricAckP99:
		return "p99"
	}
	return ""
}

func (c *Curve) plot(path, title, ylabel, unit string, metrics []string) error {
	p := plot.New()
	fixed := fmt.Sprintf("%d services", c.Scenario.Services)
	if c.Param == SweepServices {
		fixed = fmt.Sprintf("%d clients", c.Scenario.Clients)
	}
	var fits []string
	p.X.Label.Text = c.Param
	p.Y.Label.Text = ylabel
	p.Y.Min = 0
	p.Add(plotter.NewGrid())
	colors := []color.Color{color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 255}, color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 255},
		color.RGBA{G: 0x80, A: 255}, color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 255}, color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 255}, color.RGBA{R: 0x8c, G: 0x56, B: 0x4b, A: 255}}
	targets := c.targets()
	i := 0
	for _, t := range targets {
		pts := c.points(t)
		for _, m := range metrics {
			name := t
			if l := metricLabel(m); l != "" {
				name += " " + l
			}
			xy := make(plotter.XYs, len(pts))
			for j, pt := range pts {
				xy[j] = plotter.XY{X: float64(pt.X), Y: pt.metric(m)}
			}
			col := colors[i%len(colors)]
			i++
			l, s, err := plotter.NewLinePoints(xy)
			if err != nil {
				return err
			}
			l.Color, l.Width = col, vg.Points(1.5)
			s.Color, s.Shape = col, draw.CircleGlyph{}
			p.Add(l, s)
			p.Legend.Add(name, l, s)
			f := c.Fits[t][m]
			fl, err := plotter.NewLine(plotter.XYs{{X: float64(pts[0].X), Y: f.At(float64(pts[0].X))}, {X: float64(pts[len(pts)-1].X), Y: f.At(float64(pts[len(pts)-1].X))}})
			if err != nil {
				return err
			}
			fl.Color, fl.Width, fl.Dashes = col, vg.Points(1), []vg.Length{vg.Points(4), vg.Points(3)}
			p.Add(fl)
			p.Legend.Add(name+" fit", fl)
			lbl := ""
			if len(targets) > 1 {
				lbl = t + " "
			}
			if l := metricLabel(m); l != "" {
				lbl += l + " "
			}
			fits = append(fits, lbl+c.fitText(f, unit))
		}
	}
	p.Title.Text = fmt.Sprintf("%s vs %s (%s)\n%s", title, c.Param, fixed, strings.Join(fits, "; "))
	p.Legend.Top = true
	p.Legend.Left = true
	return p.Save(8*vg.Inch, 5*vg.Inch, path)
}

// PrintCurveTable writes the points and the fitted growth as a Markdown
// table (for the README's Performance section).
func PrintCurveTable(w io.Writer, c *Curve) {
	sc := c.Scenario
	fixed := fmt.Sprintf("%d services", sc.Services)
	if c.Param == SweepServices {
		fixed = fmt.Sprintf("%d clients", sc.Clients)
	}
	fmt.Fprintf(w, "Sweep of %s (%s, %d endpoints each, %.0f%% sotw on %d clusters, %.0f changes/s for %s; %s, %d cores):\n\n",
		c.Param, fixed, sc.Endpoints, sc.SotwShare*100, sc.SotwClusters, sc.Rate, sc.Duration, c.Machine.CPU, c.Machine.Cores)
	perCol := "RSS/client"
	if c.Param == SweepServices {
		perCol = "ΔRSS/service"
	}
	fmt.Fprintf(w, "| target | %s | converged | ack p50 | ack p99 | CPU/change | peak RSS | %s | initial sync |\n", c.Param, perCol)
	fmt.Fprintln(w, "|---|---:|---|---:|---:|---:|---:|---:|---:|")
	for _, p := range c.Points {
		per := fmt.Sprintf("%.3f MiB", p.RSSPerClientMB)
		if c.Param == SweepServices {
			per = fmt.Sprintf("%.1f KiB", p.RSSPerServiceMB*1024)
			if p.RSSPerServiceMB == 0 {
				per = "–"
			}
		}
		fmt.Fprintf(w, "| %s | %d | %v | %.1f ms | %.1f ms | %.3f ms | %.1f MiB | %s | %.2f s |\n",
			p.Target, p.X, p.Converged, p.AckP50, p.AckP99, p.CPUPerChg, p.PeakRSSMB, per, p.InitS)
	}
	fmt.Fprintf(w, "\nFitted growth (least squares over the points):\n\n| target | figure | growth | R² |\n|---|---|---|---:|\n")
	units := map[string]string{MetricAckP50: "ms", MetricAckP99: "ms", MetricCPU: "ms", MetricRSS: "MiB", MetricInit: "s"}
	names := map[string]string{MetricAckP50: "ack p50", MetricAckP99: "ack p99", MetricCPU: "CPU per change", MetricRSS: "peak RSS", MetricInit: "initial sync"}
	for _, t := range c.targets() {
		for _, m := range curveMetrics {
			f := c.Fits[t][m]
			fmt.Fprintf(w, "| %s | %s | %s | %.3f |\n", t, names[m], c.fitText(f, units[m]), f.R2)
		}
	}
}
