package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdsbridge/xdsbridge/config"
	"github.com/xdsbridge/xdsbridge/internal/app"
	"github.com/xdsbridge/xdsbridge/xds"
	"github.com/xdsbridge/xdsbridge/xds/store"
)

// resourceVersions is every resource the bridge serves, as "type/name" →
// version.
func resourceVersions(a *app.App) map[string]string {
	out := map[string]string{}
	for _, typ := range xds.DefaultTypes {
		short := typ[strings.LastIndexByte(typ, '.')+1:]
		for _, ri := range a.Cache.List(typ) {
			out[short+"/"+ri.Name] = ri.Version
		}
	}
	return out
}

// changedResources lists the resources added, changed or removed between
// two resourceVersions.
func changedResources(before, after map[string]string) []string {
	var out []string
	for k, v := range after {
		if before[k] != v {
			out = append(out, k)
		}
	}
	for k := range before {
		if _, ok := after[k]; !ok {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// TestEnvoyReloadUnderTraffic reloads the config five times while
// requests flow through a real Envoy: a source added, a health check
// added, a policy source changed, an invalid config, then the fixed one.
// No request fails; each reload changes exactly the resources its change
// concerns (the others keep their versions, and the refused and the no-op
// reload push nothing); the refused one shows in /debug/sources and the
// reload metrics.
func TestEnvoyReloadUnderTraffic(t *testing.T) {
	bs := startBackends(t, 3)
	b1, b2, b3 := bs[0], bs[1], bs[2]
	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// HEALTHY from the source: the check added later changes b2 only.
	write("services.yaml", strings.ReplaceAll(servicesYAML("web", b1, b2), "}", ", health: healthy}"))
	write("extra.yaml", servicesYAML("api", b3))
	write("policy.yaml", "services: {web: {connect_timeout: 2s}}\n")
	write("policy2.yaml", "services: {web: {connect_timeout: 3s}}\n")
	// The settings runBridge sets, so that the file read again is the
	// config running.
	head := `xds: {listen: "127.0.0.1:0"}
admin: {listen: "127.0.0.1:0"}
debounce: {quiet: 10ms, max: 100ms}
logging: {level: warn}
`
	check := func(service string) string {
		return "    " + service + ": {type: http, interval: 50ms, timeout: 500ms, jitter: 0s, http: {path: /healthz}}\n"
	}
	configs := []struct{ what, sources, checks string }{
		{"start", "- {name: static, file: {path: services.yaml, settle: 10ms}}\n- {name: pol, policy_file: {path: policy.yaml}}\n", check("api")},
		{"add a source", "- {name: static, file: {path: services.yaml, settle: 10ms}}\n- {name: pol, policy_file: {path: policy.yaml}}\n- {name: extra, file: {path: extra.yaml}}\n", check("api")},
		{"add a health check", "- {name: static, file: {path: services.yaml, settle: 10ms}}\n- {name: pol, policy_file: {path: policy.yaml}}\n- {name: extra, file: {path: extra.yaml}}\n", check("api") + check("web")},
		{"change the policy", "- {name: static, file: {path: services.yaml, settle: 10ms}}\n- {name: pol, policy_file: {path: policy2.yaml}}\n- {name: extra, file: {path: extra.yaml}}\n", check("api") + check("web")},
		{"invalid", "- {name: static, file: {path: services.yaml, settle: 10ms}}\n- {name: pol, policy_file: {path: policy2.yaml}, priority: first}\n- {name: extra, file: {path: extra.yaml}}\n", check("api") + check("web")},
		{"fixed", "- {name: static, file: {path: services.yaml, settle: 10ms}}\n- {name: pol, policy_file: {path: policy2.yaml}}\n- {name: extra, file: {path: extra.yaml}}\n", check("api") + check("web")},
	}
	cfgPath := filepath.Join(dir, "bridge.yaml")
	writeConfig := func(i int) {
		write("bridge.yaml", head+"sources:\n"+configs[i].sources+"health_checks:\n  services:\n"+configs[i].checks)
	}
	writeConfig(0)
	cfg, err := config.Load(cfgPath, app.SourceTypeNames())
	if err != nil {
		t.Fatal(err)
	}
	br := runBridge(t, cfg)
	br.app.LoadConfig = func() (*config.Config, error) { return config.Load(cfgPath, app.SourceTypeNames()) }
	ev := startEnvoy(t, "envoy-delta.yaml", br.app.XDSAddr())
	ev.waitTraffic(t, "b1", "b2")

	// Requests flow through Envoy during every reload.
	var sent, failed atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := ev.hit(1); err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
			}
			sent.Add(1)
		}
	}()
	defer func() { close(stop); wg.Wait() }()

	// b2 fails the check added at step 2 (web had none).
	b2.unhealthy.Store(true)
	steps := []struct {
		ok      bool
		settled func() error
		changed []string
	}{
		1: {true, func() error {
			if h := ev.clusterHosts(t, "api"); !slices.Equal(h, hostsOf(b3)) {
				return fmt.Errorf("api hosts in Envoy %v", h)
			}
			return nil
		}, []string{"Cluster/api", "ClusterLoadAssignment/api", "Listener/api", "RouteConfiguration/api"}},
		2: {true, func() error {
			got, err := ev.hit(20)
			if err != nil || got["b2"] > 0 {
				return fmt.Errorf("traffic %v, %v", got, err)
			}
			return nil
		}, []string{"ClusterLoadAssignment/web"}},
		3: {true, func() error {
			if cl := br.app.Cache.List(xds.ClusterType); !strings.Contains(fmt.Sprint(cl[slices.IndexFunc(cl, func(r store.ResourceInfo) bool { return r.Name == "web" })].Msg), "seconds:3") {
				return fmt.Errorf("web cluster without the new connect_timeout")
			}
			return nil
			// A cluster changed is followed by its assignment, the same
			// (store.Resource.DependsOn): Envoy warms the cluster with it.
		}, []string{"Cluster/web", "ClusterLoadAssignment/web"}},
		4: {false, nil, nil},
		5: {true, nil, nil},
	}
	for i := 1; i < len(configs); i++ {
		st := steps[i]
		before, pushesBefore := resourceVersions(br.app), metricSum(t, br, "xdsbridge_xds_pushes_total")
		writeConfig(i)
		res, err := br.app.Reload()
		if st.ok != (err == nil) {
			t.Fatalf("%s: reload %+v, %v", configs[i].what, res, err)
		}
		if st.settled != nil {
			waitFor(t, 10*time.Second, configs[i].what, st.settled)
		}
		time.Sleep(300 * time.Millisecond) // more than the debounce's max hold: any other push would have come
		after := resourceVersions(br.app)
		if got := changedResources(before, after); !slices.Equal(got, st.changed) {
			t.Errorf("%s: resources changed %v, want %v", configs[i].what, got, st.changed)
		}
		// One Envoy: each resource changed is pushed to it once, at most
		// (in one response with others of its type, or alone); none when
		// nothing changed.
		if d := metricSum(t, br, "xdsbridge_xds_pushes_total") - pushesBefore; d > float64(len(st.changed)) {
			t.Errorf("%s: %v pushes, want at most %d", configs[i].what, d, len(st.changed))
		} else {
			t.Logf("%s: %v pushes for %d resources changed", configs[i].what, d, len(st.changed))
		}
		if !st.ok {
			var dbg struct {
				Config app.ReloadStatus `json:"config"`
			}
			br.debugJSON(t, "/debug/sources", &dbg)
			if dbg.Config.LastReloadOK || !strings.Contains(dbg.Config.LastError, "priority: want a whole number") {
				t.Errorf("%s: /debug/sources config %+v", configs[i].what, dbg.Config)
			}
			if f := metricSumWith(t, br, "xdsbridge_config_reloads_total", `result="failure"`); f != 1 {
				t.Errorf("xdsbridge_config_reloads_total{result=\"failure\"} = %v", f)
			}
		}
	}
	if s := metricSumWith(t, br, "xdsbridge_config_reloads_total", `result="success"`); s != 4 {
		t.Errorf("xdsbridge_config_reloads_total{result=\"success\"} = %v, want 4", s)
	}
	close(stop)
	wg.Wait()
	stop = make(chan struct{})
	if failed.Load() > 0 || sent.Load() < 100 {
		t.Fatalf("%d of %d requests failed (first: %v)", failed.Load(), sent.Load(), firstErr.Load())
	}
	t.Logf("%d requests, none failed", sent.Load())
	ev.assertNoRejections(t)
}
