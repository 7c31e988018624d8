package consul

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/xdsbridge/xdsbridge/sources"
	"github.com/xdsbridge/xdsbridge/sources/consul/consultest"
	"github.com/xdsbridge/xdsbridge/sources/sourcestest"
)

// agent is the shared real-agent helper.
type agent = consultest.Agent

func startAgent(t testing.TB, dc string, extra ...string) *agent {
	t.Helper()
	return consultest.StartAgent(t, dc, extra...)
}

// startSource runs a source with the given config block until the test
// ends, then checks that Run returned nil promptly.
func startSource(t testing.TB, raw string) (*Source, *sourcestest.Sink) {
	t.Helper()
	return startSourceWith(t, raw, nil)
}

// startSourceWith is startSource with a hook to adjust the source (test
// hooks) before it runs.
func startSourceWith(t testing.TB, raw string, adjust func(*Source)) (*Source, *sourcestest.Sink) {
	t.Helper()
	src, err := New("consul", json.RawMessage(raw), sources.Env{Logger: testLogger(t)})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	s := src.(*Source)
	if adjust != nil {
		adjust(s)
	}
	sink := sourcestest.Run(t, s, 10*time.Second)
	return s, sink
}

func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// gate is an http.RoundTripper that fails every request while closed,
// making Consul unreachable for the source under test.
type gate struct {
	next   http.RoundTripper
	closed atomic.Bool
}

func (g *gate) RoundTrip(r *http.Request) (*http.Response, error) {
	if g.closed.Load() {
		return nil, errors.New("test gate: consul unreachable")
	}
	return g.next.RoundTrip(r)
}

// ttlService is a registration with one TTL check named "<id>-ttl".
func ttlService(id, name, addr string, port int, tags []string, meta map[string]string, status string) *api.AgentServiceRegistration {
	return &api.AgentServiceRegistration{
		ID: id, Name: name, Address: addr, Port: port, Tags: tags, Meta: meta,
		Weights: &api.AgentWeights{Passing: 3, Warning: 1},
		Check:   &api.AgentServiceCheck{CheckID: id + "-ttl", TTL: "10m", Status: status},
	}
}
