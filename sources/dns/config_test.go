package dns

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/xdsbridge/xdsbridge/config/decode"
	"github.com/xdsbridge/xdsbridge/sources"
)

func mustJSON(t testing.TB, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"empty host name", `{services: [{name: a, hosts: [{name: a.test, port: 1}]}, {name: b, hosts: [{name: b.test, port: 1}]}, {name: c, hosts: [{name: "", port: 1}]}]}`,
			"services[2].hosts[0].name: empty"},
		{"port range", `{services: [{name: a, hosts: [{name: a.test, port: 1}]}, {name: b, hosts: [{name: b.test, port: 70000}]}]}`,
			"services[1].hosts[0].port: 70000 is not in 1..65535"},
		{"port missing", `{services: [{name: a, hosts: [{name: a.test}]}]}`, "services[0].hosts[0].port: missing"},
		{"unknown type", `{services: [{name: a, type: FOO, hosts: [{name: a.test, port: 1}]}]}`,
			`services[0].type: unknown type "FOO" (want STRICT_DNS or LOGICAL_DNS)`},
		{"unknown field", `{services: [{name: a, hosts: [{name: a.test, port: 1}], ttl: 3}]}`, `unknown field "ttl"`},
		{"unknown top field", `{servers: [], services: []}`, `unknown field "servers"`},
		{"no services", `{resolvers: ["127.0.0.1"]}`, "services: none configured"},
		{"no hosts", `{services: [{name: a}]}`, "services[0].hosts: empty"},
		{"timeout too long", `{timeout: 1h, services: [{name: a, hosts: [{name: a.test, port: 1}]}]}`, "timeout: 1h is not in 1ms..1m"},
		{"timeout too short", `{timeout: 1us, services: [{name: a, hosts: [{name: a.test, port: 1}]}]}`, "timeout: 1µs is not in 1ms..1m"},
		{"max_concurrency too large", `{max_concurrency: 100000, services: [{name: a, hosts: [{name: a.test, port: 1}]}]}`, "max_concurrency: 100000 is not in 0..1024"},
		{"refresh rate too long", `{services: [{name: a, dns_refresh_rate: 1000h, hosts: [{name: a.test, port: 1}]}]}`, "services[0].dns_refresh_rate: 1000h is not in 1ms..24h"},
		{"refresh rate overflow", `{services: [{name: a, dns_refresh_rate: 1e10, hosts: [{name: a.test, port: 1}]}]}`, "services[0].dns_refresh_rate: duration 1e+10 seconds is out of range"},
		{"failure refresh too long", `{services: [{name: a, dns_failure_refresh_rate: 48h, hosts: [{name: a.test, port: 1}]}]}`, "services[0].dns_failure_refresh_rate: 48h is not in 1ms..24h"},
		{"jitter too long", `{services: [{name: a, dns_jitter: 25h, hosts: [{name: a.test, port: 1}]}]}`, "services[0].dns_jitter: 25h is not in 0s..24h"},
		{"bad service name", `{services: [{name: "a b", hosts: [{name: a.test, port: 1}]}]}`, "services[0].name"},
		{"service named like a subset", `{services: [{name: "a/v1", hosts: [{name: a.test, port: 1}]}]}`, `services[0].name: service name "a/v1" contains "/"`},
		{"duplicate service", `{services: [{name: a, hosts: [{name: a.test, port: 1}]}, {name: a, hosts: [{name: b.test, port: 1}]}]}`,
			`services[1].name: duplicate service "a" (also services[0])`},
		{"bad dns name", `{services: [{name: a, hosts: [{name: "a..test", port: 1}]}]}`, `services[0].hosts[0].name: "a..test" is not a valid DNS name`},
		{"family", `{services: [{name: a, dns_lookup_family: V4_PREFERRED, hosts: [{name: a.test, port: 1}]}]}`,
			`services[0].dns_lookup_family: unknown family "V4_PREFERRED"`},
		{"logical two hosts", `{services: [{name: a, type: LOGICAL_DNS, hosts: [{name: a.test, port: 1}, {name: b.test, port: 1}]}]}`,
			"services[0].hosts: LOGICAL_DNS takes exactly one host (got 2)"},
		{"srv port", `{services: [{name: a, srv: true, hosts: [{name: _x._tcp.a.test, port: 1}]}]}`,
			"services[0].hosts[0].port: must not be set in SRV mode"},
		{"refresh too small", `{services: [{name: a, dns_refresh_rate: 1us, hosts: [{name: a.test, port: 1}]}]}`,
			"services[0].dns_refresh_rate: 1µs is not in 1ms..24h"},
		{"refresh zero", `{services: [{name: a, dns_refresh_rate: 0s, hosts: [{name: a.test, port: 1}]}]}`,
			"services[0].dns_refresh_rate: 0s is not in 1ms..24h"},
		{"refresh zero number", `{services: [{name: a, dns_refresh_rate: 0, hosts: [{name: a.test, port: 1}]}]}`,
			"services[0].dns_refresh_rate: 0s is not in 1ms..24h"},
		{"failure refresh too small", `{services: [{name: a, dns_failure_refresh_rate: 1ns, hosts: [{name: a.test, port: 1}]}]}`,
			"services[0].dns_failure_refresh_rate: 1ns is not in 1ms..24h"},
		{"failure refresh zero", `{services: [{name: a, dns_failure_refresh_rate: 0s, hosts: [{name: a.test, port: 1}]}]}`,
			"services[0].dns_failure_refresh_rate: 0s is not in 1ms..24h"},
		{"bad duration", `{timeout: fast, services: [{name: a, hosts: [{name: a.test, port: 1}]}]}`, "invalid duration"},
		{"resolver", `{resolvers: ["127.0.0.1:53", "dns.example"], services: [{name: a, hosts: [{name: a.test, port: 1}]}]}`,
			`resolvers[1]: "dns.example" is not an IP address`},
		{"concurrency", `{max_concurrency: -1, services: [{name: a, hosts: [{name: a.test, port: 1}]}]}`, "max_concurrency: -1 is negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var raw json.RawMessage
			if err := decode.Strict([]byte(tc.yaml), &raw); err != nil {
				t.Fatal(err)
			}
			_, err := New("dns", raw, sources.Env{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	var raw json.RawMessage
	err := decode.Strict([]byte(`
resolvers: ["10.0.0.53", "[::1]:5353"]
services:
  - name: billing
    hosts: [{name: billing.internal, port: 8080}]
  - name: legacy
    type: LOGICAL_DNS
    dns_lookup_family: V4_ONLY
    dns_refresh_rate: 10s
    respect_dns_ttl: true
    dns_jitter: 0s
    hosts: [{name: legacy.internal., port: 443}]
`), &raw)
	if err != nil {
		t.Fatal(err)
	}
	c, err := parseConfig(raw)
	if err != nil {
		t.Fatal(err)
	}
	zero := decode.Duration(0)
	dur := func(d time.Duration) *decode.Duration { c := decode.Duration(d); return &c }
	want := &Config{
		Resolvers:      []string{"10.0.0.53", "[::1]:5353"},
		Timeout:        decode.Duration(5 * time.Second),
		MaxConcurrency: 64,
		Services: []ServiceConfig{{
			Name: "billing", Type: "STRICT_DNS", DNSLookupFamily: "AUTO",
			DNSRefreshRate: dur(5 * time.Second), DNSFailureRefreshRate: dur(5 * time.Second),
			Hosts: []HostConfig{{Name: "billing.internal", Port: 8080}},
		}, {
			Name: "legacy", Type: "LOGICAL_DNS", DNSLookupFamily: "V4_ONLY", RespectDNSTTL: true, DNSJitter: &zero,
			DNSRefreshRate: dur(10 * time.Second), DNSFailureRefreshRate: dur(10 * time.Second),
			Hosts: []HostConfig{{Name: "legacy.internal.", Port: 443}},
		}},
	}
	if diff := cmp.Diff(want, c); diff != "" {
		t.Fatalf("config (-want +got):\n%s", diff)
	}
	s, err := New("dns", raw, sources.Env{})
	if err != nil {
		t.Fatal(err)
	}
	servers, err := s.(*Source).servers()
	if err != nil || !cmp.Equal(servers, []string{"10.0.0.53:53", "[::1]:5353"}) {
		t.Fatalf("servers = %v, %v", servers, err)
	}
	if got := s.(*Source).targets[1].spec; got.fqdn != "legacy.internal." || got.name != "legacy.internal" {
		t.Fatalf("spec %+v", got)
	}
}

func TestMetricsRegistrationConflict(t *testing.T) {
	reg := newRegistry()
	raw := mustJSON(t, srcCfg("127.0.0.1:53", strict("a", host("a.test", 1))))
	if _, err := New("dns", raw, sources.Env{Metrics: reg}); err != nil {
		t.Fatal(err)
	}
	if _, err := New("other", raw, sources.Env{Metrics: reg}); err != nil {
		t.Fatalf("second source with another name: %v", err)
	}
	if _, err := New("dns", raw, sources.Env{Metrics: reg}); err == nil || !strings.Contains(err.Error(), "metrics") {
		t.Fatalf("same source name twice: %v", err)
	}
}
