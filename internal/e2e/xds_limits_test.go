package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestEnvoy5000ClustersDefaultLimits: with the default xds.limits, a real
// Envoy over delta ADS (wildcard CDS, then EDS named for every cluster)
// gets all of 5,000 clusters and their endpoints; no limit refuses it.
func TestEnvoy5000ClustersDefaultLimits(t *testing.T) {
	const n = 5000
	bs := startBackends(t, 1)
	var sb strings.Builder
	sb.WriteString("services:\n")
	for i := range n {
		fmt.Fprintf(&sb, "  svc-%04d:\n    endpoints:\n      - {address: 127.0.0.1, port: %d}\n", i, 20000+i%10000)
	}
	// "web" (the route of envoy-delta.yaml) is the 5,001st.
	sb.WriteString(strings.TrimPrefix(servicesYAML("web", bs[0]), "services:\n"))
	br := startBridge(t, sb.String(), "")
	start := time.Now()
	ev := launchEnvoy(t, "envoy-delta.yaml", br.app.XDSAddr(), "", false)
	// Every cluster active (5,001 and Envoy's static xdsbridge), none
	// warming (each got its assignment), each with its one host.
	waitFor(t, 60*time.Second, "Envoy to hold every cluster", func() error {
		st := ev.Stats(t, `^cluster_manager\.(active|warming)_clusters$`)
		if st["cluster_manager.active_clusters"] != n+2 || st["cluster_manager.warming_clusters"] != 0 {
			return fmt.Errorf("%v", st)
		}
		return nil
	})
	t.Logf("Envoy got %d clusters in %s", n+1, time.Since(start).Round(time.Millisecond))
	hosts := 0
	for k, v := range ev.Stats(t, `^cluster\.svc-[0-9]+\.membership_total$`) {
		if v != 1 {
			t.Errorf("%s = %d, want 1", k, v)
		}
		hosts++
	}
	if hosts != n {
		t.Errorf("%d clusters have a membership_total, want %d", hosts, n)
	}
	ev.waitTraffic(t, "b1")
	ev.assertNoRejections(t)
	if metricLines(t, br, "xdsbridge_xds_limit_refusals_total") == "" {
		t.Error("/metrics has no xdsbridge_xds_limit_refusals_total")
	}
	if got := metricSum(t, br, "xdsbridge_xds_limit_refusals_total"); got != 0 {
		t.Errorf("limits refused a normal Envoy:\n%s", metricLines(t, br, "xdsbridge_xds_limit_refusals_total"))
	}
	// Nor is it slowed down by the request rate limit.
	if got := metricSum(t, br, "xdsbridge_xds_requests_delayed_total"); got != 0 {
		t.Errorf("xdsbridge_xds_requests_delayed_total = %v: a normal Envoy was paced", got)
	}
	if nacks := br.app.XDS.NACKs(); nacks != 0 {
		t.Errorf("bridge counted %d NACKs", nacks)
	}
}
