package testbin

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// EnvoyProcess is an Envoy started by StartEnvoy. It is killed when the
// test ends, and the end of its log is printed if the test failed.
type EnvoyProcess struct {
	Cmd     *exec.Cmd
	LogPath string
	// Admin is the admin listener's host:port, read from the address
	// file Envoy writes once it listens.
	Admin string
}

// StartEnvoy runs bin on the bootstrap at config (its admin on port 0 is
// found through --admin-address-path), with a dynamic base id, one
// worker and no drain time, and waits up to 30 s for the admin listener
// to answer (WaitReady waits for Envoy's initialization too).
func StartEnvoy(t testing.TB, bin, config string) *EnvoyProcess {
	t.Helper()
	dir := t.TempDir()
	e := &EnvoyProcess{LogPath: filepath.Join(dir, "envoy.log")}
	adminPath := filepath.Join(dir, "admin.address")
	logf, err := os.Create(e.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	e.Cmd = exec.Command(bin, "-c", config, "--use-dynamic-base-id", "-l", "warn", "--drain-time-s", "0",
		"--concurrency", "1", "--admin-address-path", adminPath)
	e.Cmd.Stdout, e.Cmd.Stderr = logf, logf
	if err := e.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.Cmd.Process.Kill()
		e.Cmd.Wait()
		logf.Close()
		if t.Failed() {
			t.Logf("envoy %s, log's last lines:\n%s", config, e.LogTail(40))
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if b, err := os.ReadFile(adminPath); err == nil && len(strings.TrimSpace(string(b))) > 0 {
			e.Admin = strings.TrimSpace(string(b))
			if _, err := e.Get("/server_info"); err == nil {
				return e
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("envoy %s: admin not ready after 30s\n%s", config, e.LogTail(40))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// WaitReady waits until /ready answers 200 (Envoy initialized: its
// initial fetches done), up to timeout.
func (e *EnvoyProcess) WaitReady(t testing.TB, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		_, err := e.Get("/ready")
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("envoy not ready after %v: %v", timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// LogTail is the last n lines of the Envoy's log.
func (e *EnvoyProcess) LogTail(n int) string {
	b, _ := os.ReadFile(e.LogPath)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Get GETs path from the admin listener; a status other than 200 is an
// error.
func (e *EnvoyProcess) Get(path string) (string, error) {
	resp, err := http.Get("http://" + e.Admin + path)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return string(b), err
}

// Stats returns the counters and gauges whose names match filter (an
// Envoy /stats regex). A value over int64 (a version hash) wraps: compare
// it only for equality.
func (e *EnvoyProcess) Stats(t testing.TB, filter string) map[string]int64 {
	t.Helper()
	body, err := e.Get("/stats?filter=" + url.QueryEscape(filter))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ": ")
		if !ok {
			continue
		}
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			out[k] = n
		} else if u, err := strconv.ParseUint(v, 10, 64); err == nil {
			out[k] = int64(u) // a version hash: only compared
		}
	}
	return out
}
