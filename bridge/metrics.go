package bridge

import (
	"github.com/prometheus/client_golang/prometheus"

	promreg "github.com/xdsbridge/xdsbridge/internal/metrics"
	"github.com/xdsbridge/xdsbridge/translate"
)

type loopMetrics struct {
	sourceSyncs  *prometheus.CounterVec
	sourceErrors *prometheus.CounterVec
	conflicts    prometheus.Gauge
	// claimsLost: per source, the names it publishes that another source
	// owns.
	claimsLost *prometheus.GaugeVec
	// policyConflicts: services given a policy by name by more than one
	// policy source.
	policyConflicts prometheus.Gauge
	services        prometheus.Gauge
	flushes         prometheus.Counter
	flushErrors     prometheus.Counter
	invalid         prometheus.Counter
	// Translation limits: what each limit dropped or refused, refused
	// translations, and the services whose latest input is refused.
	limitExceeded   *prometheus.CounterVec
	refused         prometheus.Counter
	refusedServices prometheus.Gauge
	flushSeconds    prometheus.Histogram
	// refusedNames: service names refused (ValidateServiceName), by source.
	refusedNames *prometheus.GaugeVec
	// blackHoles: references of published services' policies to services
	// nobody publishes, by kind.
	blackHoles *prometheus.GaugeVec
	// failoverEndpoints: hosts failover adds across the catalog.
	failoverEndpoints prometheus.Gauge
	// The egress route table: its services' virtual hosts, and the
	// domains left out of them (taken by another service).
	egressHosts          prometheus.Gauge
	egressDomainsDropped prometheus.Gauge
}

func newLoopMetrics(l *Loop, reg prometheus.Registerer) *loopMetrics {
	m := &loopMetrics{
		sourceSyncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "xdsbridge_source_syncs_total", Help: "Full updates published by each source.",
		}, []string{"source"}),
		sourceErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "xdsbridge_source_errors_total", Help: "Refresh failures reported by each source (its last good state stays served).",
		}, []string{"source"}),
		conflicts: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "xdsbridge_service_conflicts", Help: "Services claimed by more than one source.",
		}),
		claimsLost: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "xdsbridge_source_claims_lost", Help: "Service names the source publishes that a source ranked before it (priority, then config order) owns.",
		}, []string{"source"}),
		policyConflicts: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "xdsbridge_policy_conflicts", Help: "Services given a policy by name by more than one policy source (the first source's is used).",
		}),
		services: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "xdsbridge_services", Help: "Services published.",
		}),
		flushes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "xdsbridge_merge_flushes_total", Help: "Debounced rebuilds of dirty services.",
		}),
		flushErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "xdsbridge_merge_publish_errors_total", Help: "Publishes to the xDS cache that failed.",
		}),
		invalid: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "xdsbridge_translate_invalid_total", Help: "Generated resources that failed validation (the last valid one stays served).",
		}),
		limitExceeded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "xdsbridge_translate_limit_exceeded_total", Help: "Input over a translation limit: metadata namespaces, hostnames or services dropped or refused, by limit (max_metadata_depth, max_metadata_bytes, max_hostname_bytes, max_name_bytes, max_resource_bytes, encoding).",
		}, []string{"limit"}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "xdsbridge_translate_refused_total", Help: "Translations of a service refused as over the limits (its last published version stays served).",
		}),
		refusedServices: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "xdsbridge_services_refused", Help: "Services whose latest input is refused (over the limits or failing validation): an older version, or nothing, is served.",
		}),
		refusedNames: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "xdsbridge_service_names_refused", Help: "Services a source publishes under a name the bridge refuses (empty, too long, whitespace or control characters, or the \"/\" of derived names such as a subset's cluster): not published.",
		}, []string{"source"}),
		blackHoles: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "xdsbridge_black_holes", Help: "References of the published policies to services nobody publishes, by kind: route (a route's destination), split (a share, dropped while so), redirect, failover (adds no host), redirect_cycle (two services redirecting to each other).",
		}, []string{"kind"}),
		failoverEndpoints: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "xdsbridge_failover_endpoints", Help: "Hosts the policies' failover targets add to the published assignments, across the catalog (bounded by limits.max_failover_endpoints).",
		}),
		flushSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "xdsbridge_merge_flush_seconds", Help: "Time to rebuild and publish dirty services.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}),
		egressHosts: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "xdsbridge_egress_virtual_hosts", Help: "Services in the egress route table (virtual hosts, the catch-all not counted).",
		}),
		egressDomainsDropped: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "xdsbridge_egress_domains_dropped", Help: "Domains left out of a service's virtual host in the egress route table because another service has them.",
		}),
	}
	for _, kind := range []string{translate.BlackHoleRoute, translate.BlackHoleSplit, translate.BlackHoleRedirect, translate.BlackHoleFailover, translate.BlackHoleRedirectCycle} {
		m.blackHoles.WithLabelValues(kind)
	}
	if err := promreg.Register(reg, m.sourceSyncs, m.sourceErrors, m.conflicts, m.claimsLost, m.policyConflicts, m.services, m.flushes, m.flushErrors, m.invalid, m.limitExceeded, m.refused, m.refusedServices, m.refusedNames, m.blackHoles, m.failoverEndpoints, m.flushSeconds, m.egressHosts, m.egressDomainsDropped, &staleCollector{l}); err != nil {
		panic(err)
	}
	return m
}

var (
	staleDesc        = prometheus.NewDesc("xdsbridge_source_stale", "1 when the source's last refresh failed and its last good state is served.", []string{"source"}, nil)
	confirmedAgeDesc = prometheus.NewDesc("xdsbridge_source_confirmed_age_seconds", "Time since the source last confirmed its state: a successful read of its registry (a Consul query or liveness probe answered, a DNS refresh, a services file read or stat), whether anything changed or not. Alert on this one: it grows only while the registry does not answer.", []string{"source"}, nil)
	changedAgeDesc   = prometheus.NewDesc("xdsbridge_source_changed_age_seconds", "Time since what the source publishes last changed (services, endpoints, health or policy). It grows whenever nothing changes: not a sign of trouble by itself.", []string{"source"}, nil)
	droppedDesc      = prometheus.NewDesc("xdsbridge_source_dropped_instances", "Instances the source read from its registry and currently leaves out, by reason (excluded_tag, unresolvable_address, limit, malformed).", []string{"source", "reason"}, nil)
	readyDesc        = prometheus.NewDesc("xdsbridge_ready", "1 once every source synced and xDS is served.", nil, nil)
	hostsDesc        = prometheus.NewDesc("xdsbridge_hosts", "Hosts by published health status (NONE: left out).", []string{"health"}, nil)
	retainedDesc     = prometheus.NewDesc("xdsbridge_hosts_retained", "Hosts absent from discovery but retained because their health check passes.", nil, nil)
)

type staleCollector struct{ l *Loop }

func (c *staleCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- staleDesc
	ch <- confirmedAgeDesc
	ch <- changedAgeDesc
	ch <- droppedDesc
	ch <- readyDesc
	ch <- hostsDesc
	ch <- retainedDesc
}

func (c *staleCollector) Collect(ch chan<- prometheus.Metric) {
	now := c.l.now()
	for _, st := range c.l.Sources() {
		v := 0.0
		if st.Stale {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(staleDesc, prometheus.GaugeValue, v, st.Name)
		if !st.LastConfirmed.IsZero() {
			ch <- prometheus.MustNewConstMetric(confirmedAgeDesc, prometheus.GaugeValue, now.Sub(st.LastConfirmed).Seconds(), st.Name)
		}
		if !st.LastChanged.IsZero() {
			ch <- prometheus.MustNewConstMetric(changedAgeDesc, prometheus.GaugeValue, now.Sub(st.LastChanged).Seconds(), st.Name)
		}
		for reason, n := range st.DroppedCounts {
			ch <- prometheus.MustNewConstMetric(droppedDesc, prometheus.GaugeValue, float64(n), st.Name, reason)
		}
	}
	r := 0.0
	if c.l.Ready() {
		r = 1
	}
	ch <- prometheus.MustNewConstMetric(readyDesc, prometheus.GaugeValue, r)
	byHealth := map[string]int{}
	retained := 0
	for _, hs := range c.l.Hosts("") {
		for _, h := range hs {
			k := h.Health.String()
			if !h.Published {
				k = "NONE"
			} else if !h.Discovered {
				retained++
			}
			byHealth[k]++
		}
	}
	for k, n := range byHealth {
		ch <- prometheus.MustNewConstMetric(hostsDesc, prometheus.GaugeValue, float64(n), k)
	}
	ch <- prometheus.MustNewConstMetric(retainedDesc, prometheus.GaugeValue, float64(retained))
}
