package status

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
)

// Sampler defaults.
const (
	DefaultSampleInterval = 10 * time.Second
	DefaultSampleKeep     = 60 // ten minutes of 10 s samples
)

// Sample is one interval of the chart.
type Sample struct {
	At     time.Time
	Pushes uint64 // xDS responses sent during the interval
	// P50 is the median change → ACK latency over the interval; HasP50
	// tells whether there was any.
	P50    time.Duration
	HasP50 bool
}

// Sampler keeps a ring of the last Keep samples, one every Interval, for
// the page's chart. Safe for concurrent use once running.
type Sampler struct {
	// Pushes returns the total of xDS responses sent so far (a counter).
	Pushes func() uint64
	// LatencyP50 returns the median change → ACK latency of the last
	// interval; false when there is none (or it is not measured).
	LatencyP50 func() (time.Duration, bool)
	Interval   time.Duration // default DefaultSampleInterval
	Keep       int           // default DefaultSampleKeep
	// Now is the clock (default time.Now).
	Now func() time.Time

	mu      sync.Mutex
	ring    []Sample
	last    uint64
	started bool
}

func (s *Sampler) interval() time.Duration {
	if s.Interval > 0 {
		return s.Interval
	}
	return DefaultSampleInterval
}

func (s *Sampler) keep() int {
	if s.Keep > 0 {
		return s.Keep
	}
	return DefaultSampleKeep
}

func (s *Sampler) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// Run samples every interval until ctx is done.
func (s *Sampler) Run(ctx context.Context) error {
	s.Tick() // the baseline of the counter
	t := time.NewTicker(s.interval())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			s.Tick()
		}
	}
}

// Tick takes one sample (Run calls it; tests may call it directly). The
// first call only records the counter's baseline.
func (s *Sampler) Tick() {
	var total uint64
	if s.Pushes != nil {
		total = s.Pushes()
	}
	var p50 time.Duration
	var hasP50 bool
	if s.LatencyP50 != nil {
		p50, hasP50 = s.LatencyP50()
	}
	at := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.started {
		s.started, s.last = true, total
		return
	}
	d := uint64(0)
	if total >= s.last {
		d = total - s.last
	}
	s.last = total
	s.ring = append(s.ring, Sample{At: at, Pushes: d, P50: p50, HasP50: hasP50})
	if n := len(s.ring) - s.keep(); n > 0 {
		s.ring = append(s.ring[:0:0], s.ring[n:]...)
	}
}

// Samples returns a copy of the ring, oldest first.
func (s *Sampler) Samples() []Sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Sample(nil), s.ring...)
}

// Chart geometry (SVG user units).
const (
	chartW, chartH = 600, 120
	chartTop       = 8
)

type chartBar struct {
	X, Y, W, H float64
	Title      string
}

type chartView struct {
	W, H        int
	Bars        []chartBar
	Line        string // polyline points of p50 latency
	Dots        []chartBar
	MaxPushes   uint64
	MaxLatency  time.Duration
	Span        string // the time covered, e.g. "10m0s"
	Samples     int
	Interval    time.Duration
	HasLatency  bool
	TotalPushes uint64
}

// chart lays the ring out: one slot per kept sample, the newest at the
// right; bars are pushes (scaled to the most in a slot), the line the p50
// latency (scaled to the highest).
func (s *Sampler) chart(now time.Time) *chartView {
	samples := s.Samples()
	keep := s.keep()
	cv := &chartView{W: chartW, H: chartH, Samples: len(samples), Interval: s.interval(),
		Span: (time.Duration(keep) * s.interval()).String()}
	for _, sm := range samples {
		cv.TotalPushes += sm.Pushes
		if sm.Pushes > cv.MaxPushes {
			cv.MaxPushes = sm.Pushes
		}
		if sm.HasP50 {
			cv.HasLatency = true
			if sm.P50 > cv.MaxLatency {
				cv.MaxLatency = sm.P50
			}
		}
	}
	slot := float64(chartW) / float64(keep)
	plotH := float64(chartH - chartTop)
	var pts []string
	for i, sm := range samples {
		x := float64(keep-len(samples)+i) * slot
		if cv.MaxPushes > 0 && sm.Pushes > 0 {
			h := plotH * float64(sm.Pushes) / float64(cv.MaxPushes)
			cv.Bars = append(cv.Bars, chartBar{X: round1(x + 1), Y: round1(chartH - h), W: round1(slot - 2), H: round1(h),
				Title: fmt.Sprintf("%d pushes in the %s before %s", sm.Pushes, s.interval(), sm.At.Format("15:04:05"))})
		}
		if sm.HasP50 && cv.MaxLatency > 0 {
			y := chartH - plotH*float64(sm.P50)/float64(cv.MaxLatency)
			cx := x + slot/2
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", cx, y))
			cv.Dots = append(cv.Dots, chartBar{X: round1(cx), Y: round1(y),
				Title: fmt.Sprintf("p50 change → ACK %s at %s", durText(sm.P50), sm.At.Format("15:04:05"))})
		}
	}
	cv.Line = strings.Join(pts, " ")
	return cv
}

func round1(f float64) float64 { return float64(int64(f*10+0.5)) / 10 }
