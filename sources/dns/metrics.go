package dns

import (
	"errors"

	mdns "github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	promreg "github.com/xdsbridge/xdsbridge/internal/metrics"
)

// metrics are the source's Prometheus collectors, all with a constant label
// source=<name>. They are safe for concurrent use.
type metrics struct {
	queries      *prometheus.CounterVec // qtype, result
	tcpFallbacks prometheus.Counter
	resolutions  *prometheus.CounterVec // result: success, failure
	names        prometheus.Gauge
	publishes    prometheus.Counter
}

func newMetrics(source string) *metrics {
	cl := prometheus.Labels{"source": source}
	return &metrics{
		queries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "xdsbridge_dns_queries_total",
			Help:        "DNS queries sent, by query type and result (the response rcode, or timeout / error).",
			ConstLabels: cl,
		}, []string{"qtype", "result"}),
		tcpFallbacks: prometheus.NewCounter(prometheus.CounterOpts{
			Name:        "xdsbridge_dns_tcp_fallbacks_total",
			Help:        "Truncated UDP answers retried over TCP.",
			ConstLabels: cl,
		}),
		resolutions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "xdsbridge_dns_resolutions_total",
			Help:        "Resolutions of configured names, by result (success, failure). Failures keep the last endpoints.",
			ConstLabels: cl,
		}, []string{"result"}),
		names: prometheus.NewGauge(prometheus.GaugeOpts{
			Name:        "xdsbridge_dns_names",
			Help:        "Configured DNS names resolved by the source.",
			ConstLabels: cl,
		}),
		publishes: prometheus.NewCounter(prometheus.CounterOpts{
			Name:        "xdsbridge_dns_publishes_total",
			Help:        "Updates published to the bridge (only when endpoints changed, plus the first).",
			ConstLabels: cl,
		}),
	}
}

func (m *metrics) register(r prometheus.Registerer) error {
	return promreg.Register(r, m.queries, m.tcpFallbacks, m.resolutions, m.names, m.publishes)
}

// observeQuery counts one query by its outcome.
func (m *metrics) observeQuery(qtype uint16, resp *mdns.Msg, err error) {
	result := "error"
	switch {
	case err == nil:
		result = rcodeName(resp.Rcode)
	case errors.As(err, new(timeoutError)):
		result = "timeout"
	}
	m.queries.WithLabelValues(mdns.TypeToString[qtype], result).Inc()
}
