package app

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xdsbridge/xdsbridge/xds"
)

// syncStates exports the connected clients' sync status, as /debug/clients
// shows it, for alerting: how many stream types are in each state, and how
// long the one longest STALE or NACKED has been. It is computed when
// scraped, from the same per-stream state /debug/clients reads (a lookup
// per resource of interest of every stream).
type syncStates struct {
	clients func() []xds.ClientStatus
	now     func() time.Time
}

var (
	syncStatesDesc = prometheus.NewDesc("xdsbridge_xds_sync_states",
		"Connected xDS streams' types by sync state (SYNCED, STALE, NACKED, NOT_SENT, as /debug/clients shows them): one per stream and type.",
		[]string{"state"}, nil)
	syncOldestDesc = prometheus.NewDesc("xdsbridge_xds_sync_oldest_seconds",
		"Seconds the stream type longest in the state has been in it (STALE: since the first response not acknowledged or the oldest version it lacks; NACKED: since the rejection); 0 when none is.",
		[]string{"state"}, nil)
)

// syncStateNames are the states exported, every one always (0 when none).
var syncStateNames = []string{xds.Synced, xds.Stale, xds.Nacked, xds.NotSent}

func (s *syncStates) Describe(ch chan<- *prometheus.Desc) {
	ch <- syncStatesDesc
	ch <- syncOldestDesc
}

func (s *syncStates) Collect(ch chan<- prometheus.Metric) {
	now := s.now()
	count := map[string]int{}
	oldest := map[string]time.Duration{}
	for _, c := range s.clients() {
		for _, ts := range c.Types {
			count[ts.State]++
			if !ts.Since.IsZero() && (ts.State == xds.Stale || ts.State == xds.Nacked) {
				oldest[ts.State] = max(oldest[ts.State], now.Sub(ts.Since))
			}
		}
	}
	for _, st := range syncStateNames {
		ch <- prometheus.MustNewConstMetric(syncStatesDesc, prometheus.GaugeValue, float64(count[st]), st)
	}
	for _, st := range []string{xds.Stale, xds.Nacked} {
		ch <- prometheus.MustNewConstMetric(syncOldestDesc, prometheus.GaugeValue, max(oldest[st], 0).Seconds(), st)
	}
}
