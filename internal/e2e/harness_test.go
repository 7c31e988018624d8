// Package e2e runs the whole bridge in-process against real Envoys and real
// HTTP backends on loopback.
package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdsbridge/xdsbridge/config"
	"github.com/xdsbridge/xdsbridge/config/decode"
	"github.com/xdsbridge/xdsbridge/internal/app"
	"github.com/xdsbridge/xdsbridge/internal/testbin"
)

func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// bridge is the bridge under test, with a file source on a temp file.
type bridge struct {
	app      *app.App
	services string // path of the services file
	cancel   context.CancelFunc
	done     chan error
	stopOnce sync.Once
}

func startBridge(t *testing.T, servicesYAML string, extraSources string) *bridge {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "services.yaml"), []byte(servicesYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	cfgYAML := fmt.Sprintf(`
sources:
  - name: static
    file: {path: services.yaml, settle: 10ms}
%s`, extraSources)
	cfg, err := config.Parse([]byte(cfgYAML), dir, app.SourceTypeNames())
	if err != nil {
		t.Fatal(err)
	}
	return runBridge(t, cfg)
}

// startBridgeConfig runs the bridge from a whole config file (YAML) as if
// it were in dir: dir holds its services file, services.yaml, and whatever
// else it names by a relative path (certificates). edit, if not nil, may
// change the parsed config before it is used.
func startBridgeConfig(t *testing.T, dir, cfgYAML string, edit func(*config.Config)) *bridge {
	t.Helper()
	cfg, err := config.Parse([]byte(cfgYAML), dir, app.SourceTypeNames())
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(cfg)
	}
	return runBridge(t, cfg)
}

// runBridge runs cfg on loopback ports, with short debouncing and
// warn-level logs into the test's log.
func runBridge(t *testing.T, cfg *config.Config) *bridge {
	t.Helper()
	return runBridgeOn(t, cfg, "127.0.0.1:0")
}

// runBridgeOn is runBridge with the xDS server on xdsListen (a restarted
// bridge takes its predecessor's address, for its clients to reconnect).
func runBridgeOn(t *testing.T, cfg *config.Config, xdsListen string) *bridge {
	t.Helper()
	cfg.XDS.Listen, cfg.Admin.Listen = xdsListen, "127.0.0.1:0"
	cfg.Debounce = config.Debounce{Quiet: decode.Duration(10 * time.Millisecond), Max: decode.Duration(100 * time.Millisecond)}
	cfg.Logging.Level = "warn"
	a, err := app.New(cfg, app.NewLogger(cfg.Logging, &testWriter{t: t}))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &bridge{app: a, services: filepath.Join(cfg.BaseDir, "services.yaml"), cancel: cancel, done: make(chan error, 1)}
	go func() { b.done <- a.Run(ctx) }()
	t.Cleanup(func() { b.stop(t) })
	return b
}

// stop stops the bridge and waits for Run to return; again, it does nothing.
func (b *bridge) stop(t *testing.T) {
	t.Helper()
	b.stopOnce.Do(func() {
		b.cancel()
		if err := <-b.done; err != nil {
			t.Errorf("bridge: %v", err)
		}
	})
}

// writeServices replaces the services file atomically, as an editor would.
func (b *bridge) writeServices(t *testing.T, content string) {
	t.Helper()
	tmp := b.services + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, b.services); err != nil {
		t.Fatal(err)
	}
}

type testWriter struct {
	t  *testing.T
	mu sync.Mutex
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// backend is a real HTTP server answering with its name.
type backend struct {
	name      string
	port      uint32
	srv       *http.Server
	unhealthy atomic.Bool // /healthz answers 503 when set
}

func startBackends(t *testing.T, n int) []*backend {
	t.Helper()
	var out []*backend
	for i := 0; i < n; i++ {
		out = append(out, startBackend(t, fmt.Sprintf("b%d", i+1), "127.0.0.1:0"))
	}
	return out
}

// startBackendAt starts a backend on addr and returns its name.
func startBackendAt(t *testing.T, name, addr string) string {
	t.Helper()
	startBackend(t, name, addr)
	return name
}

func startBackend(t *testing.T, name, addr string) *backend {
	t.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	b := &backend{name: name, port: uint32(lis.Addr().(*net.TCPAddr).Port)}
	b.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" && b.unhealthy.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, b.name)
	}), ReadHeaderTimeout: 5 * time.Second}
	go b.srv.Serve(lis)
	t.Cleanup(func() { b.srv.Close() })
	return b
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// envoy is a real Envoy started from one of the example bootstraps
// (testbin.StartEnvoy), with the address of its listener.
type envoy struct {
	*testbin.EnvoyProcess
	listener string
}

var portLine = regexp.MustCompile(`port_value: (18000|10000|9901)\b`)

// startEnvoy runs examples/<bootstrap> with its ports rewritten: the xDS
// server's, a free one for the listener and 0 for the admin.
func startEnvoy(t *testing.T, bootstrap, xdsAddr string) *envoy {
	t.Helper()
	return startEnvoyCerts(t, bootstrap, xdsAddr, "")
}

// startEnvoyCerts is startEnvoy with the bootstrap's relative certificate
// paths (certs/...) read from certDir instead, and each pair of replace
// (old, new) replaced in it.
func startEnvoyCerts(t *testing.T, bootstrap, xdsAddr, certDir string, replace ...string) *envoy {
	t.Helper()
	return launchEnvoy(t, bootstrap, xdsAddr, certDir, true, replace...)
}

// launchEnvoy is startEnvoyCerts; unless waitReady, it returns as soon as
// Envoy's admin answers, before Envoy has initialized (got its clusters).
func launchEnvoy(t *testing.T, bootstrap, xdsAddr, certDir string, waitReady bool, replace ...string) *envoy {
	t.Helper()
	bin := testbin.Envoy(t)
	src, err := os.ReadFile(filepath.Join(repoRoot(t), "examples", bootstrap))
	if err != nil {
		t.Fatal(err)
	}
	_, xdsPort, _ := net.SplitHostPort(xdsAddr)
	lisPort := freePort(t)
	cfg := portLine.ReplaceAllStringFunc(string(src), func(m string) string {
		switch {
		case strings.HasSuffix(m, "18000"):
			return "port_value: " + xdsPort
		case strings.HasSuffix(m, "10000"):
			return "port_value: " + strconv.Itoa(lisPort)
		default:
			return "port_value: 0"
		}
	})
	if certDir != "" {
		cfg = strings.ReplaceAll(cfg, "filename: certs/", "filename: "+certDir+"/")
	}
	for i := 0; i+1 < len(replace); i += 2 {
		if !strings.Contains(cfg, replace[i]) {
			t.Fatalf("examples/%s has no %q", bootstrap, replace[i])
		}
		cfg = strings.ReplaceAll(cfg, replace[i], replace[i+1])
	}
	path := filepath.Join(t.TempDir(), "envoy.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	e := &envoy{EnvoyProcess: testbin.StartEnvoy(t, bin, path), listener: fmt.Sprintf("127.0.0.1:%d", lisPort)}
	if waitReady {
		e.WaitReady(t, 20*time.Second)
	}
	return e
}

// assertNoRejections fails the test if Envoy rejected any xDS update.
func (e *envoy) assertNoRejections(t *testing.T) {
	t.Helper()
	for k, v := range e.Stats(t, "update_rejected") {
		if v != 0 {
			t.Errorf("envoy rejected an xDS update: %s = %d", k, v)
		}
	}
}

// clusterHosts lists the hosts Envoy's admin /clusters shows for a cluster.
func (e *envoy) clusterHosts(t *testing.T, cluster string) []string {
	t.Helper()
	body, err := e.Get("/clusters")
	if err != nil {
		t.Fatal(err)
	}
	set := map[string]bool{}
	prefix := cluster + "::"
	for _, line := range strings.Split(body, "\n") {
		rest, ok := strings.CutPrefix(line, prefix)
		if !ok {
			continue
		}
		parts := strings.Split(rest, "::")
		if len(parts) >= 2 && strings.Contains(parts[0], ":") && parts[1] == "cx_active" {
			set[parts[0]] = true
		}
	}
	out := make([]string, 0, len(set))
	for h := range set {
		out = append(out, h)
	}
	sort.Strings(out)
	return out
}

// hit sends n requests through Envoy and returns which backends answered.
func (e *envoy) hit(n int) (map[string]int, error) {
	got := map[string]int{}
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for i := 0; i < n; i++ {
		resp, err := client.Get("http://" + e.listener + "/")
		if err != nil {
			return got, err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return got, fmt.Errorf("status %s: %s", resp.Status, b)
		}
		got[string(b)]++
	}
	return got, nil
}

// waitTraffic waits until n requests in a row reach exactly the backends
// named.
func (e *envoy) waitTraffic(t *testing.T, want ...string) {
	t.Helper()
	sort.Strings(want)
	waitFor(t, 20*time.Second, fmt.Sprintf("traffic to exactly %v", want), func() error {
		got, err := e.hit(10 * len(want))
		if err != nil {
			return err
		}
		names := make([]string, 0, len(got))
		for n := range got {
			names = append(names, n)
		}
		sort.Strings(names)
		if strings.Join(names, ",") != strings.Join(want, ",") {
			return fmt.Errorf("reached %v", got)
		}
		return nil
	})
}

// waitFor polls cond until it returns nil.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for {
		if err = cond(); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s: %v", timeout, what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func servicesYAML(cluster string, bs ...*backend) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "services:\n  %s:\n    endpoints:\n", cluster)
	if len(bs) == 0 {
		sb.WriteString("      []\n")
	}
	for _, b := range bs {
		fmt.Fprintf(&sb, "      - {address: 127.0.0.1, port: %d}\n", b.port)
	}
	return sb.String()
}

func hostsOf(bs ...*backend) []string {
	out := make([]string, 0, len(bs))
	for _, b := range bs {
		out = append(out, fmt.Sprintf("127.0.0.1:%d", b.port))
	}
	sort.Strings(out)
	return out
}

// debugJSON fetches a bridge admin endpoint into v.
func (b *bridge) debugJSON(t *testing.T, path string, v any) {
	t.Helper()
	resp, err := http.Get("http://" + b.app.AdminAddr() + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}
