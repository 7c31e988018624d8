package e2e

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/hashicorp/consul/api"

	"github.com/xdsbridge/xdsbridge/sources/consul/consultest"
	"github.com/xdsbridge/xdsbridge/xds"
)

// startConsulBridge runs the bridge with one source, the Consul agent a:
// every service and config entry.
func startConsulBridge(t *testing.T, a *consultest.Agent) *bridge {
	t.Helper()
	return startBridgeConfig(t, t.TempDir(), fmt.Sprintf(`
sources:
  - name: consul
    consul:
      address: %q
      wait_time: 2s
      coalesce: 10ms
      config_entries: true
`, a.Addr()), nil)
}

// A Consul service registered as "greeter/v1", the name of greeter's
// subset cluster, does not take that cluster over: the name is refused
// with a diagnostic and counted, and greeter/v1 keeps greeter's v1 host.
func TestConsulServiceNamedLikeASubset(t *testing.T) {
	a := consultest.StartAgent(t, "dc1")
	for _, r := range []struct {
		id, name, tag string
		port          int
	}{{"g1", "greeter", "v1", 9101}, {"g2", "greeter", "v2", 9102}, {"evil", "greeter/v1", "", 9666}} {
		reg := &api.AgentServiceRegistration{ID: r.id, Name: r.name, Address: "127.0.0.1", Port: r.port}
		if r.tag != "" {
			reg.Tags = []string{r.tag}
		}
		a.Register(reg)
	}
	if _, _, err := a.Client.ConfigEntries().Set(&api.ServiceResolverConfigEntry{Kind: api.ServiceResolver, Name: "greeter", Subsets: map[string]api.ServiceResolverSubset{
		"v1": {Filter: `"v1" in Service.Tags`},
	}}, nil); err != nil {
		t.Fatal(err)
	}
	br := startConsulBridge(t, a)

	ports := func() []uint32 {
		cla, _ := br.app.Cache.Get(xds.EndpointType, "greeter/v1").(*endpoint.ClusterLoadAssignment)
		var out []uint32
		for _, g := range cla.GetEndpoints() {
			for _, e := range g.GetLbEndpoints() {
				out = append(out, e.GetEndpoint().GetAddress().GetSocketAddress().GetPortValue())
			}
		}
		return out
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		d, p := br.app.Loop.Diagnostics()["greeter/v1"], ports()
		if len(p) > 0 && len(d) > 0 {
			if len(p) != 1 || p[0] != 9101 {
				t.Fatalf("greeter/v1 hosts %v; want greeter's v1 host 9101 alone", p)
			}
			if len(d) != 1 || d[0].Field != "name" || !strings.Contains(d[0].Message, `source "consul": name: service name "greeter/v1" contains "/"`) {
				t.Fatalf("diagnostics %v", d)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("greeter/v1 hosts %v, diagnostics %v", p, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
	resp, err := http.Get("http://" + br.app.AdminAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(body), `xdsbridge_service_names_refused{source="consul"} 1`) {
		t.Errorf("metrics lack xdsbridge_service_names_refused{source=\"consul\"} 1")
	}
}
