package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdsbridge/xdsbridge/config"
	"github.com/xdsbridge/xdsbridge/config/decode"
	"github.com/xdsbridge/xdsbridge/internal/testbin"
)

// hitCluster sends n requests through Envoy to cluster (by the x-cluster
// header of examples/envoy-rest.yaml) and counts them.
func hitCluster(e *envoy, cluster string, n int) (got map[string]int, failed int, lastErr error) {
	got = map[string]int{}
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for i := 0; i < n; i++ {
		req, _ := http.NewRequest("GET", "http://"+e.listener+"/", nil)
		req.Header.Set("x-cluster", cluster)
		resp, err := client.Do(req)
		if err != nil {
			failed, lastErr = failed+1, err
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			failed, lastErr = failed+1, fmt.Errorf("%s: %s", resp.Status, b)
			continue
		}
		got[string(b)]++
	}
	return got, failed, lastErr
}

func countKeys(m map[string]int) string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

// bridgeMetric sums the bridge's series of name whose labels include
// labels.
func bridgeMetric(t *testing.T, b *bridge, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := b.app.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue next
				}
			}
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}

// TestEnvoyREST: a real Envoy (examples/envoy-rest.yaml) takes CDS over
// REST-JSON polling, and each cluster's EDS over REST too (the eds_config
// the bridge writes, examples/xdsbridge-rest.yaml), with no gRPC stream
// to the bridge. It follows services-file edits: a service added, a
// service's endpoints changed, a service removed. Traffic to "web", never
// removed, runs throughout and none of it fails; after each change, as soon
// as Envoy shows it, every live service answers every request. Envoy
// rejects nothing; the bridge counts no NACK.
func TestEnvoyREST(t *testing.T) {
	testbin.Envoy(t)
	bs := startBackends(t, 4)
	dir := t.TempDir()
	svcs := func(web []*backend, others map[string][]*backend) string {
		var sb strings.Builder
		sb.WriteString("services:\n")
		names := []string{"web"}
		all := map[string][]*backend{"web": web}
		for n, b := range others {
			names = append(names, n)
			all[n] = b
		}
		sort.Strings(names)
		for _, n := range names {
			fmt.Fprintf(&sb, "  %s:\n    endpoints:\n", n)
			for _, b := range all[n] {
				fmt.Fprintf(&sb, "      - {address: 127.0.0.1, port: %d}\n", b.port)
			}
		}
		return sb.String()
	}
	if err := os.WriteFile(filepath.Join(dir, "services.yaml"), []byte(svcs(bs[:1], map[string][]*backend{"api": bs[1:2]})), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile(filepath.Join(repoRoot(t), "examples", "xdsbridge-rest.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	const maxWait = 2 * time.Second // polls are held and answered 304 during the test
	b := startBridgeConfig(t, dir, string(cfg), func(c *config.Config) {
		c.XDS.REST.Listen = "127.0.0.1:0"
		c.XDS.REST.MaxWait = decode.Duration(maxWait)
		c.XDS.REST.EDSConfig.RequestTimeout = decode.Duration(maxWait + 5*time.Second)
	})
	// Ready before Envoy polls: a poll before the first state is answered
	// 503, which Envoy counts as an update_failure, asserted 0 below.
	waitFor(t, 10*time.Second, "bridge ready", func() error {
		if !b.app.Cache.Ready() {
			return fmt.Errorf("not ready")
		}
		return nil
	})
	_, restPort, _ := net.SplitHostPort(b.app.RESTAddr())
	e := startEnvoyCerts(t, "envoy-rest.yaml", b.app.XDSAddr(), "", "port_value: 18002", "port_value: "+restPort)

	// Background traffic to web, throughout.
	var bgOK, bgFailed atomic.Int64
	var bgErr atomic.Value
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
			got, failed, err := hitCluster(e, "web", 1)
			bgFailed.Add(int64(failed))
			if err != nil {
				bgErr.Store(err.Error())
			}
			for _, n := range got {
				bgOK.Add(int64(n))
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	stopBG := func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}
	t.Cleanup(stopBG)

	total, totalFailed := 0, 0
	// step waits until each service reaches exactly its backends, then
	// sends 40 requests to each and asserts none failed.
	step := func(what string, want map[string]string) {
		t.Helper()
		start := time.Now()
		waitFor(t, 20*time.Second, what, func() error {
			for svc, backends := range want {
				got, _, err := hitCluster(e, svc, 10)
				if err != nil {
					return fmt.Errorf("%s: %v", svc, err)
				}
				if countKeys(got) != backends {
					return fmt.Errorf("%s reached %v, want %s", svc, got, backends)
				}
			}
			return nil
		})
		applied := time.Since(start)
		for svc, backends := range want {
			got, failed, err := hitCluster(e, svc, 40)
			total += 40
			totalFailed += failed
			if failed != 0 || countKeys(got) != backends {
				t.Errorf("%s, after it applied: %s: %d of 40 failed (%v), reached %v, want %s", what, svc, failed, err, got, backends)
			}
		}
		t.Logf("%s: applied in %v; 40 requests to each of %d services, 0 failed", what, applied, len(want))
	}

	step("initial", map[string]string{"web": "b1", "api": "b2"})
	b.writeServices(t, svcs(bs[:1], map[string][]*backend{"api": bs[1:2], "extra": bs[2:3]}))
	step("service extra added", map[string]string{"web": "b1", "api": "b2", "extra": "b3"})
	b.writeServices(t, svcs([]*backend{bs[0], bs[3]}, map[string][]*backend{"api": bs[1:2], "extra": bs[2:3]}))
	step("web's endpoints changed", map[string]string{"web": "b1,b4", "api": "b2", "extra": "b3"})
	b.writeServices(t, svcs([]*backend{bs[0], bs[3]}, map[string][]*backend{"extra": bs[2:3]}))
	waitFor(t, 20*time.Second, "cluster api removed from Envoy", func() error {
		body, err := e.Get("/clusters")
		if err != nil {
			return err
		}
		if strings.Contains(body, "\napi::") || strings.HasPrefix(body, "api::") {
			return fmt.Errorf("api still listed")
		}
		return nil
	})
	step("service api removed", map[string]string{"web": "b1,b4", "extra": "b3"})
	// A poll held to max_wait and answered 304 is normal operation: wait
	// for one, to know held polls do not disturb Envoy.
	waitFor(t, 3*maxWait, "a poll answered 304 after max_wait", func() error {
		if n := bridgeMetric(t, b, "xdsbridge_xds_rest_requests_total", "code", "304"); n == 0 {
			return fmt.Errorf("no 304 yet")
		}
		return nil
	})
	step("after held polls", map[string]string{"web": "b1,b4", "extra": "b3"})
	stopBG()

	t.Logf("step traffic: %d requests, %d failed; background traffic to web: %d ok, %d failed", total, totalFailed, bgOK.Load(), bgFailed.Load())
	if bgFailed.Load() != 0 || bgOK.Load() == 0 {
		t.Errorf("background traffic to web: %d ok, %d failed (last error %v)", bgOK.Load(), bgFailed.Load(), bgErr.Load())
	}
	e.assertNoRejections(t)
	st := e.Stats(t, "update_")
	if st["cluster_manager.cds.update_success"] == 0 {
		t.Errorf("no CDS update_success: %v", st)
	}
	edsSuccess := int64(0)
	for k, v := range st {
		if strings.HasSuffix(k, ".update_failure") && v != 0 {
			t.Errorf("%s = %d: a poll failed (Envoy gave up on a held poll, or got no answer)", k, v)
		}
		if strings.HasPrefix(k, "cluster.") && strings.HasSuffix(k, ".update_success") {
			edsSuccess += v
		}
	}
	if edsSuccess == 0 {
		t.Errorf("no EDS update_success in Envoy's stats: %v", st)
	}
	if n := b.app.XDS.NACKs(); n != 0 {
		t.Errorf("bridge counted %d NACKs", n)
	}
	if c := b.app.XDS.ClientStatuses(); len(c) != 0 {
		t.Errorf("Envoy has gRPC streams to the bridge (want REST only): %+v", c)
	}
	ok200 := bridgeMetric(t, b, "xdsbridge_xds_rest_requests_total", "code", "200")
	nm := bridgeMetric(t, b, "xdsbridge_xds_rest_requests_total", "code", "304")
	cds200 := bridgeMetric(t, b, "xdsbridge_xds_rest_requests_total", "type", "type.googleapis.com/envoy.config.cluster.v3.Cluster", "code", "200")
	eds200 := bridgeMetric(t, b, "xdsbridge_xds_rest_requests_total", "type", "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment", "code", "200")
	if cds200 == 0 || eds200 == 0 {
		t.Errorf("REST answers: CDS %v, EDS %v (want both)", cds200, eds200)
	}
	t.Logf("bridge REST answers: %v with resources (CDS %v, EDS %v), %v not modified; Envoy: cds update_success %d, update_attempt %d, update_rejected %d; eds update_success %d (live clusters)",
		ok200, cds200, eds200, nm, st["cluster_manager.cds.update_success"], st["cluster_manager.cds.update_attempt"], st["cluster_manager.cds.update_rejected"], edsSuccess)
}
