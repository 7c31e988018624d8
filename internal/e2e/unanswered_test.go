package e2e

import (
	"fmt"
	"strings"
	"sync"
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

// A real Envoy with on-demand CDS (examples/envoy-odcds.yaml) that gets a
// burst of requests, each naming another service, subscribes to each name
// in a request of its own, before it reads the answers to the first ones:
// each request names no nonce. Such an Envoy answers every response, in
// order; max_unanswered_responses at its least (16) must not end its
// stream for a burst of 64 names.
func TestEnvoyOnDemandBurstUnansweredLimit(t *testing.T) {
	const burst = 64
	bs := startBackends(t, 1)
	br := startBridge(t, servicesYAML("web", bs[0]), "xds: {limits: {max_unanswered_responses: 16}}\n")
	waitOnDemandReady(t, br)
	ev := startEnvoy(t, "envoy-odcds.yaml", br.app.XDSAddr())
	var wg sync.WaitGroup
	for i := range burst {
		wg.Go(func() { onDemandRequest(ev, fmt.Sprintf("nosuch-%03d", i)) })
	}
	wg.Wait()
	if code, body, _, err := onDemandRequest(ev, "web"); err != nil || code != 200 || body != bs[0].name {
		t.Errorf("request to web after the burst: %d %q %v", code, body, err)
	}
	if got := metricSum(t, br, "xdsbridge_xds_limit_refusals_total"); got != 0 {
		t.Errorf("limits refused an on-demand Envoy's burst of %d names:\n%s", burst, metricLines(t, br, "xdsbridge_xds_limit_refusals_total"))
	}
}
