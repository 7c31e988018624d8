package healthcheck

// The datacenter-scale benchmark, as an env-gated test:
//
//	XDSBRIDGE_HC_DC_BENCH=40s XDSBRIDGE_HC_DC_TYPE=tcp go test -run '^TestBenchDatacenterScale$' -v -timeout 10m ./healthcheck/
//
// XDSBRIDGE_HC_DC_BENCH (the run's length, warm-up included) turns it on;
// XDSBRIDGE_HC_DC_TYPE is tcp (default) or http; XDSBRIDGE_HC_DC_HOSTS the
// number of endpoints (default 100000); XDSBRIDGE_HC_DC_BLACKHOLED the
// percentage of them that never answer a SYN (default 5);
// XDSBRIDGE_HC_DC_INTERVAL the checks' interval (default 5s; the jitter is
// 10 % of it, the timeout 1s); XDSBRIDGE_HC_DC_PORTABLE=1 makes the TCP
// checks dial with net.Dialer in goroutines instead of the connect loop.
//
// The backends run in a child process (this test binary re-run as
// TestHelperDatacenterBackends), so the figures are the checker's alone.
// Endpoint i is 127.n.x.y (i/4 + 1; n from the process id) on one of 4
// ports; every 100/b-th
// endpoint (b the blackholed percentage) uses instead a port whose listener
// has a backlog of 0, a full accept queue and never accepts: the kernel
// drops the SYNs sent there, as a blackholed host would. The listeners are
// bound to the wildcard address, so that one listener per port serves all
// of 127/8 (all loopback on Linux) without one socket per endpoint.
//
// Printed: cores used, probes/s achieved and wanted, schedule lag p50/p99
// (interpolated in the lag histogram's buckets), steady RSS, and the
// TIME_WAIT sockets on the host (`ss -tan state time-wait`) at the end of
// the window: the checker's side, the backends' side, and the host's.

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xdsbridge/xdsbridge/sources"
)

const (
	dcPortBase      = 24200 // 4 ports of backends
	dcPorts         = 4
	dcBlackholePort = 24290
	dcBackendsEnv   = "XDSBRIDGE_HC_DC_BACKENDS"
)

// dcNet is the second byte of the endpoints' addresses (127.dcNet.x.y),
// one per run so that the TIME_WAIT count of a run is its own: sockets of
// the previous run stay in TIME_WAIT for a minute.
var dcNet = 100 + os.Getpid()%100

func dcHost(i, blackholedPct int) sources.HostKey {
	a := i/dcPorts + 1
	port := uint32(dcPortBase + i%dcPorts)
	if blackholedPct > 0 && i%(100/blackholedPct) == 0 {
		port = dcBlackholePort
	}
	return sources.HostKey{Address: fmt.Sprintf("127.%d.%d.%d", dcNet, a>>8, a&255), Port: port}
}

// raiseNoFileTo raises RLIMIT_NOFILE to n (the hard limit too, which needs
// CAP_SYS_RESOURCE), or to the hard limit.
func raiseNoFileTo(n uint64) (uint64, error) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, err
	}
	if rl.Max < n {
		want := syscall.Rlimit{Cur: n, Max: n}
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want) == nil {
			return n, nil
		}
	}
	rl.Cur = rl.Max
	return rl.Cur, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl)
}

// TestHelperDatacenterBackends is the child process of the benchmark: TCP
// and HTTP (keep-alive) backends on the wildcard address until stdin closes.
func TestHelperDatacenterBackends(t *testing.T) {
	if os.Getenv(dcBackendsEnv) == "" {
		t.Skip("helper process for TestBenchDatacenterScale")
	}
	if _, err := raiseNoFileTo(1 << 20); err != nil {
		fmt.Println("ERROR", err)
		return
	}
	_, closeBlackhole, err := blackholeListener([4]byte{}, dcBlackholePort)
	if err != nil {
		fmt.Println("ERROR", err)
		return
	}
	defer closeBlackhole()
	srv := &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") }),
		ReadHeaderTimeout: time.Minute,
	}
	for p := range dcPorts {
		ln, err := net.Listen("tcp", fmt.Sprintf("0.0.0.0:%d", dcPortBase+p))
		if err != nil {
			fmt.Println("ERROR", err)
			return
		}
		go srv.Serve(ln)
	}
	fmt.Println("READY")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
}

// startHelperProcess runs this test binary again as the helper test
// (which acts on env) with pipes to its stdin and from its stdout.
func startHelperProcess(t *testing.T, test, env string) (*exec.Cmd, io.WriteCloser, *bufio.Scanner) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.v=false")
	cmd.Env = append(os.Environ(), env)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, stdin, bufio.NewScanner(stdout)
}

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return n
}

func TestBenchDatacenterScale(t *testing.T) {
	durS := os.Getenv("XDSBRIDGE_HC_DC_BENCH")
	if durS == "" {
		t.Skip("set XDSBRIDGE_HC_DC_BENCH (e.g. 40s) to run the datacenter-scale benchmark")
	}
	dur, err := time.ParseDuration(durS)
	if err != nil {
		t.Fatal(err)
	}
	typ := os.Getenv("XDSBRIDGE_HC_DC_TYPE")
	if typ == "" {
		typ = TypeTCP
	}
	hosts := envInt(t, "XDSBRIDGE_HC_DC_HOSTS", 100000)
	blackholed := envInt(t, "XDSBRIDGE_HC_DC_BLACKHOLED", 5)
	if blackholed < 0 || blackholed > 50 {
		t.Fatal("XDSBRIDGE_HC_DC_BLACKHOLED: want 0..50")
	}
	if _, err := raiseNoFileTo(1 << 20); err != nil {
		t.Fatal(err)
	}

	cmd, stdin, out := startHelperProcess(t, "TestHelperDatacenterBackends", dcBackendsEnv+"=1")
	defer func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}()
	if !out.Scan() || out.Text() != "READY" {
		t.Fatalf("backends did not start: %q", out.Text())
	}

	interval := cmp.Or(os.Getenv("XDSBRIDGE_HC_DC_INTERVAL"), "5s")
	raw := fmt.Sprintf(`{"type": "tcp", "interval": %q}`, interval)
	if typ == TypeHTTP {
		raw = fmt.Sprintf(`{"type": "http", "interval": %q, "http": {"path": "/health"}}`, interval)
	}
	check, err := ParseConfig(json.RawMessage(raw), "health_check")
	if err != nil {
		t.Fatal(err)
	}
	targets := make([]Target, hosts)
	for i := range targets {
		targets[i] = Target{Host: dcHost(i, blackholed), Check: check}
	}
	reg := prometheus.NewRegistry()
	c := NewChecker(Options{Metrics: reg})
	c.portableTCP = os.Getenv("XDSBRIDGE_HC_DC_PORTABLE") == "1"
	go func() {
		for range c.Transitions() {
		}
	}()
	if err := c.SetTargets(targets); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	start := time.Now()
	go func() { runErr <- c.Run(ctx) }()

	// Warm-up: every target probed once, and the blackholed ones timed out.
	time.Sleep(check.Interval.D() + check.Jitter.D() + check.Timeout.D() + time.Second)
	probes0 := counterSum(t, reg, "xdsbridge_healthcheck_probes_total")
	fails0 := counterLabel(t, reg, "xdsbridge_healthcheck_probes_total", "result", "fail")
	lag0 := histogramBuckets(t, reg, "xdsbridge_healthcheck_schedule_lag_seconds")
	ru1, t1 := rusage(), time.Now()
	if d := dur - time.Since(start); d > 0 {
		time.Sleep(d)
	}
	probes1 := counterSum(t, reg, "xdsbridge_healthcheck_probes_total")
	fails1 := counterLabel(t, reg, "xdsbridge_healthcheck_probes_total", "result", "fail")
	lag1 := histogramBuckets(t, reg, "xdsbridge_healthcheck_schedule_lag_seconds")
	ru2, t2 := rusage(), time.Now()
	rss := vmRSS()
	twChecker, twBackends := timeWait()
	twAll := timeWaitAll()
	lastErrors := map[string]int{}
	for _, st := range c.Snapshot() {
		if st.LastError != "" {
			lastErrors[st.LastError]++
		}
	}
	runtime.KeepAlive(targets)
	cancel()
	if err := <-runErr; err != nil {
		t.Fatal(err)
	}

	window := t2.Sub(t1).Seconds()
	cpu := float64(ru2.Utime.Nano()+ru2.Stime.Nano()-ru1.Utime.Nano()-ru1.Stime.Nano()) / 1e9
	lag := lag1.minus(lag0)
	load, _ := os.ReadFile("/proc/loadavg")
	t.Logf("%d %s endpoints (connect loop: %v), %d%% blackholed, interval %v, timeout %v; window %.1fs after the warm-up; load average %s",
		hosts, typ, c.loopProbes.Load() > 0, blackholed, check.Interval.D(), check.Timeout.D(), window, strings.Join(strings.Fields(string(load))[:3], " "))
	t.Logf("probes failed %.1f%% (blackholed: %d%%); CPU %.0fµs per probe", 100*(fails1-fails0)/(probes1-probes0), blackholed, 1e6*cpu/(probes1-probes0))
	t.Logf("cores %.2f (CPU %.1fs / %.1fs wall, this process: the checker); probes/s %.0f achieved / %.0f wanted; schedule lag p50 %s p99 %s (%.2f%% > 100ms); RSS %.0f MiB (peak %.0f MiB); TIME_WAIT checker side %d, backends side %d (host: %d)",
		cpu/window, cpu, window, (probes1-probes0)/window, float64(hosts)/(check.Interval.D()+check.Jitter.D()/2).Seconds(),
		lagString(lag, 0.5), lagString(lag, 0.99), 100*lag.fractionOver(0.1),
		float64(rss)/(1<<20), float64(ru2.Maxrss)/1024, twChecker, twBackends, twAll)
	t.Logf("targets by last error: %v", lastErrors)
}

// buckets is a histogram's cumulative bucket counts.
type buckets struct {
	bounds []float64
	counts []float64 // cumulative; the last is the total (+Inf)
}

func histogramBuckets(t *testing.T, reg *prometheus.Registry, name string) buckets {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b buckets
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		h := mf.GetMetric()[0].GetHistogram()
		for _, bk := range h.GetBucket() {
			b.bounds = append(b.bounds, bk.GetUpperBound())
			b.counts = append(b.counts, float64(bk.GetCumulativeCount()))
		}
		b.bounds = append(b.bounds, math.Inf(1))
		b.counts = append(b.counts, float64(h.GetSampleCount()))
	}
	return b
}

func (b buckets) minus(o buckets) buckets {
	out := buckets{bounds: b.bounds, counts: make([]float64, len(b.counts))}
	for i := range b.counts {
		out.counts[i] = b.counts[i]
		if i < len(o.counts) {
			out.counts[i] -= o.counts[i]
		}
	}
	return out
}

// quantile interpolates linearly inside the bucket holding q.
func (b buckets) quantile(q float64) float64 {
	if len(b.counts) == 0 || b.counts[len(b.counts)-1] == 0 {
		return 0
	}
	rank := q * b.counts[len(b.counts)-1]
	lo, below := 0.0, 0.0
	for i, c := range b.counts {
		if c >= rank {
			if math.IsInf(b.bounds[i], 1) {
				return b.bounds[i] // beyond the last bucket
			}
			return lo + (b.bounds[i]-lo)*(rank-below)/(c-below)
		}
		lo, below = b.bounds[i], c
	}
	return lo
}

// lagString formats a quantile in ms, or "> last bucket" beyond it.
func lagString(b buckets, q float64) string {
	v := b.quantile(q)
	if math.IsInf(v, 1) {
		return fmt.Sprintf("> %gms", 1000*b.bounds[len(b.bounds)-2])
	}
	return fmt.Sprintf("%.1fms", 1000*v)
}

func (b buckets) fractionOver(bound float64) float64 {
	total := b.counts[len(b.counts)-1]
	for i, ub := range b.bounds {
		if ub == bound && total > 0 {
			return (total - b.counts[i]) / total
		}
	}
	return 0
}

// vmRSS is this process's resident set size in bytes.
func vmRSS() uint64 {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseUint(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// timeWait counts the TCP sockets in TIME_WAIT on the checker's side (to
// this run's endpoints; other processes on a shared host have their own)
// and on the backends' side (from them), as `ss -tan state time-wait dst
// 127.n.0.0/16 | wc -l` does (less the header); -1 without ss.
func timeWait() (checker, backends int) {
	count := func(dir string) int {
		out, err := exec.Command("ss", "-tan", "state", "time-wait", dir, fmt.Sprintf("127.%d.0.0/16", dcNet)).Output()
		if err != nil {
			return -1
		}
		return max(strings.Count(string(out), "\n")-1, 0)
	}
	return count("dst"), count("src")
}

// timeWaitAll counts all of the host's TCP sockets in TIME_WAIT.
func timeWaitAll() int {
	out, err := exec.Command("ss", "-tan", "state", "time-wait").Output()
	if err != nil {
		return -1
	}
	return max(strings.Count(string(out), "\n")-1, 0)
}
