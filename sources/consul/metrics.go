package consul

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promreg "github.com/xdsbridge/xdsbridge/internal/metrics"
)

// metrics are the source's Prometheus collectors, all with the constant
// label source=<name>. They are safe for concurrent use.
type metrics struct {
	requests  *prometheus.CounterVec   // endpoint, result: ok, error, stale_retry, backwards_retry, no_leader
	blocking  *prometheus.HistogramVec // endpoint
	watches   prometheus.Gauge
	publishes prometheus.Counter
	// feedPatches counts service states brought up to date from the
	// change feed without a read.
	feedPatches prometheus.Counter
	staleness   prometheus.Collector // one gauge per datacenter
	// Config entries (registered with config_entries only).
	policyPublishes prometheus.Counter
	diagnostics     *prometheus.GaugeVec // kind
	withEntries     bool
}

// setDiagnostics sets the diagnostics gauge of every kind (0 for kinds
// without any).
func (m *metrics) setDiagnostics(diags []Diagnostic) {
	n := map[string]int{"all": 0}
	for _, k := range entryKinds {
		n[k] = 0
	}
	for _, d := range diags {
		k := d.Kind
		if k == "" {
			k = "all"
		}
		n[k]++
	}
	for k, v := range n {
		m.diagnostics.WithLabelValues(k).Set(float64(v))
	}
}

func newMetrics(source string, s *Source) *metrics {
	cl := prometheus.Labels{"source": source}
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "xdsbridge_consul_requests_total",
			Help:        "Requests sent to the Consul agent, by endpoint (catalog_services, health_service, health_state, catalog_node_services, config_entries, status_leader: the recovery probe) and result (ok, error; stale_retry counts stale reads redone in consistent mode; backwards_retry reads whose index went backwards, redone in consistent mode; no_leader counts probes answered without a leader).",
			ConstLabels: cl,
		}, []string{"endpoint", "result"}),
		blocking: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:        "xdsbridge_consul_blocking_query_duration_seconds",
			Help:        "Duration of successful blocking queries, by endpoint.",
			ConstLabels: cl,
			Buckets:     []float64{0.01, 0.1, 1, 10, 30, 60, 120, 300, 600},
		}, []string{"endpoint"}),
		watches: prometheus.NewGauge(prometheus.GaugeOpts{
			Name:        "xdsbridge_consul_open_watches",
			Help:        "Service health watches running (one per selected service per datacenter).",
			ConstLabels: cl,
		}),
		publishes: prometheus.NewCounter(prometheus.CounterOpts{
			Name:        "xdsbridge_consul_publishes_total",
			Help:        "Full updates published to the bridge.",
			ConstLabels: cl,
		}),
		feedPatches: prometheus.NewCounter(prometheus.CounterOpts{
			Name:        "xdsbridge_consul_feed_updates_total",
			Help:        "Service health results brought up to date from the change feed's checks, without a read of the service (hinted mode).",
			ConstLabels: cl,
		}),
	}
	m.policyPublishes = prometheus.NewCounter(prometheus.CounterOpts{
		Name:        "xdsbridge_consul_policy_publishes_total",
		Help:        "Policies converted from config entries published to the bridge (config_entries).",
		ConstLabels: cl,
	})
	m.diagnostics = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name:        "xdsbridge_consul_config_entry_diagnostics",
		Help:        "Config-entry fields and entries the published policy does not carry, by entry kind (config_entries; listed in /debug/sources).",
		ConstLabels: cl,
	}, []string{"kind"})
	m.staleness = &stalenessCollector{s: s, desc: prometheus.NewDesc("xdsbridge_consul_staleness_seconds",
		"Age of the datacenter's data being served: while a read fails, the time since its last success; otherwise the largest X-Consul-LastContact of the last reads.",
		[]string{"datacenter"}, cl)}
	return m
}

// stalenessCollector is xdsbridge_consul_staleness_seconds, one gauge per
// datacenter. Its datacenter label is read at each scrape: the agent's own
// datacenter is "local" only until a health result names it (README).
type stalenessCollector struct {
	s    *Source
	desc *prometheus.Desc
}

func (c *stalenessCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *stalenessCollector) Collect(ch chan<- prometheus.Metric) {
	now := time.Now()
	failover := map[string]bool{}
	for _, dc := range c.s.dcs[1:] {
		failover[dc.label] = true
	}
	for _, dc := range c.s.dcs {
		name := dc.label
		c.s.mu.Lock()
		// A failover datacenter is named by the config. The agent's own
		// keeps "local" if its name is also a failover's: two series with
		// one label set would fail the scrape.
		if dc.query == "" && dc.actual != "" && !failover[dc.actual] {
			name = dc.actual
		}
		c.s.mu.Unlock()
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, c.s.staleness(dc, now).Seconds(), name)
	}
}

func (m *metrics) register(r prometheus.Registerer) error {
	cs := []prometheus.Collector{m.requests, m.blocking, m.watches, m.publishes, m.feedPatches}
	if m.withEntries {
		cs = append(cs, m.policyPublishes, m.diagnostics)
	}
	return promreg.Register(r, append(cs, m.staleness)...)
}

// staleness is the age of a datacenter's data (see the metric's help).
func (s *Source) staleness(dc *dcState, now time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var max time.Duration
	consider := func(w *watchInfo) {
		d := w.lastContact
		if w.failing && !w.lastSuccess.IsZero() {
			d = now.Sub(w.lastSuccess)
		}
		if d > max {
			max = d
		}
	}
	consider(&dc.list)
	consider(&dc.feed[0])
	consider(&dc.feed[1])
	if s.ce != nil && dc == s.dcs[0] {
		for _, w := range s.ce.watches {
			consider(w)
		}
	}
	for _, st := range dc.services {
		consider(&st.info)
	}
	return max
}
