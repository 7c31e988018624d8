package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/xdsbridge/xdsbridge/healthcheck"
	"github.com/xdsbridge/xdsbridge/sources/consul/consultest"
)

func consulSource(a *consultest.Agent) string {
	return fmt.Sprintf(`
  - name: consul
    consul:
      address: %q
      services: {include: [web]}
      wait_time: 2s
      coalesce: 10ms
`, a.Addr())
}

func registerTTL(t *testing.T, a *consultest.Agent, id string, b *backend, status string) {
	t.Helper()
	a.Register(&api.AgentServiceRegistration{
		ID: id, Name: "web", Address: "127.0.0.1", Port: int(b.port),
		Check: &api.AgentServiceCheck{CheckID: id + "-ttl", TTL: "10m", Status: status},
	})
}

// TestEnvoyFollowsConsul: instances registered in a real Consul receive
// traffic through a real Envoy; a failing check stops traffic to that
// instance; deregistering removes it.
func TestEnvoyFollowsConsul(t *testing.T) {
	a := consultest.StartAgent(t, "dc1")
	bs := startBackends(t, 2)
	registerTTL(t, a, "web-1", bs[0], api.HealthPassing)
	registerTTL(t, a, "web-2", bs[1], api.HealthPassing)
	br := startBridge(t, "services: {}\n", consulSource(a))
	ev := startEnvoy(t, "envoy-delta.yaml", br.app.XDSAddr())
	ev.waitTraffic(t, "b1", "b2")

	a.TTL("web-2-ttl", api.HealthCritical)
	ev.waitTraffic(t, "b1")
	a.TTL("web-2-ttl", api.HealthPassing)
	ev.waitTraffic(t, "b1", "b2")
	a.Deregister("web-1")
	ev.waitTraffic(t, "b2")
	ev.assertNoRejections(t)
}

// TestConsulWithActiveChecks: a passing active check overrides a critical
// Consul check; maintenance mode drains whatever the active check says.
func TestConsulWithActiveChecks(t *testing.T) {
	a := consultest.StartAgent(t, "dc1")
	bs := startBackends(t, 2)
	registerTTL(t, a, "web-1", bs[0], api.HealthPassing)
	registerTTL(t, a, "web-2", bs[1], api.HealthCritical)
	br := startBridge(t, "services: {}\n", consulSource(a)+httpCheck)
	ev := startEnvoy(t, "envoy-sotw.yaml", br.app.XDSAddr())

	// web-2 is critical in Consul but answers its HTTP check: routed.
	ev.waitTraffic(t, "b1", "b2")
	h2 := hostsOf(bs[1])[0]
	if h, _ := hostRule(t, br, "web", h2); h.Rule != healthcheck.RuleDiscoveredOK || h.SourceHealth.String() != "UNHEALTHY" {
		t.Fatalf("web-2 in /debug/hosts: %+v", h)
	}

	// Maintenance mode drains it even though its check passes.
	if err := a.Client.Agent().EnableServiceMaintenance("web-2", "e2e"); err != nil {
		t.Fatal(err)
	}
	ev.waitTraffic(t, "b1")
	waitFor(t, 10*time.Second, "web-2 draining", func() error {
		if h, _ := hostRule(t, br, "web", h2); h.Rule != healthcheck.RuleDrain {
			return fmt.Errorf("web-2: %+v", h)
		}
		return nil
	})
	ev.assertNoRejections(t)
}
