package healthcheck

import (
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promreg "github.com/xdsbridge/xdsbridge/internal/metrics"
)

// metrics are the checker's Prometheus collectors. They exist (and count)
// even when no Registerer is given; they are just not exported then.
type metrics struct {
	probes      *prometheus.CounterVec
	latency     *prometheus.HistogramVec
	targets     prometheus.Gauge
	transitions *prometheus.CounterVec
	lag         prometheus.Histogram

	// Pre-resolved children: type → by result (probeResults).
	probeCounts  map[string][3]prometheus.Counter
	probeLatency map[string]prometheus.Observer
}

func newMetrics(reg prometheus.Registerer, log *slog.Logger) *metrics {
	m := &metrics{
		probes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "xdsbridge_healthcheck_probes_total",
			Help: "Active health check probes by check type and result: ok, fail, or error (the bridge could not probe for want of its own resources; the verdict stands).",
		}, []string{"type", "result"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "xdsbridge_healthcheck_probe_duration_seconds",
			Help:    "Duration of active health check probes by check type (those that ended as the bridge's own error are not observed).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"type"}),
		targets: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "xdsbridge_healthcheck_targets",
			Help: "Distinct health check targets (address:port and check) being probed.",
		}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "xdsbridge_healthcheck_transitions_total",
			Help: "Verdict changes of health check targets caused by probes, by new verdict.",
		}, []string{"verdict"}),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "xdsbridge_healthcheck_schedule_lag_seconds",
			Help:    "How late probes start compared to their schedule (the bound on probes in flight reached, or the scheduler behind).",
			Buckets: []float64{.0001, .001, .005, .01, .05, .1, .5, 1, 5},
		}),
		probeCounts:  map[string][3]prometheus.Counter{},
		probeLatency: map[string]prometheus.Observer{},
	}
	for _, t := range []string{TypeTCP, TypeHTTP, TypeGRPC} {
		m.probeCounts[t] = m.resultCounters(t)
		m.probeLatency[t] = m.latency.WithLabelValues(t)
	}
	for _, v := range []Verdict{Healthy, Unhealthy} {
		m.transitions.WithLabelValues(v.String())
	}
	if reg != nil {
		m.probes = register(reg, m.probes, log)
		m.latency = register(reg, m.latency, log)
		m.targets = register(reg, m.targets, log)
		m.transitions = register(reg, m.transitions, log)
		m.lag = register(reg, m.lag, log)
		for _, t := range []string{TypeTCP, TypeHTTP, TypeGRPC} {
			m.probeCounts[t] = m.resultCounters(t)
			m.probeLatency[t] = m.latency.WithLabelValues(t)
		}
	}
	return m
}

// register registers c, or reuses the collector already registered under
// the same description (a second Checker on one registry shares them).
func register[C prometheus.Collector](reg prometheus.Registerer, c C, log *slog.Logger) C {
	c, err := promreg.Shared(reg, c)
	if err != nil {
		log.Warn("health check metrics not registered", "error", err)
	}
	return c
}

// probeResults are the result labels of probes_total, as State.LastResult.
var probeResults = [3]string{"ok", "fail", "error"}

// resultCounters resolves typ's probe counters, by probeResults.
func (m *metrics) resultCounters(typ string) (cs [3]prometheus.Counter) {
	for i, r := range probeResults {
		cs[i] = m.probes.WithLabelValues(typ, r)
	}
	return cs
}

// observe counts a probe of type typ that ended with err, and its
// duration unless the bridge could not make it (a probe that failed at
// socket() took no time on the network).
func (m *metrics) observe(typ string, err error, latency time.Duration) {
	c, found := m.probeCounts[typ]
	switch {
	case !found:
	case localError(err):
		c[2].Inc()
	case err != nil:
		c[1].Inc()
		m.probeLatency[typ].Observe(latency.Seconds())
	default:
		c[0].Inc()
		m.probeLatency[typ].Observe(latency.Seconds())
	}
}

// addTargets counts a checker's targets in the gauge; checkers sharing it
// add their parts (a Set from each would leave the last one's count).
func (m *metrics) addTargets(delta int) { m.targets.Add(float64(delta)) }

func (m *metrics) transition(v Verdict) { m.transitions.WithLabelValues(v.String()).Inc() }
