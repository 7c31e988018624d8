// The latency plot (-plot): a PNG of each target's distribution.

package load

import (
	"image/color"
	"math"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// WritePlot draws the cumulative distribution of change → client ACK
// latency of each target, on a log time axis.
func WritePlot(path string, rep *Report) error {
	p := plot.New()
	p.Title.Text = "xdsload " + rep.Scenario.Name + ": change → client ACK latency"
	p.X.Label.Text = "latency (ms, log scale)"
	p.Y.Label.Text = "fraction of (change, client) pairs"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Min, p.Y.Max = 0, 1
	p.Add(plotter.NewGrid())
	colors := []color.Color{color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 255}, color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 255}, color.RGBA{G: 0x80, A: 255}}
	for i, t := range rep.Targets {
		s := append([]float64(nil), t.ackSamples...)
		if len(s) == 0 {
			continue
		}
		sort.Float64s(s)
		// At most ~2,000 points per line.
		step := max(1, len(s)/2000)
		var xy plotter.XYs
		for j := 0; j < len(s); j += step {
			xy = append(xy, plotter.XY{X: math.Max(s[j], 0.01), Y: float64(j+1) / float64(len(s))})
		}
		xy = append(xy, plotter.XY{X: math.Max(s[len(s)-1], 0.01), Y: 1})
		l, err := plotter.NewLine(xy)
		if err != nil {
			return err
		}
		l.Color = colors[i%len(colors)]
		l.Width = vg.Points(2)
		p.Add(l)
		p.Legend.Add(t.Target, l)
	}
	p.Legend.Top = false
	p.Legend.Left = false
	return p.Save(8*vg.Inch, 5*vg.Inch, path)
}
