package hds

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdsbridge/xdsbridge/config/decode"
	"github.com/xdsbridge/xdsbridge/healthcheck"
	"github.com/xdsbridge/xdsbridge/internal/testbin"
	"github.com/xdsbridge/xdsbridge/sources"
)

// hcBackend is an HTTP backend that tracks the connections open to it (an
// Envoy health checker with reuse_connection keeps one per host).
type hcBackend struct {
	host    sources.HostKey
	srv     *http.Server
	failing atomic.Bool
	mu      sync.Mutex
	open    map[net.Conn]bool
}

func startHCBackend(t *testing.T) *hcBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &hcBackend{host: sources.HostKey{Address: "127.0.0.1", Port: uint32(ln.Addr().(*net.TCPAddr).Port)}, open: map[net.Conn]bool{}}
	b.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if b.failing.Load() {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			io.WriteString(w, "ok")
		}),
		ConnState: func(c net.Conn, s http.ConnState) {
			b.mu.Lock()
			defer b.mu.Unlock()
			switch s {
			case http.StateNew:
				b.open[c] = true
			case http.StateClosed, http.StateHijacked:
				delete(b.open, c)
			}
		},
	}
	go b.srv.Serve(ln)
	t.Cleanup(func() { b.srv.Close() })
	return b
}

func (b *hcBackend) conns() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.open)
}

func startCheckerEnvoy(t *testing.T, bin, node, zone, hdsAddr string) *exec.Cmd {
	t.Helper()
	_, port, _ := net.SplitHostPort(hdsAddr)
	cfg := filepath.Join(t.TempDir(), "envoy.yaml")
	if err := os.WriteFile(cfg, []byte(testbin.HDSCheckerBootstrap(node, zone, port)), 0o644); err != nil {
		t.Fatal(err)
	}
	return testbin.StartEnvoy(t, bin, cfg).Cmd
}

// Four real Envoys in two zones check six real backends through HDS: each
// backend is probed by exactly k = 2 of them (counted at the backend), a
// failing backend turns unhealthy within interval × threshold + report
// interval, and a killed checker's backends move to others without a
// verdict changing.
func TestHDSRealEnvoys(t *testing.T) {
	bin := testbin.Envoy(t)
	const (
		interval           = 200 * time.Millisecond
		report             = 200 * time.Millisecond
		unhealthyThreshold = 2
	)
	var backends []*hcBackend
	var ts []healthcheck.Target
	for range 6 {
		b := startHCBackend(t)
		backends = append(backends, b)
		ts = append(ts, healthcheck.Target{Host: b.host, Check: healthcheck.Config{
			Type: healthcheck.TypeHTTP, Interval: decode.Duration(interval), Timeout: decode.Duration(time.Second),
			HealthyThreshold: 1, UnhealthyThreshold: unhealthyThreshold,
			HTTP: &healthcheck.HTTPConfig{Path: "/healthz"},
		}})
	}
	h := startServer(t, Options{K: 2, ReportInterval: report, Silence: time.Second}, ts)
	var envoys []*exec.Cmd
	for i := range 4 {
		envoys = append(envoys, startCheckerEnvoy(t, bin, fmt.Sprintf("checker-%d", i), []string{"zone-a", "zone-b"}[i%2], h.addr))
	}
	waitFor(t, "every backend healthy", func() bool { return len(h.transitions()) == len(ts) })
	exactlyK := func() bool {
		for _, b := range backends {
			if b.conns() != 2 {
				return false
			}
		}
		return true
	}
	waitFor(t, "every backend probed by exactly 2 checkers", exactlyK)
	for k, st := range h.s.Snapshot() {
		if len(st.Checkers) != 2 || st.Verdict != healthcheck.Healthy {
			t.Errorf("%s: %+v", k.Host, st)
		}
	}

	// A backend fails.
	backends[0].failing.Store(true)
	start := time.Now()
	waitFor(t, "the failing backend unhealthy", func() bool {
		trs := h.transitions()
		last := trs[len(trs)-1]
		return last.Key.Host == backends[0].host && last.Verdict == healthcheck.Unhealthy
	})
	// Bound: the probes (interval × threshold) and a report; the margin is
	// for a loaded host (CI runs every package's tests at once on 2 cores).
	d, bound := time.Since(start), unhealthyThreshold*interval+report
	t.Logf("the failing backend was unhealthy after %v (bound %v)", d.Round(time.Millisecond), bound)
	if d > bound+3*time.Second {
		t.Errorf("unhealthy after %v (bound %v)", d, bound)
	}
	backends[0].failing.Store(false)
	waitFor(t, "the backend healthy again", func() bool {
		trs := h.transitions()
		last := trs[len(trs)-1]
		return last.Key.Host == backends[0].host && last.Verdict == healthcheck.Healthy
	})
	before := len(h.transitions())

	// A checker is killed: its backends go to the others.
	envoys[0].Process.Kill()
	waitFor(t, "every backend probed by exactly 2 of the 3 checkers left", func() bool {
		for _, st := range h.s.Snapshot() {
			for _, c := range st.Checkers {
				if c.Node == "checker-0" {
					return false
				}
			}
		}
		return exactlyK()
	})
	time.Sleep(3 * report)
	if trs := h.transitions(); len(trs) != before {
		t.Errorf("verdicts changed when a checker died: %v", trs[before:])
	}
}
