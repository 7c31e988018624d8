package dns

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/xdsbridge/xdsbridge/sources"
)

// dnsmasqPath finds the dnsmasq binary. Without it the test is skipped,
// unless XDSBRIDGE_REQUIRE_INTEGRATION=1 (as in CI), where it fails.
func dnsmasqPath(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("dnsmasq"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/dnsmasq"); err == nil {
		return "/usr/sbin/dnsmasq"
	}
	msg := "dnsmasq not installed (run .ci/install.d/dnsmasq.sh)"
	if os.Getenv("XDSBRIDGE_REQUIRE_INTEGRATION") == "1" {
		t.Fatal(msg + " and XDSBRIDGE_REQUIRE_INTEGRATION=1")
	}
	t.Skip(msg)
	return ""
}

// freePort returns a port free for both UDP and TCP on 127.0.0.1 (as far as
// one can tell without holding it).
func freePort(t *testing.T) int {
	t.Helper()
	for range 20 {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := pc.LocalAddr().String()
		ln, err := net.Listen("tcp", addr)
		pc.Close()
		if err != nil {
			continue
		}
		ln.Close()
		return pc.LocalAddr().(*net.UDPAddr).Port
	}
	t.Fatal("no free port")
	return 0
}

// logWatch collects a process's log and signals each new line.
type logWatch struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{}
}

func (w *logWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	close(w.changed)
	w.changed = make(chan struct{})
	return len(p), nil
}

// waitCount waits until substr occurs n times in the log.
func (w *logWatch) waitCount(t *testing.T, substr string, n int) {
	t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for {
		w.mu.Lock()
		got, ch, log := strings.Count(w.buf.String(), substr), w.changed, w.buf.String()
		w.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("dnsmasq did not log %q %d times; log:\n%s", substr, n, log)
		}
	}
}

func TestDnsmasq(t *testing.T) {
	bin := dnsmasqPath(t)
	dir := t.TempDir()
	hosts := filepath.Join(dir, "hosts")
	writeHosts := func(content string) {
		t.Helper()
		if err := os.WriteFile(hosts, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeHosts("10.1.0.1 web.test\n10.1.0.2 web.test\n10.1.0.9 other.test\n")

	port := freePort(t)
	logs := &logWatch{changed: make(chan struct{})}
	cmd := exec.Command(bin,
		"--keep-in-foreground", "--port="+strconv.Itoa(port), "--listen-address=127.0.0.1",
		"--bind-interfaces", "--no-resolv", "--no-hosts", "--addn-hosts="+hosts,
		"--local=/test/", // answer .test from the hosts file only: NXDOMAIN when absent
		"--pid-file=", "--user=root", "--log-facility=-", "--conf-file=/dev/null")
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	readLine := "read " + hosts
	logs.waitCount(t, readLine, 1)

	svc := strict("web", host("web.test", 8080))
	svc["dns_refresh_rate"] = "50ms"
	svc["dns_lookup_family"] = "AUTO" // AAAA is NODATA, falls back to A
	r := startSource(t, "dnsmasq", srcCfg("127.0.0.1:"+strconv.Itoa(port), svc), sources.Env{})
	r.waitEndpoints(t, "web", []sources.Endpoint{ep("10.1.0.1", 8080, "web.test"), ep("10.1.0.2", 8080, "web.test")})

	writeHosts("10.1.0.2 web.test\n10.1.0.3 web.test\n")
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	logs.waitCount(t, readLine, 2)
	r.waitEndpoints(t, "web", []sources.Endpoint{ep("10.1.0.2", 8080, "web.test"), ep("10.1.0.3", 8080, "web.test")})

	// The name disappears: NXDOMAIN is a successful answer with no hosts.
	writeHosts("10.1.0.9 other.test\n")
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	logs.waitCount(t, readLine, 3)
	r.waitEndpoints(t, "web", nil)
	if errs := r.sink.Errors(); len(errs) != 0 {
		t.Fatalf("errors from dnsmasq answers: %v", errs)
	}
}
