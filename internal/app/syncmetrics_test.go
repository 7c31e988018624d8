package app

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/xdsbridge/xdsbridge/xds"
)

// The sync-state gauges count stream types per state and give the age of
// the oldest STALE and NACKED one; every state is exported, 0 when none.
func TestSyncStatesMetrics(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	clients := []xds.ClientStatus{
		{Node: "a", Types: []xds.TypeStatus{
			{Type: "clusters", State: xds.Synced},
			{Type: "endpoints", State: xds.Stale, Since: now.Add(-90 * time.Second)},
		}},
		{Node: "b", Types: []xds.TypeStatus{
			{Type: "clusters", State: xds.Stale, Since: now.Add(-3 * time.Second)},
			{Type: "endpoints", State: xds.Nacked, Since: now.Add(-400 * time.Second)},
			{Type: "listeners", State: xds.Synced},
		}},
	}
	c := &syncStates{clients: func() []xds.ClientStatus { return clients }, now: func() time.Time { return now }}
	want := `
# HELP xdsbridge_xds_sync_oldest_seconds Seconds the stream type longest in the state has been in it (STALE: since the first response not acknowledged or the oldest version it lacks; NACKED: since the rejection); 0 when none is.
# TYPE xdsbridge_xds_sync_oldest_seconds gauge
xdsbridge_xds_sync_oldest_seconds{state="NACKED"} 400
xdsbridge_xds_sync_oldest_seconds{state="STALE"} 90
# HELP xdsbridge_xds_sync_states Connected xDS streams' types by sync state (SYNCED, STALE, NACKED, NOT_SENT, as /debug/clients shows them): one per stream and type.
# TYPE xdsbridge_xds_sync_states gauge
xdsbridge_xds_sync_states{state="NACKED"} 1
xdsbridge_xds_sync_states{state="NOT_SENT"} 0
xdsbridge_xds_sync_states{state="STALE"} 2
xdsbridge_xds_sync_states{state="SYNCED"} 2
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	clients = nil
	want = strings.NewReplacer(`"NACKED"} 400`, `"NACKED"} 0`, `"STALE"} 90`, `"STALE"} 0`, `"NACKED"} 1`, `"NACKED"} 0`, `"STALE"} 2`, `"STALE"} 0`, `"SYNCED"} 2`, `"SYNCED"} 0`).Replace(want)
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Errorf("no clients: %v", err)
	}
}
