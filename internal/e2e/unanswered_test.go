package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// A real Envoy over delta ADS whose clusters come one at a time (each a
// CDS response, then the new cluster's EDS subscription, which names no
// nonce, and its assignment, each ACKed) is not ended by
// max_unanswered_responses at its least (16), however many clusters come:
// what it answered is not counted, nor kept.
func TestEnvoyClusterChurnUnansweredLimit(t *testing.T) {
	const n = 40
	bs := startBackends(t, 1)
	web := servicesYAML("web", bs[0])
	br := startBridge(t, web, "xds: {limits: {max_unanswered_responses: 16}}\n")
	ev := launchEnvoy(t, "envoy-delta.yaml", br.app.XDSAddr(), "", false)
	ev.waitTraffic(t, "b1")
	var sb strings.Builder
	for i := range n {
		fmt.Fprintf(&sb, "  svc-%02d:\n    endpoints:\n      - {address: 127.0.0.1, port: %d}\n", i, 20000+i)
		br.writeServices(t, web+sb.String())
		waitFor(t, 10*time.Second, "Envoy to hold the new cluster", func() error {
			st := ev.Stats(t, `^cluster_manager\.(active|warming)_clusters$`)
			if st["cluster_manager.active_clusters"] != int64(i+3) || st["cluster_manager.warming_clusters"] != 0 {
				return fmt.Errorf("%v", st)
			}
			return nil
		})
	}
	ev.assertNoRejections(t)
	if got := metricSum(t, br, "xdsbridge_xds_limit_refusals_total"); got != 0 {
		t.Errorf("limits refused a normal Envoy:\n%s", metricLines(t, br, "xdsbridge_xds_limit_refusals_total"))
	}
}
