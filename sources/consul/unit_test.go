package consul

import (
	"context"
	"encoding/json"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/consul/api"

	"github.com/xdsbridge/xdsbridge/config"
	"github.com/xdsbridge/xdsbridge/internal/testcerts"
	"github.com/xdsbridge/xdsbridge/sources"
)

func TestHealthOf(t *testing.T) {
	chk := func(id, status string) *api.HealthCheck { return &api.HealthCheck{CheckID: id, Status: status} }
	w := api.AgentWeights{Passing: 10, Warning: 2}
	tests := []struct {
		name     string
		checks   api.HealthChecks
		weights  api.AgentWeights
		degraded bool
		want     sources.HealthStatus
		weight   uint32
	}{
		{"no checks", nil, w, false, sources.HealthHealthy, 10},
		{"all passing", api.HealthChecks{chk("serfHealth", "passing"), chk("svc", "passing")}, w, false, sources.HealthHealthy, 10},
		{"warning", api.HealthChecks{chk("serfHealth", "passing"), chk("svc", "warning")}, w, false, sources.HealthHealthy, 2},
		{"warning as degraded", api.HealthChecks{chk("svc", "warning")}, w, true, sources.HealthDegraded, 2},
		{"warning with weight 0 is not routed", api.HealthChecks{chk("svc", "warning")}, api.AgentWeights{Passing: 1}, false, sources.HealthDraining, 0},
		{"critical service check", api.HealthChecks{chk("svc", "critical"), chk("x", "warning")}, w, false, sources.HealthUnhealthy, 10},
		{"critical node check", api.HealthChecks{chk("serfHealth", "critical"), chk("svc", "passing")}, w, false, sources.HealthUnhealthy, 10},
		{"node maintenance", api.HealthChecks{chk("_node_maintenance", "critical"), chk("svc", "passing")}, w, false, sources.HealthDraining, 0},
		{"own service maintenance", api.HealthChecks{chk("_service_maintenance:web-1", "critical")}, w, false, sources.HealthDraining, 0},
		{"other service's maintenance is a plain critical", api.HealthChecks{chk("_service_maintenance:web-2", "critical")}, w, false, sources.HealthUnhealthy, 10},
		{"absent weights are Consul's defaults", api.HealthChecks{chk("svc", "warning")}, api.AgentWeights{}, false, sources.HealthHealthy, 1},
		{"unknown status counts as passing", api.HealthChecks{chk("svc", "maintenance?")}, w, false, sources.HealthHealthy, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, weight := healthOf("web-1", tt.checks, tt.weights, tt.degraded)
			if got != tt.want || weight != tt.weight {
				t.Errorf("healthOf = %v, %d; want %v, %d", got, weight, tt.want, tt.weight)
			}
		})
	}
}

func TestNextIndex(t *testing.T) {
	tests := []struct {
		prev, got, want uint64
		reset           bool
	}{
		{0, 0, 1, false},    // 0 is treated as 1
		{0, 42, 42, false},  // first read
		{42, 42, 42, false}, // wait timed out
		{42, 50, 50, false},
		{50, 7, 0, true}, // went backwards: start over
		{1, 0, 0, true},  // backwards to 0 resets too
	}
	for _, tt := range tests {
		got, reset := nextIndex(tt.prev, tt.got)
		if got != tt.want || reset != tt.reset {
			t.Errorf("nextIndex(%d, %d) = %d, %v; want %d, %v", tt.prev, tt.got, got, reset, tt.want, tt.reset)
		}
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	tests := []struct{ raw, field string }{
		{`{"adress": "x"}`, `"adress"`},
		{`{"scheme": "ftp"}`, "scheme"},
		{`{"token": "a", "token_file": "b"}`, "token_file"},
		{`{"tls": {"cert_file": "c"}}`, "tls.key_file"},
		{`{"consistency": "eventual"}`, "consistency"},
		{`{"consistency": "consistent", "use_cache": true}`, "use_cache"},
		{`{"wait_time": "11m"}`, "wait_time"},
		{`{"wait_time": "bogus"}`, "wait_time"},
		{`{"max_concurrent_queries": 500}`, "max_concurrent_queries"},
		{`{"max_concurrent_queries": 7, "config_entries": true}`, "max_concurrent_queries: 7 leaves no query"},
		{`{"max_concurrent_queries": 6, "failover_datacenters": ["dc2"]}`, "max_concurrent_queries: 6 leaves no query for service reads besides the service lists and change feeds of 2 datacenters (3 each); at least 7"},
		{`{"config_entries": "yes"}`, "config_entries"},
		{`{"rate_limit": -1}`, "rate_limit"},
		{`{"retry_min": "10s", "retry_max": "1s"}`, "retry_max"},
		{`{"coalesce": "2s"}`, "coalesce"},
		{`{"failover_datacenters": ["dc2", "dc2"]}`, "failover_datacenters[1]"},
		{`{"datacenter": "dc1", "failover_datacenters": ["dc1"]}`, "failover_datacenters[0]"},
		{`{"services": {"include": ["/(/"]}}`, "services.include[0]"},
		{`{"services": {"exclude": [""]}}`, "services.exclude[0]"},
		{`{"services": {"kinds": ["sidecar"]}}`, "services.kinds[0]"},
		{`{"mapping": {"tagged_address": "lan4"}}`, "mapping.tagged_address"},
		{`{"mapping": {"warning": "sad"}}`, "mapping.warning"},
		{`{"mapping": {"cluster_name": "{datacenter}"}}`, "mapping.cluster_name"},
		{`{"mapping": {"cluster_name": "{service}.{zone}"}}`, "mapping.cluster_name"},
		{`{"mapping": {"cluster_name": "{service}/{datacenter}"}}`, `mapping.cluster_name: "{service}/{datacenter}" holds "/"`},
		{`{"address": "unix:///tmp/consul.sock"}`, "address"},
		{`{"max_stale": "2h"}`, "max_stale: 2h is not in 0s..1h"},
		{`{"retry_min": "1us"}`, "retry_min: 1µs is not in 1ms..1m"},
		{`{"retry_max": "2h"}`, "retry_max: 2h is not in 1ms..1h"},
		{`{"retry_max": 1e10}`, "retry_max: duration 1e+10 seconds is out of range"},
		{`{"hinted_refresh": "1000h"}`, "hinted_refresh: 1000h is not in 1s..24h"},
		{`{"rate_burst": 1000000}`, "rate_burst: 1000000 is not in 1..10000"},
		{`{"mapping": {"resolve_timeout": "1h"}}`, "mapping.resolve_timeout: 1h is not in 1ms..1m"},
		{`{"address": "http://user:PASS@127.0.0.1:8500"}`, "address: user:password@"},
		{`{"address": "user:PASS@127.0.0.1:8500"}`, "address: user:password@"},
		{`{"address": "https://user@consul.internal/"}`, "address: user:password@"},
	}
	for _, tt := range tests {
		_, err := New("c", json.RawMessage(tt.raw), sources.Env{})
		if err == nil || !strings.Contains(err.Error(), tt.field) {
			t.Errorf("New(%s) error = %v; want one naming %s", tt.raw, err, tt.field)
		}
		if err != nil && strings.Contains(err.Error(), "PASS") {
			t.Errorf("New(%s) error = %v shows the password", tt.raw, err)
		}
	}
}

func TestConfigEnvAndOverrides(t *testing.T) {
	t.Setenv("CONSUL_HTTP_ADDR", "consul.example:8501")
	t.Setenv("CONSUL_HTTP_TOKEN", "env-secret-token")
	dir := t.TempDir()
	caFile := testcerts.NewCA(t, "agent-ca").WriteCA(t, dir, "ca.pem") // New loads it
	t.Setenv("CONSUL_CACERT", caFile)
	t.Setenv("CONSUL_TLS_SERVER_NAME", "server.dc1.consul")
	s, err := New("c", json.RawMessage(`{}`), sources.Env{})
	if err != nil {
		t.Fatal(err)
	}
	ac := s.(*Source).set.apiConfig
	got := []string{ac.Address, ac.Token, ac.TLSConfig.CAFile, ac.TLSConfig.Address}
	if diff := cmp.Diff([]string{"consul.example:8501", "env-secret-token", caFile, "server.dc1.consul"}, got); diff != "" {
		t.Errorf("from the environment (-want +got):\n%s", diff)
	}
	s, err = New("c", json.RawMessage(`{"address": "127.0.0.1:8500", "token": "cfg-secret-token", "tls": {"ca_file": "ca.pem", "server_name": "x"}}`), sources.Env{BaseDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	ac = s.(*Source).set.apiConfig
	got = []string{ac.Address, ac.Token, ac.TLSConfig.CAFile, ac.TLSConfig.Address}
	if diff := cmp.Diff([]string{"127.0.0.1:8500", "cfg-secret-token", filepath.Join(dir, "ca.pem"), "x"}, got); diff != "" {
		t.Errorf("config overrides (-want +got):\n%s", diff)
	}
	b, err := json.Marshal(s.(*Source).DebugInfo())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "secret-token") {
		t.Errorf("DebugInfo shows the token: %s", b)
	}
}

func TestSelector(t *testing.T) {
	sel, err := newSelector(Selection{Include: []string{"web", "/^api-/"}, Exclude: []string{"api-internal"}, IncludeTags: []string{"public"}, ExcludeTags: []string{"canary"}, Kinds: []string{"mesh-gateway"}})
	if err != nil {
		t.Fatal(err)
	}
	services := map[string][]string{"web": {"public"}, "api-x": {"public", "canary"}, "api-internal": {"public"}, "db": {"public"}, "api-y": {"private"}}
	var got []string
	for name, tags := range services {
		if sel.service(name, tags) {
			got = append(got, name)
		}
	}
	if diff := cmp.Diff([]string{"api-x", "web"}, sortedCopy(got)); diff != "" {
		t.Errorf("selected services (-want +got):\n%s", diff)
	}
	instances := []struct {
		kind string
		tags []string
		want bool
	}{
		{"", []string{"public"}, true},
		{"", []string{"public", "canary"}, false},
		{"", []string{"other"}, false},
		{"connect-proxy", []string{"public"}, false},
		{"mesh-gateway", []string{"public"}, true},
	}
	for _, in := range instances {
		if got := sel.instance(in.kind, in.tags); got != in.want {
			t.Errorf("instance(%q, %v) = %v, want %v", in.kind, in.tags, got, in.want)
		}
	}
}

func sortedCopy(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

type fakeResolver map[string][]netip.Addr

func (f fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := f[host]; ok {
		return a, nil
	}
	return nil, &netErr{host}
}

type netErr struct{ host string }

func (e *netErr) Error() string { return "no such host " + e.host }

func TestAddressChoiceAndHostnames(t *testing.T) {
	entry := func(svcAddr, nodeAddr string, svcTagged map[string]api.ServiceAddress, nodeTagged map[string]string) *api.ServiceEntry {
		return &api.ServiceEntry{
			Node:    &api.Node{Node: "n1", Address: nodeAddr, TaggedAddresses: nodeTagged, Datacenter: "dc1"},
			Service: &api.AgentService{ID: "s-1", Service: "s", Port: 80, Address: svcAddr, TaggedAddresses: svcTagged},
		}
	}
	tests := []struct {
		name, tagged string
		e            *api.ServiceEntry
		want         string // address:port, or "" when skipped
		host         string
	}{
		{"service address", "", entry("10.0.0.1", "10.0.0.2", nil, nil), "10.0.0.1:80", ""},
		{"node address", "", entry("", "10.0.0.2", nil, nil), "10.0.0.2:80", ""},
		{"service tagged wan with port", "wan", entry("10.0.0.1", "10.0.0.2", map[string]api.ServiceAddress{"wan": {Address: "192.0.2.1", Port: 8443}}, nil), "192.0.2.1:8443", ""},
		{"node tagged wan_ipv6", "wan_ipv6", entry("10.0.0.1", "10.0.0.2", nil, map[string]string{"wan_ipv6": "2001:db8::1"}), "[2001:db8::1]:80", ""},
		{"tagged absent falls back", "lan_ipv6", entry("10.0.0.1", "", nil, nil), "10.0.0.1:80", ""},
		{"hostname resolved", "", entry("svc.example", "", nil, nil), "10.9.9.9:80", "svc.example"},
		{"hostname unresolvable skipped", "", entry("nope.example", "10.0.0.2", nil, nil), "", ""},
		{"no address skipped", "", entry("", "", nil, nil), "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set, err := parseConfig(json.RawMessage(`{"mapping": {"tagged_address": "`+tt.tagged+`"}}`), "")
			if err != nil {
				t.Fatal(err)
			}
			mp := &mapper{m: set.mapping, sel: set.sel, log: testLogger(t), resolver: fakeResolver{"svc.example": {netip.MustParseAddr("10.9.9.9")}}}
			ins, _, _ := mp.mapEntries(context.Background(), "s", dcInfo{name: "dc1"}, []*api.ServiceEntry{tt.e})
			got, host := "", ""
			if len(ins) == 1 {
				got, host = ins[0].endpoint.Key().String(), ins[0].endpoint.Hostname
				if err := sources.ValidateEndpoint("e", ins[0].endpoint); err != nil {
					t.Error(err)
				}
			}
			if got != tt.want || host != tt.host {
				t.Errorf("got %q (hostname %q), want %q (hostname %q)", got, host, tt.want, tt.host)
			}
		})
	}
}

func TestTokenBucket(t *testing.T) {
	now := time.Unix(0, 0)
	b := newTokenBucket(2, 3)
	b.now = func() time.Time { return now }
	var got []time.Duration
	for i := 0; i < 5; i++ {
		got = append(got, b.reserve())
	}
	want := []time.Duration{0, 0, 0, 500 * time.Millisecond, time.Second}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("delays (-want +got):\n%s", diff)
	}
	now = now.Add(10 * time.Second) // refills to the burst, not beyond
	got = got[:0]
	for i := 0; i < 4; i++ {
		got = append(got, b.reserve())
	}
	if diff := cmp.Diff([]time.Duration{0, 0, 0, 500 * time.Millisecond}, got); diff != "" {
		t.Errorf("delays after refill (-want +got):\n%s", diff)
	}
}

func TestBackoffCapped(t *testing.T) {
	b := backoff{min: 100 * time.Millisecond, max: time.Second}
	for i := 0; i < 10; i++ {
		d := b.next()
		if d > time.Second || d < 50*time.Millisecond {
			t.Fatalf("step %d: %s outside [50ms, 1s]", i, d)
		}
	}
	if b.cur != time.Second {
		t.Errorf("step grew to %s, want the cap 1s", b.cur)
	}
}

func TestExampleConfig(t *testing.T) {
	c, err := config.Load("../../examples/consul.yaml", []string{"consul"})
	if err != nil {
		t.Fatal(err)
	}
	if c.XDS.Listen != "127.0.0.1:18000" {
		t.Errorf("xds.listen = %q", c.XDS.Listen)
	}
	if _, err := New(c.Sources[0].Name, c.Sources[0].Raw, sources.Env{BaseDir: c.BaseDir}); err != nil {
		t.Errorf("examples/consul.yaml: %v", err)
	}
}
