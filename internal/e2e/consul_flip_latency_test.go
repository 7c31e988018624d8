package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	xbridge "github.com/xdsbridge/xdsbridge/bridge"
	"github.com/xdsbridge/xdsbridge/config"
	"github.com/xdsbridge/xdsbridge/internal/app"
	"github.com/xdsbridge/xdsbridge/sources/consul/consultest"
)

// runBridgeDefaults runs cfgYAML (in a temp dir with an empty services
// file) on loopback ports as runBridge does, but keeps the config's own
// debounce: the defaults unless cfgYAML sets one.
func runBridgeDefaults(t *testing.T, cfgYAML string) *bridge {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "services.yaml"), []byte("services: {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse([]byte(cfgYAML), dir, app.SourceTypeNames())
	if err != nil {
		t.Fatal(err)
	}
	cfg.XDS.Listen, cfg.Admin.Listen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Logging.Level = "warn"
	a, err := app.New(cfg, app.NewLogger(cfg.Logging, &testWriter{t: t}))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &bridge{app: a, services: filepath.Join(dir, "services.yaml"), cancel: cancel, done: make(chan error, 1)}
	go func() { b.done <- a.Run(ctx) }()
	t.Cleanup(func() { b.stop(t) })
	return b
}

// hostFlags is the health_flags Envoy's /clusters shows for one host of
// a cluster ("" if it has none).
func hostFlags(body, cluster, host string) string {
	prefix := cluster + "::" + host + "::health_flags::"
	for _, l := range strings.Split(body, "\n") {
		if f, ok := strings.CutPrefix(l, prefix); ok {
			return f
		}
	}
	return ""
}

// TestConsulFlipToEnvoyLatency measures, with the default config (debounce
// quiet 50ms, max 500ms; the Consul source's coalesce 20ms), the time from
// flipping a Consul TTL check (the agent's API call) to a real Envoy's
// /clusters showing the host's new health, polled every 2 ms. Flips are
// 600 ms apart (beyond the source's per-watch rate limit), so each is an
// isolated change: it must not wait for the quiet period (p50 below it).
// XDSBRIDGE_CONSUL_E2E_BENCH=1 makes 100 flips instead of 32.
func TestConsulFlipToEnvoyLatency(t *testing.T) {
	flips := 32
	if os.Getenv("XDSBRIDGE_CONSUL_E2E_BENCH") == "1" {
		flips = 100
	}
	a := consultest.StartAgent(t, "dc1")
	bs := startBackends(t, 1)
	registerTTL(t, a, "web-1", bs[0], api.HealthPassing)
	br := runBridgeDefaults(t, fmt.Sprintf(`
sources:
  - name: static
    file: {path: services.yaml}
  - name: consul
    consul:
      address: %q
      services: {include: [web]}
`, a.Addr()))
	if q, m := br.app.Config.Debounce.Quiet.D(), br.app.Config.Debounce.Max.D(); q != xbridge.DefaultDebounceQuiet || m != xbridge.DefaultDebounceMax {
		t.Fatalf("debounce %s/%s, want the defaults", q, m)
	}
	ev := startEnvoy(t, "envoy-delta.yaml", br.app.XDSAddr())
	host := hostsOf(bs[0])[0]

	polls, pollErrors := 0, 0
	// waitFlags polls /clusters until the host shows want and returns when.
	waitFlags := func(want string) time.Time {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			body, err := ev.Get("/clusters")
			now := time.Now()
			polls++
			if err != nil {
				pollErrors++
			} else if hostFlags(body, "web", host) == want {
				return now
			}
			if now.After(deadline) {
				t.Fatalf("%s not %q in Envoy's /clusters within 10s", host, want)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	waitFlags("healthy")

	status := []string{api.HealthCritical, api.HealthPassing}
	want := []string{"/failed_eds_health", "healthy"}
	var lat []time.Duration
	for i := 0; i < flips; i++ {
		time.Sleep(600 * time.Millisecond)
		start := time.Now()
		a.TTL("web-1-ttl", status[i%2])
		lat = append(lat, waitFlags(want[i%2]).Sub(start))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(p float64) time.Duration { return lat[int(p*float64(len(lat)-1))] }
	p50, p99 := pct(0.5), pct(0.99)
	t.Logf("consul check flip → Envoy /clusters (%d flips 600ms apart, default config): p50 %s  p99 %s  max %s; min %s; %d polls of /clusters, %d failed",
		flips, p50.Round(100*time.Microsecond), p99.Round(100*time.Microsecond), lat[len(lat)-1].Round(100*time.Microsecond), lat[0].Round(100*time.Microsecond), polls, pollErrors)
	if pollErrors != 0 {
		t.Errorf("%d of %d polls of Envoy's /clusters failed", pollErrors, polls)
	}
	ev.assertNoRejections(t)
	assertNoNACKs(t, br)
	if p50 >= xbridge.DefaultDebounceQuiet {
		t.Errorf("p50 %s: an isolated flip waited for the quiet period (%s)", p50, xbridge.DefaultDebounceQuiet)
	}
}
