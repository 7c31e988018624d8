package xds

import (
	"sort"

	"github.com/prometheus/client_golang/prometheus"
	promreg "github.com/xdsbridge/xdsbridge/internal/metrics"
)

// The server's view of its clients (sync status, NACKs) and its metrics.

// ClientStatuses returns the connected streams and their sync status,
// sorted by node, then stream (delta before sotw for the same id). It is
// safe for concurrent use; see syncstatus.go for what each state means and
// what computing it costs.
func (s *Server) ClientStatuses() []ClientStatus {
	out, _ := s.clientStatuses("", false)
	return out
}

// ClientStatus returns the streams of the client whose node id is node,
// with each resource of interest to them, current and held; none when no
// stream has that node id.
func (s *Server) ClientStatus(node string) ClientDetail {
	cs, res := s.clientStatuses(node, true)
	d := ClientDetail{Streams: []ClientStreamDetail{}}
	for i, c := range cs {
		d.Streams = append(d.Streams, ClientStreamDetail{ClientStatus: c, Resources: res[i]})
	}
	return d
}

func (s *Server) clientStatuses(node string, detail bool) ([]ClientStatus, [][]ResourceSync) {
	s.mu.Lock()
	out := make([]ClientStatus, 0, len(s.clients))
	keys := make([]streamKey, 0, len(s.clients))
	for k, ci := range s.clients {
		if detail && ci.Node != node {
			continue
		}
		c := ClientStatus{Node: ci.Node, Cluster: ci.Cluster, Identity: ci.Identity, Mode: ci.Mode, TypeURL: ci.TypeURL,
			Stream: k.id, Peer: ci.Peer, Connected: ci.Opened, Responses: ci.responses.Load(), NACKs: ci.NACKs, LastNACK: ci.LastNACK}
		if a := ci.acct; a != nil {
			c.SubscribedNames, c.NameBytes = a.names.Load(), a.bytes.Load()
			c.EstimatedBytes = a.memoryEstimate()
		}
		out = append(out, c)
		keys = append(keys, k)
	}
	s.mu.Unlock()
	// The cache's lock is not taken under the server's.
	types, res := s.cache.syncStatus(keys, detail)
	var details [][]ResourceSync
	for i, k := range keys {
		out[i].Types = types[k]
		if out[i].Types == nil {
			out[i].Types = []TypeStatus{}
		}
	}
	idx := make([]int, len(out))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool {
		x, y := out[idx[a]], out[idx[b]]
		if x.Node != y.Node {
			return x.Node < y.Node
		}
		if x.Stream != y.Stream {
			return x.Stream < y.Stream
		}
		return x.Mode < y.Mode
	})
	sorted := make([]ClientStatus, len(out))
	for i, j := range idx {
		sorted[i] = out[j]
		if detail {
			details = append(details, res[keys[j]])
		}
	}
	return sorted, details
}

// NACKs returns the number of NACKs received since start.
func (s *Server) NACKs() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nackTotal
}

type metrics struct {
	clients *prometheus.GaugeVec
	pushes  *prometheus.CounterVec
	nacks   *prometheus.CounterVec
	// truncated counts client strings cut to MaxClientStringBytes, by field.
	truncated *prometheus.CounterVec
	// nackLogsSuppressed counts NACKs not logged, by reason.
	nackLogsSuppressed *prometheus.CounterVec
	guard              *guardMetrics
}

func newMetrics(c *Cache, reg prometheus.Registerer) *metrics {
	m := &metrics{
		clients: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "xdsbridge_xds_clients", Help: "Connected xDS streams by type (ads for aggregated) and mode (delta or sotw).",
		}, []string{"type", "mode"}),
		pushes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "xdsbridge_xds_pushes_total", Help: "xDS responses sent, by type and mode.",
		}, []string{"type", "mode"}),
		nacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "xdsbridge_xds_nacks_total", Help: "xDS updates rejected by clients (NACKs), by type (a type not served: other) and mode.",
		}, []string{"type", "mode"}),
		truncated: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "xdsbridge_xds_client_strings_truncated_total", Help: "Node ids and clusters sent by xDS clients longer than 256 bytes, stored and shown truncated, by field (node_id, node_cluster, type_url of a NACK logged; nack_message: NACK error messages over 1024 bytes).",
		}, []string{"field"}),
		nackLogsSuppressed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "xdsbridge_xds_nack_logs_suppressed_total", Help: "NACKs not logged, by reason: repeated (a request repeating the nonce its stream last NACKed for the type: counted and logged once), rate (over xds.limits.nack_logs_per_minute for the stream; counted in xdsbridge_xds_nacks_total, and the stream's next NACK logged says how many), server_rate (over 10 × nack_logs_per_minute over every stream; the next NACK logged says how many).",
		}, []string{"reason"}),
		guard: newGuardMetrics(),
	}
	m.nackLogsSuppressed.WithLabelValues("repeated")
	m.nackLogsSuppressed.WithLabelValues("rate")
	m.nackLogsSuppressed.WithLabelValues("server_rate")
	if err := promreg.Register(reg, m.clients, m.pushes, m.nacks, m.truncated, m.nackLogsSuppressed, m.guard.refusals, m.guard.delayed, m.guard.resumesWaited, m.guard.unwrittenBytes, m.guard.responsesWaited, &cacheCollector{c: c}); err != nil {
		panic(err)
	}
	return m
}

// cacheCollector exports the cache's counters at scrape time.
type cacheCollector struct{ c *Cache }

var (
	resourcesDesc = prometheus.NewDesc("xdsbridge_xds_resources", "Resources served, by type.", []string{"type"}, nil)
	encodingsDesc = prometheus.NewDesc("xdsbridge_xds_resource_encodings_total", "Resource versions encoded (each is encoded once, however many clients receive it).", nil, nil)
	watchesDesc   = prometheus.NewDesc("xdsbridge_xds_open_watches", "Watches waiting for a change, by type.", []string{"type"}, nil)
)

func (cc *cacheCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- resourcesDesc
	ch <- encodingsDesc
	ch <- watchesDesc
}

func (cc *cacheCollector) Collect(ch chan<- prometheus.Metric) {
	st := cc.c.Stats()
	for t, n := range st.Resources {
		ch <- prometheus.MustNewConstMetric(resourcesDesc, prometheus.GaugeValue, float64(n), t)
	}
	for t, n := range st.Watches {
		ch <- prometheus.MustNewConstMetric(watchesDesc, prometheus.GaugeValue, float64(n), t)
	}
	ch <- prometheus.MustNewConstMetric(encodingsDesc, prometheus.CounterValue, float64(st.Marshals))
}
