package main

import (
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/xdsbridge/xdsbridge/sources/consul/consultest"
)

// TestStatusHostsShowsConsulChecksAndDropped: for a Consul service,
// `status hosts web` names the Consul checks that decided each host's
// health (CHECK is the source's, not "none") and lists the instances the
// source dropped with the reason; `status` shows each source's two ages;
// the status page shows the checks and the dropped instances too.
func TestStatusHostsShowsConsulChecksAndDropped(t *testing.T) {
	a := consultest.StartAgent(t, "dc1")
	reg := func(id, addr string, port int, status, output string, tags ...string) {
		a.Register(&api.AgentServiceRegistration{
			ID: id, Name: "web", Address: addr, Port: port, Tags: tags,
			Check: &api.AgentServiceCheck{CheckID: id + "-ttl", Name: id + " health", TTL: "10m", Status: status},
		})
		if err := a.Client.Agent().UpdateTTL(id+"-ttl", output, status); err != nil {
			t.Fatal(err)
		}
	}
	reg("web-1", "127.0.0.1", 8081, api.HealthCritical, "HTTP GET http://127.0.0.1:8081/health: 503 Service Unavailable\nOutput: overloaded")
	reg("web-2", "127.0.0.1", 8082, api.HealthPassing, "ok")
	reg("web-3", "127.0.0.1", 8083, api.HealthPassing, "ok", "canary")
	reg("web-4", "web-4.internal", 8084, api.HealthPassing, "ok")

	dir := t.TempDir()
	adminAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cfg := fmt.Sprintf(`xds:
  listen: 127.0.0.1:%d
admin:
  listen: %s
logging:
  level: error
sources:
  - name: consul
    consul:
      address: %q
      services: {include: [web], exclude_tags: [canary]}
      mapping: {resolve_hostnames: false}
`, freePort(t), adminAddr, a.Addr())
	runConfigApp(t, filepath.Join(dir, "xdsbridge.yaml"), cfg)

	out := waitCommandOutput(t, `Dropped by their source`, "status", "hosts", "web", "-admin", adminAddr)
	t.Logf("status hosts web:\n%s", out)
	web1 := `(?m)^web +127\.0\.0\.1:8081 +yes +consul +UNHEALTHY +source's +yes +UNHEALTHY +- +discovered, no xdsbridge health check: the source's own checks decide +` +
		regexp.QuoteMeta(`consul checks: critical (web-1-ttl 'HTTP GET http://127.0.0.1:8081/health: 503 Service Unavailable'), passing (serfHealth 'Agent alive and reachable')`) + `$`
	web2 := `(?m)^web +127\.0\.0\.1:8082 +yes +consul +HEALTHY +source's +yes +HEALTHY +- +discovered, no xdsbridge health check: the source's own checks decide +` +
		regexp.QuoteMeta(`consul checks: passing (serfHealth 'Agent alive and reachable'), passing (web-2-ttl 'ok')`) + `$`
	dropped := []string{
		`(?m)^SERVICE +SOURCE +INSTANCE +REASON +DETAIL$`,
		`(?m)^web +consul +web-3 on node ` + a.Node + ` \(dc1\) +excluded_tag +tag "canary" is in services\.exclude_tags$`,
		`(?m)^web +consul +web-4 on node ` + a.Node + ` \(dc1\) +unresolvable_address +address "web-4\.internal" is a hostname and mapping\.resolve_hostnames is false$`,
	}
	for _, re := range append([]string{web1, web2}, dropped...) {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("no %q in status hosts web", re)
		}
	}

	out, err := runCommand("status", "-admin", adminAddr)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Logf("status:\n%s", out)
	if re := `(?m)^SOURCE +STATE +SERVICES +CONFIRMED +CHANGED +DROPPED +LAST ERROR\nconsul +SYNCED +1 +[0-9.]+m?s ago +[0-9.]+m?s ago +1 excluded_tag, 1 unresolvable_address +-$`; !regexp.MustCompile(re).MatchString(out) {
		t.Errorf("no %q in status", re)
	}

	resp, err := http.Get("http://" + adminAddr + "/?service=web")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`<span class="why">consul checks: critical (web-1-ttl &#39;HTTP GET http://127.0.0.1:8081/health: 503 Service Unavailable&#39;), passing (serfHealth &#39;Agent alive and reachable&#39;)</span>`,
		`<td>consul</td><td class="wrap">web-3 on node ` + a.Node + ` (dc1)</td><td>excluded_tag</td><td class="wrap">tag &#34;canary&#34; is in services.exclude_tags</td>`,
		`<td class="dropped">1 excluded_tag 1 unresolvable_address </td>`,
		`<td>source&#39;s</td>`,
	} {
		if !strings.Contains(string(page), want) {
			t.Errorf("no %q in the status page", want)
		}
	}
}
