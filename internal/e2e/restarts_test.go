package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xdsbridge/xdsbridge/config"
	"github.com/xdsbridge/xdsbridge/internal/app"
)

// traffic sends steady requests through Envoy's listener from a goroutine
// and counts every one that fails (a transport error or a status other
// than 200).
type traffic struct {
	stopc chan struct{}
	done  chan struct{}
	once  sync.Once

	mu      sync.Mutex
	sent    int
	failed  int
	errs    []string // the first failures
	reached map[string]int
}

func startTraffic(ev *envoy, every time.Duration) *traffic {
	return startTrafficPath(ev, every, "/")
}

// startTrafficPath is startTraffic with requests for path.
func startTrafficPath(ev *envoy, every time.Duration, path string) *traffic {
	tr := &traffic{stopc: make(chan struct{}), done: make(chan struct{}), reached: map[string]int{}}
	client := &http.Client{Timeout: 2 * time.Second}
	go func() {
		defer close(tr.done)
		defer client.CloseIdleConnections()
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-tr.stopc:
				return
			case <-tick.C:
			}
			var fail string
			resp, err := client.Get("http://" + ev.listener + path)
			if err != nil {
				fail = err.Error()
			} else {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					fail = fmt.Sprintf("%s: %s", resp.Status, b)
				} else {
					tr.mu.Lock()
					tr.reached[string(b)]++
					tr.mu.Unlock()
				}
			}
			tr.mu.Lock()
			tr.sent++
			if fail != "" {
				tr.failed++
				if len(tr.errs) < 5 {
					tr.errs = append(tr.errs, time.Now().Format("15:04:05.000 ")+fail)
				}
			}
			tr.mu.Unlock()
		}
	}()
	return tr
}

// stop stops the traffic; again, it does nothing.
func (tr *traffic) stop() {
	tr.once.Do(func() { close(tr.stopc) })
	<-tr.done
}

// snapshot returns the requests sent and failed so far, and resets the
// backends reached.
func (tr *traffic) snapshot() (sent, failed int, reached map[string]int) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	reached, tr.reached = tr.reached, map[string]int{}
	return tr.sent, tr.failed, reached
}

// TestEnvoyBridgeRestarts restarts the bridge 20 times under steady traffic
// through a real Envoy (delta ADS). Envoy keeps its last config while the
// bridge is down, reconnects to the new bridge on the same address with
// its resources' versions (initial_resource_versions), and, the content
// being unchanged (versions are content hashes, the same in a new
// process), gets nothing resent. No request fails.
func TestEnvoyBridgeRestarts(t *testing.T) {
	const restarts = 20
	bs := startBackends(t, 3)
	b1, b2, b3 := bs[0], bs[1], bs[2]
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "services.yaml"), []byte(servicesYAML("web", b1, b2)), 0o644); err != nil {
		t.Fatal(err)
	}
	// A new bridge each time, as a restarted process would be: the same
	// config file, read again; a new app; the predecessor's xDS address.
	newBridge := func(xdsListen string) *bridge {
		t.Helper()
		cfg, err := config.Parse([]byte("sources:\n  - name: static\n    file: {path: services.yaml, settle: 10ms}\n"), dir, app.SourceTypeNames())
		if err != nil {
			t.Fatal(err)
		}
		return runBridgeOn(t, cfg, xdsListen)
	}
	br := newBridge("127.0.0.1:0")
	xdsAddr := br.app.XDSAddr()
	ev := startEnvoy(t, "envoy-delta.yaml", xdsAddr)
	ev.waitTraffic(t, "b1", "b2")

	// Envoy's connection to the bridge (a gauge: 1 connected, 0 not).
	connected := func() int64 { return ev.Stats(t, "control_plane.connected_state")["control_plane.connected_state"] }
	// Envoy's record of what it applied. Each response Envoy accepts on a
	// delta stream counts one update_success of the subscriptions it
	// concerns: web's EDS subscription (cluster.web.update_success) only
	// if the response carries web's ClusterLoadAssignment or removes it,
	// changed or not; the wildcard CDS subscription
	// (cluster_manager.cds.update_success) for any CDS response, an empty
	// one included. cluster_manager.cluster_added and cluster_modified
	// count clusters a CDS response created or changed, and
	// cluster.web.membership_change changes of web's hosts. (update_attempt
	// also counts the failed connection attempts while the bridge is down.)
	applied := func() map[string]int64 {
		out := map[string]int64{}
		for _, f := range []string{"cluster_manager.cds.update_success", "cluster.web.update_success", "cluster_manager.cluster_modified", "cluster_manager.cluster_added", "cluster.web.membership_change"} {
			for k, v := range ev.Stats(t, "^"+strings.ReplaceAll(f, ".", `\.`)+"$") {
				out[k] = v
			}
		}
		return out
	}
	before := applied()
	if len(before) != 5 {
		t.Fatalf("envoy stats %v: want 5", before)
	}
	// Envoy logs what each CDS response carries at info, on its upstream
	// logger (cds_api_helper.cc: "cds: response indicates N
	// added/updated cluster(s), M removed cluster(s)"), whether or not
	// it changes anything: the one record of a CDS response's resources
	// (an unchanged cluster resent is "skipped", in no counter).
	resp, err := http.Post("http://"+ev.Admin+"/logging?upstream=info", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	logFrom := envoyLogSize(t, ev)
	// The bridge's responses (a new bridge's count from 0).
	pushes := func(br *bridge) float64 { return metricSum(t, br, "xdsbridge_xds_pushes_total") }

	tr := startTraffic(ev, 25*time.Millisecond) // 40 requests a second
	defer tr.stop()
	time.Sleep(300 * time.Millisecond)

	var reconnect []time.Duration
	for i := 0; i < restarts; i++ {
		if i > 0 {
			// Since it answered Envoy's first CDS and EDS requests, the
			// bridge sent nothing.
			if n := pushes(br); n != 2 {
				t.Errorf("restart %d: the bridge sent %v responses; want 2:\n%s", i, n, metricLines(t, br, "xdsbridge_xds_pushes_total"))
			}
		}
		br.stop(t)
		waitFor(t, 10*time.Second, "envoy to see the bridge gone", func() error {
			if c := connected(); c != 0 {
				return fmt.Errorf("connected_state %d", c)
			}
			return nil
		})
		time.Sleep(300 * time.Millisecond)
		// Envoy kept its config while the bridge was down.
		if got, want := ev.clusterHosts(t, "web"), hostsOf(b1, b2); strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("restart %d: with the bridge down, envoy's web hosts are %v; want %v", i+1, got, want)
		}

		start := time.Now()
		br = newBridge(xdsAddr)
		waitFor(t, 15*time.Second, "envoy to reconnect", func() error {
			if c := connected(); c != 1 {
				return fmt.Errorf("envoy connected_state %d", c)
			}
			if n := len(br.app.XDS.ClientStatuses()); n == 0 {
				return fmt.Errorf("the bridge has no client")
			}
			return nil
		})
		reconnect = append(reconnect, time.Since(start).Round(time.Millisecond))
		// A reconnecting delta client's first request of each type
		// (initial_resource_versions) is answered even when it holds
		// everything: with an empty response, which replaces its
		// explicit versions on the bridge with the compact state
		// (xds/watch.go, firstRequest). One for CDS, one for EDS.
		waitFor(t, 10*time.Second, "the bridge to answer Envoy's first CDS and EDS requests", func() error {
			if n := pushes(br); n != 2 {
				return fmt.Errorf("%v responses sent:\n%s", n, metricLines(t, br, "xdsbridge_xds_pushes_total"))
			}
			return nil
		})
	}
	time.Sleep(300 * time.Millisecond) // for a response not due to arrive
	sent, failed, reached := tr.snapshot()
	after := applied()
	if n := pushes(br); n != 2 {
		t.Errorf("the last bridge sent %v responses; want 2:\n%s", n, metricLines(t, br, "xdsbridge_xds_pushes_total"))
	}
	t.Logf("%d restarts; Envoy connected again after %v", restarts, reconnect)
	t.Logf("%d requests during the restarts, %d failed; reached %v", sent, failed, reached)
	t.Logf("envoy before %v, after %v", before, after)
	if failed != 0 {
		t.Errorf("%d of %d requests failed during the restarts: %v", failed, sent, tr.errs)
	}
	if reached["b1"] == 0 || reached["b2"] == 0 || len(reached) != 2 {
		t.Errorf("traffic during the restarts reached %v; want b1 and b2", reached)
	}
	// Nothing re-applied: web's EDS subscription got no response (its
	// update_success did not move: the EDS responses were empty), no
	// cluster was added or changed, web's hosts did not change. Each
	// restart's empty CDS response counts one cds.update_success.
	for k, v := range before {
		switch {
		case k == "cluster_manager.cds.update_success":
			if d := after[k] - v; d != restarts {
				t.Errorf("envoy's %s went from %d to %d over %d restarts; want one (empty) CDS response each", k, v, after[k], restarts)
			}
		case after[k] != v:
			t.Errorf("envoy's %s went from %d to %d over %d restarts: something was re-applied", k, v, after[k], restarts)
		}
	}
	// Every CDS response of the restarts carried nothing.
	var cdsResponses int
	for _, l := range envoyLogLines(t, ev, logFrom) {
		_, m, ok := strings.Cut(l, "cds: response indicates ")
		if !ok {
			continue
		}
		cdsResponses++
		if !strings.HasPrefix(m, "0 added/updated cluster(s), 0 removed cluster(s)") {
			t.Errorf("envoy got a CDS response with content after a restart: %s", l)
		}
	}
	if cdsResponses != restarts {
		t.Errorf("envoy logged %d CDS responses over %d restarts; want one each", cdsResponses, restarts)
	}

	// The last bridge still serves: a change reaches Envoy, traffic moves.
	br.writeServices(t, servicesYAML("web", b1, b3))
	waitFor(t, 10*time.Second, "traffic to move to b1 and b3", func() error {
		tr.snapshot()
		time.Sleep(500 * time.Millisecond)
		_, _, reached := tr.snapshot()
		names := make([]string, 0, len(reached))
		for n := range reached {
			names = append(names, n)
		}
		sort.Strings(names)
		if strings.Join(names, ",") != "b1,b3" {
			return fmt.Errorf("reached %v", reached)
		}
		return nil
	})
	tr.stop()
	sent, failed, _ = tr.snapshot()
	if failed != 0 {
		t.Errorf("%d of %d requests failed in all: %v", failed, sent, tr.errs)
	}
	ev.assertNoRejections(t)
	t.Logf("%d requests in all, %d failed", sent, failed)
}

// envoyLogSize is the size of Envoy's log so far.
func envoyLogSize(t *testing.T, ev *envoy) int64 {
	t.Helper()
	fi, err := os.Stat(ev.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// envoyLogLines returns the lines of Envoy's log from offset on.
func envoyLogLines(t *testing.T, ev *envoy, offset int64) []string {
	t.Helper()
	b, err := os.ReadFile(ev.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(string(b[offset:]), "\n")
}
