package e2e

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	_ "github.com/xdsbridge/xdsbridge/translate" // the types in the files' Anys, for protojson
)

// fileTraffic sends requests through Envoy without pause and counts them.
type fileTraffic struct {
	ok, failed atomic.Int64
	mu         sync.Mutex
	lastErr    string
	stop       chan struct{}
	done       chan struct{}
}

func startFileTraffic(t *testing.T, ev *envoy) *fileTraffic {
	t.Helper()
	tr := &fileTraffic{stop: make(chan struct{}), done: make(chan struct{})}
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	go func() {
		defer close(tr.done)
		for {
			select {
			case <-tr.stop:
				return
			default:
			}
			resp, err := client.Get("http://" + ev.listener + "/")
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("status %s", resp.Status)
				}
			}
			if err != nil {
				tr.failed.Add(1)
				tr.mu.Lock()
				tr.lastErr = err.Error()
				tr.mu.Unlock()
			} else {
				tr.ok.Add(1)
			}
			time.Sleep(2 * time.Millisecond) // pacing, not synchronisation
		}
	}()
	t.Cleanup(tr.halt)
	return tr
}

func (tr *fileTraffic) halt() {
	select {
	case <-tr.stop:
	default:
		close(tr.stop)
	}
	<-tr.done
}

// check fails the test if any request failed so far, and logs the figures.
func (tr *fileTraffic) check(t *testing.T, stage string) {
	t.Helper()
	tr.mu.Lock()
	last := tr.lastErr
	tr.mu.Unlock()
	t.Logf("%s: %d requests through Envoy, %d failed", stage, tr.ok.Load()+tr.failed.Load(), tr.failed.Load())
	if n := tr.failed.Load(); n != 0 {
		t.Fatalf("%s: %d requests failed (last: %s)", stage, n, last)
	}
}

// fileVersion is the version_info of a file the bridge wrote, decoded
// by its extension as Envoy does.
func fileVersion(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	resp := &discovery.DiscoveryResponse{}
	switch filepath.Ext(path) {
	case ".pb":
		err = proto.Unmarshal(b, resp)
	case ".yaml":
		if b, err = yaml.YAMLToJSON(b); err == nil {
			err = protojson.Unmarshal(b, resp)
		}
	default:
		err = protojson.Unmarshal(b, resp)
	}
	if err != nil || resp.VersionInfo == "" {
		t.Fatalf("%s: no version_info (%v)", path, err)
	}
	return resp.VersionInfo
}

// envoyVersionText is a subscription's version_text as Envoy's /stats shows
// it (stat is e.g. "cluster_manager.cds" or "cluster.web").
func envoyVersionText(ev *envoy, stat string) (string, error) {
	body, err := ev.Get("/stats?filter=" + url.QueryEscape("^"+regexp.QuoteMeta(stat)+`\.version_text$`))
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, stat+".version_text: "); ok {
			return strings.Trim(v, `"`), nil
		}
	}
	return "", fmt.Errorf("no %s.version_text in %q", stat, body)
}

// waitEnvoyVersion waits until the bridge's file has a version other than
// old (any, if old is empty) and Envoy's subscription stat has applied
// it; it returns that version.
func waitEnvoyVersion(t *testing.T, ev *envoy, stat, file, old string) string {
	t.Helper()
	var want string
	waitFor(t, 20*time.Second, stat+" at a new version of "+filepath.Base(file), func() error {
		want = fileVersion(t, file)
		if want == old {
			return fmt.Errorf("file still at %q", old)
		}
		got, err := envoyVersionText(ev, stat)
		if err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("envoy at %q, file at %q", got, want)
		}
		return nil
	})
	return want
}

// TestEnvoyFollowsFiles: a real Envoy with no gRPC path to the bridge,
// CDS from clusters.yaml (path_config_source) and each cluster's EDS from
// its endpoints/NAME.yaml (the eds_config path the bridge writes), follows
// edits of the services file through the bridge's filesystem output, in
// both replacement styles: rename over the file (path) and the ..data
// symlink swap (watched_directory), and in each format (YAML, JSON,
// binary proto). Requests run through Envoy without
// pause from the first state on, and none fails; Envoy's CDS and EDS
// version_text reach the version_info of the bridge's files after each
// change; no update is rejected or fails.
func TestEnvoyFollowsFiles(t *testing.T) {
	for _, tc := range []struct{ mode, format, ext string }{
		{"path", "yaml", ".yaml"},
		{"watched_directory", "yaml", ".yaml"},
		{"path", "json", ".json"},
		{"watched_directory", "proto", ".pb"},
	} {
		mode, ext := tc.mode, tc.ext
		t.Run(mode+"/"+tc.format, func(t *testing.T) {
			bs := startBackends(t, 3)
			b1, b2, b3 := bs[0], bs[1], bs[2]
			dir := t.TempDir()
			out := filepath.Join(dir, "files")
			if err := os.WriteFile(filepath.Join(dir, "services.yaml"), []byte(servicesYAML("web", b1, b2)), 0o644); err != nil {
				t.Fatal(err)
			}
			br := startBridgeConfig(t, dir, fmt.Sprintf(`
outputs:
  filesystem: {dir: files, mode: %s, format: %s, debounce: 20ms}
sources:
  - name: static
    file: {path: services.yaml, settle: 10ms}
`, mode, tc.format), nil)
			clusters := filepath.Join(out, "clusters"+ext)
			webFile := filepath.Join(out, "endpoints", "web"+ext)
			waitFor(t, 10*time.Second, "the bridge's first files", func() error {
				_, err := os.Stat(webFile)
				return err
			})
			replace := []string{"/tmp/xdsbridge-files/clusters.yaml", clusters}
			if mode == "watched_directory" {
				replace = append(replace, "# watched_directory: {path: /tmp/xdsbridge-files}", "watched_directory: {path: "+out+"}")
			}
			ev := launchEnvoy(t, "envoy-files.yaml", "127.0.0.1:0", "", true, replace...)

			ev.waitTraffic(t, "b1", "b2")
			cdsV := waitEnvoyVersion(t, ev, "cluster_manager.cds", clusters, "")
			webV := waitEnvoyVersion(t, ev, "cluster.web", webFile, "")
			tr := startFileTraffic(t, ev)

			// change edits the services file and waits for Envoy to apply
			// the new version of file (stat); it logs how long that took.
			change := func(what, services, stat, file, old string) string {
				t.Helper()
				start := time.Now()
				br.writeServices(t, services)
				v := waitEnvoyVersion(t, ev, stat, file, old)
				t.Logf("%s: Envoy at the file's new version %s after %v", what, v, time.Since(start).Round(time.Millisecond))
				return v
			}

			// Endpoint changes: only web's file changes.
			webV = change("web: b1", servicesYAML("web", b1), "cluster.web", webFile, webV)
			ev.waitTraffic(t, "b1")
			tr.check(t, "web: b1")
			webV = change("web: b1 b3", servicesYAML("web", b1, b3), "cluster.web", webFile, webV)
			ev.waitTraffic(t, "b1", "b3")
			tr.check(t, "web: b1 b3")
			if v := fileVersion(t, clusters); v != cdsV {
				t.Fatalf("clusters file version changed from %s to %s with the clusters unchanged", cdsV, v)
			}

			// New services: new clusters, whose endpoints files Envoy
			// reads through their eds_config paths.
			withAPI := servicesYAML("web", b1, b3)
			for _, name := range []string{"api", "db", "cache"} {
				withAPI += fmt.Sprintf("  %s:\n    endpoints:\n      - {address: 127.0.0.1, port: %d}\n", name, b2.port)
			}
			cdsV = change("api, db, cache added", withAPI, "cluster_manager.cds", clusters, cdsV)
			waitFor(t, 20*time.Second, "cluster api with b2 in Envoy", func() error {
				if got := ev.clusterHosts(t, "api"); !slices.Equal(got, hostsOf(b2)) {
					return fmt.Errorf("api hosts %v", got)
				}
				return nil
			})
			waitEnvoyVersion(t, ev, "cluster.api", filepath.Join(out, "endpoints", "api"+ext), "")
			tr.check(t, "api, db, cache added")

			// The services removed: the clusters go, then their files
			// (several at once, for Envoy's order of reading them to vary).
			change("api, db, cache removed", servicesYAML("web", b1, b3), "cluster_manager.cds", clusters, cdsV)
			waitFor(t, 20*time.Second, "cluster api gone from Envoy", func() error {
				body, err := ev.Get("/clusters")
				if err != nil {
					return err
				}
				if strings.Contains(body, "\napi::") || strings.HasPrefix(body, "api::") {
					return fmt.Errorf("api still present")
				}
				return nil
			})
			tr.check(t, "api, db, cache removed")

			change("web: b2", servicesYAML("web", b2), "cluster.web", webFile, webV)
			ev.waitTraffic(t, "b2")
			tr.check(t, "web: b2")
			tr.halt()

			ev.assertNoRejections(t)
			for k, v := range ev.Stats(t, "update_failure") {
				if v != 0 {
					t.Errorf("envoy failed an update: %s = %d", k, v)
				}
			}
			st := ev.Stats(t, "update_success")
			t.Logf("envoy update_success: cds %d, web %d; bridge wrote %d files in %d rounds", st["cluster_manager.cds.update_success"], st["cluster.web.update_success"], br.app.Files.Stats().Written, br.app.Files.Stats().Rounds)
			if st["cluster.web.update_success"] < 4 {
				t.Errorf("cluster.web.update_success = %d; want one per state of web (4)", st["cluster.web.update_success"])
			}
			if f := br.app.Files.Stats().Failures; f != 0 {
				t.Errorf("the bridge failed %d write rounds", f)
			}
			assertNoUpdateFailures(t, ev)
		})
	}
}

// assertNoUpdateFailures fails the test if Envoy's log shows a failed
// or rejected file read. A removed cluster takes its update_failure
// counter with it; its log line stays (with a removed cluster's file
// deleted in the same swap as the cluster, Envoy logs "Filesystem config
// update failure: ... Invalid path" for it).
func assertNoUpdateFailures(t *testing.T, ev *envoy) {
	t.Helper()
	b, err := os.ReadFile(ev.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, "config update failure") || strings.Contains(line, "rejected") {
			t.Errorf("envoy: %s", line)
		}
	}
}
