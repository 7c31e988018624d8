package e2e

import (
	"fmt"
	"slices"
	"testing"
	"time"

	xbridge "github.com/xdsbridge/xdsbridge/bridge"
	"github.com/xdsbridge/xdsbridge/healthcheck"
)

const httpCheck = `
health_checks:
  services:
    web: {type: http, interval: 50ms, timeout: 500ms, jitter: 0s, http: {path: /healthz}}
`

// hostRule returns the /debug/hosts entry of one host.
func hostRule(t *testing.T, br *bridge, service, host string) (xbridge.HostInfo, bool) {
	t.Helper()
	for _, h := range br.app.Loop.Hosts(service)[service] {
		if h.Host == host {
			return h, true
		}
	}
	return xbridge.HostInfo{}, false
}

// TestEnvoyHealthCheckMatrix walks the discovery × health-check matrix
// through a real Envoy.
func TestEnvoyHealthCheckMatrix(t *testing.T) {
	bs := startBackends(t, 2)
	b1, b2 := bs[0], bs[1]
	br := startBridge(t, servicesYAML("web", b1, b2), httpCheck)
	ev := startEnvoy(t, "envoy-delta.yaml", br.app.XDSAddr())
	ev.waitTraffic(t, "b1", "b2")
	h2 := hostsOf(b2)[0]

	// Discovered, check failed: published UNHEALTHY, no traffic.
	b2.unhealthy.Store(true)
	ev.waitTraffic(t, "b1")
	waitFor(t, 10*time.Second, "b2 unhealthy in Envoy", func() error {
		body, err := ev.Get("/clusters")
		if err != nil {
			return err
		}
		if !containsLine(body, "web::"+h2+"::health_flags::/failed_eds_health") {
			return fmt.Errorf("b2 not marked /failed_eds_health in /clusters")
		}
		return nil
	})
	if h, _ := hostRule(t, br, "web", h2); h.Rule != healthcheck.RuleDiscoveredFailed || !h.Published {
		t.Fatalf("b2 in /debug/hosts: %+v", h)
	}

	// It recovers; then it is removed from the file while passing: retained,
	// and it keeps receiving traffic.
	b2.unhealthy.Store(false)
	ev.waitTraffic(t, "b1", "b2")
	br.writeServices(t, servicesYAML("web", b1))
	waitFor(t, 10*time.Second, "b2 retained", func() error {
		if h, _ := hostRule(t, br, "web", h2); h.Rule != healthcheck.RuleRetained {
			return fmt.Errorf("b2: %+v", h)
		}
		return nil
	})
	ev.waitTraffic(t, "b1", "b2")

	// Absent and now failing: deleted from EDS.
	b2.unhealthy.Store(true)
	waitFor(t, 10*time.Second, "b2 deleted from Envoy", func() error {
		if got := ev.clusterHosts(t, "web"); !slices.Equal(got, hostsOf(b1)) {
			return fmt.Errorf("hosts %v", got)
		}
		return nil
	})
	ev.waitTraffic(t, "b1")
	ev.assertNoRejections(t)
}

func containsLine(body, line string) bool {
	for _, l := range splitLines(body) {
		if l == line {
			return true
		}
	}
	return false
}

func splitLines(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

// TestEnvoyMaxRetention: a host removed from the file while its TCP check
// passes is retained, then removed from Envoy when max_retention has
// passed, with no other change.
func TestEnvoyMaxRetention(t *testing.T) {
	const maxRet = time.Second
	bs := startBackends(t, 2)
	b1, b2 := bs[0], bs[1]
	br := startBridge(t, servicesYAML("web", b1, b2), `
health_checks:
  max_retention: 1s
  services:
    web: {type: tcp, interval: 50ms, timeout: 500ms, jitter: 0s}
`)
	ev := startEnvoy(t, "envoy-delta.yaml", br.app.XDSAddr())
	ev.waitTraffic(t, "b1", "b2")
	h2 := hostsOf(b2)[0]
	waitFor(t, 10*time.Second, "b2 checked", func() error {
		if h, _ := hostRule(t, br, "web", h2); h.Rule != healthcheck.RuleDiscoveredOK {
			return fmt.Errorf("b2: %+v", h)
		}
		return nil
	})

	br.writeServices(t, servicesYAML("web", b1))
	var since time.Time
	waitFor(t, 5*time.Second, "b2 retained", func() error {
		h, _ := hostRule(t, br, "web", h2)
		if h.Rule != healthcheck.RuleRetained || !h.Published {
			return fmt.Errorf("b2: %+v", h)
		}
		since = h.AbsentSince
		return nil
	})
	if got := metricSum(t, br, "xdsbridge_hosts_retained"); got != 1 {
		t.Fatalf("xdsbridge_hosts_retained = %v while retained", got)
	}
	// Still in Envoy before the bound.
	if got := ev.clusterHosts(t, "web"); !slices.Equal(got, hostsOf(b1, b2)) && time.Since(since) < maxRet {
		t.Fatalf("hosts %v before max_retention", got)
	}

	// Gone from Envoy within the bound plus debounce and push (polled
	// every 50ms; 1s of slack for a loaded machine).
	waitFor(t, time.Until(since.Add(maxRet+time.Second)), "b2 removed from Envoy after max_retention", func() error {
		if got := ev.clusterHosts(t, "web"); !slices.Equal(got, hostsOf(b1)) {
			return fmt.Errorf("hosts %v", got)
		}
		return nil
	})
	if gone := time.Since(since); gone < maxRet {
		t.Fatalf("b2 removed %s after it left the file, before max_retention %s", gone, maxRet)
	}
	if h, ok := hostRule(t, br, "web", h2); ok && (h.Published || h.Rule != healthcheck.RuleRetentionExpired) {
		t.Fatalf("b2 in /debug/hosts after expiry: %+v", h)
	}
	if got := metricSum(t, br, "xdsbridge_hosts_retained"); got != 0 {
		t.Fatalf("xdsbridge_hosts_retained = %v after expiry", got)
	}
	ev.waitTraffic(t, "b1")
	ev.assertNoRejections(t)
}
