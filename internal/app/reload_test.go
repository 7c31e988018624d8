package app

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/xdsbridge/xdsbridge/config"
	"github.com/xdsbridge/xdsbridge/sources"
	"github.com/xdsbridge/xdsbridge/xds"
)

// reloadApp runs an app on the config file dir/bridge.yaml, with reloads
// reading it again.
func reloadApp(t *testing.T, dir, cfgYAML string) *App {
	t.Helper()
	path := filepath.Join(dir, "bridge.yaml")
	os.WriteFile(path, []byte(cfgYAML), 0o644)
	cfg, err := config.Load(path, SourceTypeNames())
	if err != nil {
		t.Fatal(err)
	}
	a := startApp(t, cfg)
	a.LoadConfig = func() (*config.Config, error) { return config.Load(path, SourceTypeNames()) }
	return a
}

func hostsOf(a *App, service string) []string {
	var out []string
	for _, h := range a.Loop.Hosts(service)[service] {
		if h.Published {
			out = append(out, h.Host)
		}
	}
	return out
}

func postReload(t *testing.T, a *App) (int, map[string]any) {
	t.Helper()
	rec := httptest.NewRecorder()
	a.AdminHandler().ServeHTTP(rec, httptest.NewRequest("POST", "/debug/reload", nil))
	var out map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatalf("%d %s: %v", rec.Code, rec.Body, err)
	}
	return rec.Code, out
}

// TestReloadSources: a reload adds a source, replaces one whose config
// changed (its services move to the new instance's), keeps the unchanged
// one running, and removes one (its services are withdrawn); a config that
// does not validate, or that changes a listener, is refused with the
// running config kept, shown in /debug/sources and counted. A limit
// changed applies to what is served.
func TestReloadSources(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("services: {web: {endpoints: [{address: 10.0.0.1, port: 80}]}}\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "a2.yaml"), []byte("services: {web: {endpoints: [{address: 10.0.0.2, port: 80, hostname: web.example.com}]}}\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "b.yaml"), []byte("services: {api: {endpoints: [{address: 10.0.1.1, port: 80}]}}\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "s.yaml"), []byte("services: {db: {endpoints: [{address: 10.0.2.1, port: 80}]}}\n"), 0o644)
	head := "xds: {listen: \"127.0.0.1:0\"}\nadmin: {listen: \"127.0.0.1:0\"}\ndebounce: {quiet: 1ms}\nsources:\n- {name: steady, file: {path: s.yaml}}\n"
	a := reloadApp(t, dir, head+"- {name: a, file: {path: a.yaml}}\n")
	steady := a.activeSources()[0]
	write := func(body string) { os.WriteFile(filepath.Join(dir, "bridge.yaml"), []byte(head+body), 0o644) }
	writeFull := func(cfg string) { os.WriteFile(filepath.Join(dir, "bridge.yaml"), []byte(cfg), 0o644) }

	write("- {name: a, file: {path: a.yaml}}\n- {name: b, file: {path: b.yaml}}\n")
	if code, res := postReload(t, a); code != 200 || !slices.Equal(toStrings(res["added"]), []string{"b"}) {
		t.Fatalf("add: %d %v", code, res)
	}
	waitUntil(t, "api served", func() bool { return slices.Equal(hostsOf(a, "api"), []string{"10.0.1.1:80"}) })

	write("- {name: a, file: {path: a2.yaml}}\n- {name: b, file: {path: b.yaml}}\n")
	if code, res := postReload(t, a); code != 200 || !slices.Equal(toStrings(res["replaced"]), []string{"a"}) {
		t.Fatalf("replace: %d %v", code, res)
	}
	waitUntil(t, "web from a2", func() bool { return slices.Equal(hostsOf(a, "web"), []string{"10.0.0.2:80"}) })

	write("- {name: a, file: {path: a2.yaml}}\n")
	if code, res := postReload(t, a); code != 200 || !slices.Equal(toStrings(res["removed"]), []string{"b"}) {
		t.Fatalf("remove: %d %v", code, res)
	}
	waitUntil(t, "api withdrawn", func() bool {
		return len(hostsOf(a, "api")) == 0 && len(a.Cache.List("type.googleapis.com/envoy.config.cluster.v3.Cluster")) == 2
	})
	if a.activeSources()[0] != steady {
		t.Fatal("the unchanged source was replaced")
	}

	// A limit applies to the services already served.
	hostname := func() bool {
		return strings.Contains(fmt.Sprint(a.Cache.List(xds.EndpointType)), "web.example.com")
	}
	if !hostname() {
		t.Fatal("web served without its hostname")
	}
	write("- {name: a, file: {path: a2.yaml}}\nlimits: {max_hostname_bytes: 8}\n")
	if code, res := postReload(t, a); code != 200 {
		t.Fatalf("limit: %d %v", code, res)
	}
	waitUntil(t, "the hostname over the new limit dropped", func() bool { return !hostname() })

	for _, c := range []struct{ cfg, want string }{
		{head + "- {name: a, file: {path: a2.yaml}, priority: high}\n", "priority: want a whole number"},
		{strings.Replace(head, "127.0.0.1:0", "127.0.0.1:1", 1) + "- {name: a, file: {path: a2.yaml}}\n", "xds.listen: changed, and read at start only: restart the bridge to apply"},
	} {
		writeFull(c.cfg)
		code, res := postReload(t, a)
		if code != 422 || res["result"] != "failure" || !strings.Contains(res["error"].(string), c.want) {
			t.Fatalf("invalid config %q: %d %v, want the error to mention %q", c.cfg, code, res, c.want)
		}
		st := a.ReloadStatus()
		if st.LastReloadOK || !strings.Contains(st.LastError, c.want) {
			t.Fatalf("status after a refused reload: %+v", st)
		}
		if !slices.Equal(hostsOf(a, "web"), []string{"10.0.0.2:80"}) || !slices.Equal(hostsOf(a, "db"), []string{"10.0.2.1:80"}) {
			t.Fatal("a refused reload changed what is served")
		}
	}
	rec := httptest.NewRecorder()
	a.AdminHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/debug/sources", nil))
	if !strings.Contains(rec.Body.String(), `"last_reload_ok": false`) || !strings.Contains(rec.Body.String(), "xds.listen: changed") {
		t.Fatalf("/debug/sources does not show the refused reload:\n%s", rec.Body)
	}
	write("- {name: a, file: {path: a2.yaml}}\nlimits: {max_hostname_bytes: 8}\n")
	if code, res := postReload(t, a); code != 200 || !slices.Equal(toStrings(res["unchanged"]), []string{"steady", "a"}) {
		t.Fatalf("fixed: %d %v", code, res)
	}
	if err := testutil.GatherAndCompare(a.Registry, strings.NewReader(`
# HELP xdsbridge_config_reloads_total Config reloads (SIGHUP, POST /debug/reload) by result: success (applied) or failure (refused; the running config stays).
# TYPE xdsbridge_config_reloads_total counter
xdsbridge_config_reloads_total{result="failure"} 2
xdsbridge_config_reloads_total{result="success"} 5
# HELP xdsbridge_config_last_reload_successful 1 when the last config reload was applied (or none was tried), 0 when it was refused.
# TYPE xdsbridge_config_last_reload_successful gauge
xdsbridge_config_last_reload_successful 1
`), "xdsbridge_config_reloads_total", "xdsbridge_config_last_reload_successful"); err != nil {
		t.Fatal(err)
	}
}

func toStrings(v any) []string {
	var out []string
	l, _ := v.([]any)
	for _, x := range l {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}

// TestReloadReplacedSourceServedUntilNewSyncs: a source whose config
// changed to a file that does not exist yet keeps its old instance's
// services served (and its old instance running) until the new instance
// publishes; then the new one's replace them.
func TestReloadReplacedSourceServedUntilNewSyncs(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("services: {web: {endpoints: [{address: 10.0.0.1, port: 80}]}}\n"), 0o644)
	head := "xds: {listen: \"127.0.0.1:0\"}\nadmin: {listen: \"127.0.0.1:0\"}\ndebounce: {quiet: 1ms}\nsources:\n"
	a := reloadApp(t, dir, head+"- {name: a, file: {path: a.yaml}}\n")
	old := a.activeSources()[0]
	os.WriteFile(filepath.Join(dir, "bridge.yaml"), []byte(head+"- {name: a, file: {path: later.yaml}}\n"), 0o644)
	if res, err := a.Reload(); err != nil || !slices.Equal(res.Replaced, []string{"a"}) {
		t.Fatalf("reload: %+v, %v", res, err)
	}
	// The old file changes: the old instance, still active, publishes it.
	os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("services: {web: {endpoints: [{address: 10.0.0.3, port: 80}]}}\n"), 0o644)
	waitUntil(t, "the old instance's change", func() bool { return slices.Equal(hostsOf(a, "web"), []string{"10.0.0.3:80"}) })
	if a.activeSources()[0] != old {
		t.Fatal("the old instance was retired before the new one published")
	}
	os.WriteFile(filepath.Join(dir, "later.yaml"), []byte("services: {web: {endpoints: [{address: 10.0.0.2, port: 80}]}}\n"), 0o644)
	waitUntil(t, "web from the new instance", func() bool { return slices.Equal(hostsOf(a, "web"), []string{"10.0.0.2:80"}) })
	waitUntil(t, "the new instance active", func() bool { return a.activeSources()[0] != old })
	// The old instance is stopped: a change of its file goes nowhere.
	os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("services: {web: {endpoints: [{address: 10.0.0.4, port: 80}]}}\n"), 0o644)
	time.Sleep(100 * time.Millisecond)
	if got := hostsOf(a, "web"); !slices.Equal(got, []string{"10.0.0.2:80"}) {
		t.Fatalf("web hosts %v after the retired instance's file changed", got)
	}
}

// idleSource is a source whose Run does nothing until it is stopped.
type idleSource struct{ name string }

func (s idleSource) Name() string { return s.name }
func (s idleSource) Run(ctx context.Context, _ sources.Sink) error {
	<-ctx.Done()
	return nil
}

// TestReloadReplacementIncompletePublishDoesNotTakeOver: a replacement
// whose publish is incomplete (a DNS name of its first round without an
// answer: that service published with no endpoint) does not replace the
// instance serving; its first complete publish does.
func TestReloadReplacementIncompletePublishDoesNotTakeOver(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("services: {web: {endpoints: [{address: 10.0.0.1, port: 80}]}}\n"), 0o644)
	a := reloadApp(t, dir, "xds: {listen: \"127.0.0.1:0\"}\nadmin: {listen: \"127.0.0.1:0\"}\ndebounce: {quiet: 1ms}\nsources:\n- {name: a, file: {path: a.yaml}}\n")
	waitUntil(t, "web served", func() bool { return slices.Equal(hostsOf(a, "web"), []string{"10.0.0.1:80"}) })
	old := a.activeSources()[0]

	// A replacement, as a reload starts one.
	a.running.mu.Lock()
	g := a.running.byName["a"]
	a.running.mu.Unlock()
	next := &sourceInstance{src: idleSource{"a"}, metrics: &sourceMetrics{reg: a.Registry, deferred: true}, gate: g}
	g.mu.Lock()
	next.state, g.pending = instPending, next
	g.mu.Unlock()
	a.start(next)
	sink := gatedSink{a, next}
	ctx := context.Background()

	if err := sink.Publish(ctx, sources.Update{Source: "a", Incomplete: true, Services: []sources.Service{{Name: "web"}}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if got := hostsOf(a, "web"); !slices.Equal(got, []string{"10.0.0.1:80"}) {
		t.Fatalf("web hosts %v after the replacement's incomplete publish; want the serving instance's", got)
	}
	if a.activeSources()[0] != old {
		t.Fatal("the replacement took over with an incomplete publish")
	}
	web := sources.Service{Name: "web", Endpoints: []sources.Endpoint{{Address: "10.0.0.2", Port: 80}}}
	if err := sink.Publish(ctx, sources.Update{Source: "a", Services: []sources.Service{web}}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "web from the replacement", func() bool { return slices.Equal(hostsOf(a, "web"), []string{"10.0.0.2:80"}) })
	if a.activeSources()[0] == old {
		t.Fatal("the replacement's complete publish did not take over")
	}
}
