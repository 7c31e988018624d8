package e2e

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/xdsbridge/xdsbridge/sources/consul/consultest"
)

// TestEnvoyConsulAgentHung stops the Consul agent (SIGSTOP: its socket
// still accepts connections, nothing answers) under traffic through a
// real Envoy, with stale_after 3s, for 8s. Within stale_after the source
// is stale in /readyz (still 200: a registry that does not answer must not
// take the bridge out of service), /debug/sources, the status page and
// xdsbridge_source_stale; while stopped no request fails and the bridge
// sends nothing. Continued (SIGCONT), the agent is confirmed again and a
// health flip made in Consul reaches Envoy within 2s.
func TestEnvoyConsulAgentHung(t *testing.T) {
	testConsulAgentHung(t, 3*time.Second, 8*time.Second)
}

func testConsulAgentHung(t *testing.T, staleAfter, stopped time.Duration) {
	a := consultest.StartAgent(t, "dc1")
	bs := startBackends(t, 2)
	b1, b2 := bs[0], bs[1]
	registerTTL(t, a, "web-1", b1, api.HealthPassing)
	registerTTL(t, a, "web-2", b2, api.HealthPassing)
	// The default wait_time (5m): the blocking queries are held by the
	// agent when it stops.
	br := startBridge(t, "services: {}\n", fmt.Sprintf(`
  - name: consul
    consul:
      address: %q
      services: {include: [web]}
      coalesce: 10ms
      stale_after: %s
`, a.Addr(), staleAfter))
	ev := startEnvoy(t, "envoy-delta.yaml", br.app.XDSAddr())
	ev.waitTraffic(t, "b1", "b2")
	pushes := func() float64 { return metricSum(t, br, "xdsbridge_xds_pushes_total") }

	tr := startTraffic(ev, 25*time.Millisecond)
	defer tr.stop()
	time.Sleep(300 * time.Millisecond)
	p0, a0 := pushes(), ev.edsApplied(t, "web")
	if st := br.debugSource(t, "consul", nil); st.Stale || st.ConfirmedAge == "" {
		t.Fatalf("before the stop: %+v; want not stale, confirmed", st)
	}

	a.Pause()
	t.Cleanup(a.Resume) // before the agent's Stop
	paused := time.Now()
	st := br.waitStale(t, "consul", true)
	staleIn := time.Since(paused)
	t.Logf("stale %v after the stop (stale_after %v)", staleIn.Round(time.Millisecond), staleAfter)
	// waitStale polls every 10ms or so; the source itself reports at
	// stale_after exactly.
	if staleIn > staleAfter+time.Second {
		t.Errorf("stale %v after the agent stopped; want within stale_after (%v)", staleIn, staleAfter)
	}
	if want := "the Consul agent at http://" + a.Addr() + " has not answered for "; !strings.HasPrefix(st.LastError, want) {
		t.Errorf("last error %q; want it to start %q", st.LastError, want)
	}
	var dbg struct {
		Stale    bool `json:"stale"`
		Liveness struct {
			Stale bool `json:"stale"`
		} `json:"liveness"`
	}
	if st := br.debugSource(t, "consul", &dbg); !st.Stale || !dbg.Stale || !dbg.Liveness.Stale {
		t.Errorf("/debug/sources consul: status %+v, debug %+v; want stale", st, dbg)
	}
	if page := br.adminPage(t, "/"); !strings.Contains(page, `<tr class="source" data-name="consul">`) ||
		!strings.Contains(page[strings.Index(page, `data-name="consul"`):], `<span class="badge stale">STALE</span>`) {
		t.Errorf("the status page does not show the consul source STALE:\n%s", page)
	}

	time.Sleep(time.Until(paused.Add(stopped)))
	assertHosts(t, "agent stopped", ev.healthyHosts(t, "web"), hostsOf(b1, b2))
	assertTraffic(t, "agent stopped", tr, "b1", "b2")
	if p := pushes(); p != p0 {
		t.Errorf("the bridge sent %v responses while the agent was stopped", p-p0)
	}
	if now := ev.edsApplied(t, "web"); now != a0 {
		t.Errorf("envoy applied EDS updates while the agent was stopped: %s, before %s", now, a0)
	}

	a.Resume()
	answers := waitLeaderAnswer(t, a)
	a.TTL("web-2-ttl", api.HealthCritical)
	made := time.Now()
	shown := waitHosts(t, 10*time.Second, "web-2 critical in envoy", func() []string { return ev.healthyHosts(t, "web") }, hostsOf(b1), nil)
	t.Logf("agent answered %v after SIGCONT; the health flip reached envoy %v after it was made",
		answers.Sub(paused.Add(stopped)).Round(time.Millisecond), shown.Sub(made).Round(time.Millisecond))
	if d := shown.Sub(made); d > 2*time.Second {
		t.Errorf("the health flip reached envoy %v after it was made; want ≤ 2s", d)
	}
	br.waitStale(t, "consul", false)
	tr.snapshot()
	time.Sleep(300 * time.Millisecond)
	assertTraffic(t, "after the flip", tr, "b1")
	tr.stop()
	sent, failed, _ := tr.snapshot()
	t.Logf("%d requests in all, %d failed", sent, failed)
	if failed != 0 {
		t.Errorf("%d requests failed: %v", failed, tr.failures())
	}
	ev.assertNoRejections(t)
}

// adminPage is the body of GET path on the bridge's admin listener.
func (b *bridge) adminPage(t *testing.T, path string) string {
	t.Helper()
	resp, err := http.Get("http://" + b.app.AdminAddr() + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}
