package healthcheck

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/xdsbridge/xdsbridge/config/decode"
	"github.com/xdsbridge/xdsbridge/sources"
)

func TestParseConfigDefaults(t *testing.T) {
	c, err := ParseConfig(json.RawMessage(`{"type": "http"}`), "health_check")
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		Type:               TypeHTTP,
		Interval:           decode.Duration(5 * time.Second),
		Timeout:            decode.Duration(time.Second),
		Jitter:             decode.Duration(500 * time.Millisecond),
		HealthyThreshold:   2,
		UnhealthyThreshold: 3,
		InitialState:       InitialUnknown,
		ReuseConnection:    new(true),
		HTTP:               &HTTPConfig{Path: "/", ExpectedStatuses: []StatusRange{{200, 300}}},
	}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("got %+v (http %+v)\nwant %+v", c, c.HTTP, want)
	}

	// jitter defaults to 10% of the configured interval; an explicit 0 is none.
	c, err = ParseConfig(json.RawMessage(`{"type": "tcp", "interval": "20s"}`), "hc")
	if err != nil || c.Jitter.D() != 2*time.Second {
		t.Fatalf("jitter = %v, %v; want 2s", c.Jitter.D(), err)
	}
	c, err = ParseConfig(json.RawMessage(`{"type": "tcp", "jitter": 0}`), "hc")
	if err != nil || c.Jitter != 0 {
		t.Fatalf("jitter = %v, %v; want 0", c.Jitter.D(), err)
	}

	// The type is inferred from the block; durations as numbers of seconds.
	c, err = ParseConfig(json.RawMessage(`{"grpc": {"service_name": "echo"}, "interval": 2, "initial_state": "Healthy"}`), "hc")
	if err != nil {
		t.Fatal(err)
	}
	if c.Type != TypeGRPC || c.GRPC.ServiceName != "echo" || c.Interval.D() != 2*time.Second || c.InitialState != InitialHealthy {
		t.Fatalf("got %+v", c)
	}

	// The YAML form, through the config package's decoder, embedded in a
	// larger document: UnmarshalJSON applies the defaults too.
	var doc struct {
		HealthCheck *Config `json:"health_check"`
	}
	yaml := "health_check:\n  http:\n    path: /healthz\n    expected_statuses: [{start: 200, end: 204}]\n  unhealthy_threshold: 5\n"
	if err := decode.Strict([]byte(yaml), &doc); err != nil {
		t.Fatal(err)
	}
	if err := doc.HealthCheck.Validate("health_check"); err != nil {
		t.Fatal(err)
	}
	if h := doc.HealthCheck; h.Type != TypeHTTP || h.HTTP.Path != "/healthz" || h.UnhealthyThreshold != 5 || h.HealthyThreshold != 2 ||
		!reflect.DeepEqual(h.HTTP.ExpectedStatuses, []StatusRange{{200, 204}}) {
		t.Fatalf("got %+v %+v", h, h.HTTP)
	}
}

func TestParseConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		raw, want string
	}{
		{``, "health_check: empty health check"},
		{`null`, "health_check: empty health check"},
		{`{}`, "health_check.type: missing"},
		{`{"type": "udp"}`, `health_check.type: "udp" is not one of tcp, http, grpc`},
		{`{"type": "tcp", "colour": 1}`, `health_check: unknown field "colour"`},
		{`{"type": "http", "http": {"paht": "/"}}`, `health_check: unknown field "paht"`},
		{`{"type": "tcp", "interval": "soon"}`, `invalid duration "soon"`},
		{`{"type": "tcp", "interval": "0s"}`, "health_check.interval: 0s is not in 10ms..1h"},
		{`{"type": "tcp", "timeout": 0}`, "health_check.timeout: 0s is not in 1ms..1m"},
		{`{"type": "tcp", "interval": "1us"}`, "health_check.interval: 1µs is not in 10ms..1h"},
		{`{"type": "tcp", "interval": "2h"}`, "health_check.interval: 2h is not in 10ms..1h"},
		{`{"type": "tcp", "timeout": "5m"}`, "health_check.timeout: 5m is not in 1ms..1m"},
		{`{"type": "tcp", "jitter": "2h"}`, "health_check.jitter: 2h is not in 0s..1h"},
		{`{"type": "tcp", "interval": 1e10}`, "health_check.interval: duration 1e+10 seconds is out of range"},
		{`{"type": "tcp", "healthy_threshold": 0}`, "health_check.healthy_threshold: 0 is not in 1..1000"},
		{`{"type": "tcp", "unhealthy_threshold": 5000}`, "health_check.unhealthy_threshold: 5000 is not in 1..1000"},
		{`{"type": "tcp", "unhealthy_threshold": -1}`, "health_check.unhealthy_threshold: expected a whole number from 0 to 4294967295, got -1"},
		{`{"type": "http", "http": {"expected_statuses": [{"start": "x"}]}}`, `health_check.http.expected_statuses[0].start: expected a whole number, got a string`},
		{`{"type": "tcp", "initial_state": "maybe"}`, `health_check.initial_state: "maybe" is not one of unknown, healthy, unhealthy`},
		{`{"type": "tcp", "http": {}}`, "health_check.http: only allowed with type http (type is tcp)"},
		{`{"type": "http", "grpc": {}}`, "health_check.grpc: only allowed with type grpc (type is http)"},
		{`{"http": {}, "grpc": {}}`, "health_check.type: missing"},
		{`{"type": "http", "http": {"path": "healthz"}}`, `health_check.http.path: "healthz" does not start with /`},
		{`{"type": "http", "http": {"path": "/a b"}}`, `health_check.http.path: "/a b" contains whitespace`},
		{`{"type": "http", "http": {"host": "a\nb"}}`, `health_check.http.host:`},
		{`{"type": "http", "http": {"expected_statuses": [{"start": 300, "end": 200}]}}`, "health_check.http.expected_statuses[0]: start 300 >= end 200"},
		{`{"type": "http", "http": {"expected_statuses": [{"start": 200, "end": 300}, {"start": 50, "end": 60}]}}`, "health_check.http.expected_statuses[0]: [50, 60) is outside the HTTP status codes [100, 600)"},
		{`{"type": "http", "http": {"expected_statuses": [{"start": 200, "end": 601}]}}`, "health_check.http.expected_statuses[0]: [200, 601) is outside"},
		{`{"type": "grpc", "grpc": {"service_name": "a\u0000"}}`, "health_check.grpc.service_name:"},
		{`[1]`, "health_check: want a mapping"},
	} {
		_, err := ParseConfig(json.RawMessage(tc.raw), "health_check")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseConfig(%s) = %v, want an error containing %q", tc.raw, err, tc.want)
		}
	}
}

func TestTargetKey(t *testing.T) {
	host := sources.HostKey{Address: "10.0.0.1", Port: 8080}
	parse := func(raw string) Config {
		t.Helper()
		c, err := ParseConfig(json.RawMessage(raw), "hc")
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a := Target{Host: host, Check: parse(`{"type": "http"}`)}
	b := Target{Host: host, Check: parse(`{"type": "http", "interval": "5s", "jitter": "500ms", "http": {"path": "/", "expected_statuses": [{"start": 200, "end": 300}]}}`)}
	if a.Key() != b.Key() {
		t.Errorf("equal checks, different keys:\n%s\n%s", a.Key(), b.Key())
	}
	// A Go-built config gets the same defaults (jitter aside).
	g := Target{Host: host, Check: Config{Type: "http", Jitter: decode.Duration(500 * time.Millisecond)}}
	if a.Key() != g.Key() {
		t.Errorf("Go-built config differs:\n%s\n%s", a.Key(), g.Key())
	}
	// The order of status ranges does not matter.
	c1 := Target{Host: host, Check: parse(`{"http": {"expected_statuses": [{"start": 200, "end": 300}, {"start": 404, "end": 405}]}}`)}
	c2 := Target{Host: host, Check: parse(`{"http": {"expected_statuses": [{"start": 404, "end": 405}, {"start": 200, "end": 300}]}}`)}
	if c1.Key() != c2.Key() {
		t.Errorf("status order changes the key")
	}
	for _, other := range []Target{
		{Host: host, Check: parse(`{"type": "http", "http": {"path": "/healthz"}}`)},
		{Host: host, Check: parse(`{"type": "http", "http": {"host": "x"}}`)},
		{Host: host, Check: parse(`{"type": "http", "interval": "1s"}`)},
		{Host: host, Check: parse(`{"type": "tcp"}`)},
		{Host: sources.HostKey{Address: "10.0.0.1", Port: 8081}, Check: a.Check},
	} {
		if other.Key() == a.Key() {
			t.Errorf("different targets share a key: %s", other.Key())
		}
	}
	if s := a.Key().String(); !strings.HasPrefix(s, "10.0.0.1:8080 http GET \"/\"") {
		t.Errorf("key string %q", s)
	}
	// Keys encode as JSON map keys.
	if _, err := json.Marshal(map[TargetKey]State{a.Key(): {}}); err != nil {
		t.Error(err)
	}
}
