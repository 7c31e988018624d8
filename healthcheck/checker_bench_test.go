package healthcheck

// The 10,000-host benchmark of the issue, as an env-gated test:
//
//	XDSBRIDGE_HC_BENCH_DURATION=70s go test -run TestBenchTenThousandHTTPHosts -v -timeout 10m ./healthcheck/
//
// XDSBRIDGE_HC_BENCH_DURATION (e.g. 20s, 70s) turns it on; XDSBRIDGE_HC_BENCH_HOSTS
// changes the number of hosts (default 10000).
//
// Setup: the HTTP servers run in a child process (this test binary re-run as
// TestHelperBenchServers) so that the CPU and memory figures are those of
// the checker alone. The child opens one real listener per host: 10,000
// distinct address:port pairs, 1,000 loopback addresses 127.77.a.b times 10
// ports, raising RLIMIT_NOFILE to its hard limit. Each request fails (503)
// with probability 1%. The checker probes every host over HTTP/1.1 with the
// defaults (interval 5s, jitter 500ms, timeout 1s, thresholds 2/3,
// the servers have keep-alives off, so every probe opens a connection).
//
// Figures: probes per second, CPU seconds of this process (getrusage) and of
// the servers (/proc), peak RSS and heap, scheduling lag, and verdict
// transitions, the pushes the merge would cause. Transitions during the first
// interval (every host going Unknown → Healthy) are counted apart from the
// steady state.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xdsbridge/xdsbridge/sources"
)

const (
	benchPortBase  = 24100
	benchPorts     = 10
	benchNoise     = 0.01
	benchServerEnv = "XDSBRIDGE_HC_BENCH_SERVER"
)

func benchHost(i int) sources.HostKey {
	a := i / benchPorts
	return sources.HostKey{
		Address: fmt.Sprintf("127.77.%d.%d", a/250, a%250+1),
		Port:    uint32(benchPortBase + i%benchPorts),
	}
}

func raiseNoFile() (uint64, error) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, err
	}
	rl.Cur = rl.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, err
	}
	return rl.Cur, nil
}

// TestHelperBenchServers is the child process of the benchmark: it serves
// HTTP on the hosts' addresses until its stdin closes.
func TestHelperBenchServers(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv(benchServerEnv))
	if n == 0 {
		t.Skip("helper process for TestBenchTenThousandHTTPHosts")
	}
	if _, err := raiseNoFile(); err != nil {
		fmt.Println("ERROR", err)
		return
	}
	var reqs, fails atomic.Int64
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			reqs.Add(1)
			if rand.Float64() < benchNoise {
				fails.Add(1)
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			w.Write([]byte("ok\n"))
		}),
		ReadHeaderTimeout: 5 * time.Second,
	}
	srv.SetKeepAlivesEnabled(false)
	for i := range n {
		ln, err := net.Listen("tcp", benchHost(i).String())
		if err != nil {
			fmt.Println("ERROR", err)
			return
		}
		go srv.Serve(ln)
	}
	fmt.Println("READY")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // until the parent goes
	fmt.Printf("REQUESTS %d %d\n", reqs.Load(), fails.Load())
}

func TestBenchTenThousandHTTPHosts(t *testing.T) {
	durS := os.Getenv("XDSBRIDGE_HC_BENCH_DURATION")
	if durS == "" {
		t.Skip("set XDSBRIDGE_HC_BENCH_DURATION (e.g. 20s, 70s) to run the 10,000-host benchmark")
	}
	dur, err := time.ParseDuration(durS)
	if err != nil {
		t.Fatal(err)
	}
	hosts := 10000
	if s := os.Getenv("XDSBRIDGE_HC_BENCH_HOSTS"); s != "" {
		if hosts, err = strconv.Atoi(s); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := raiseNoFile(); err != nil {
		t.Fatal(err)
	}

	// The servers.
	cmd, stdin, out := startHelperProcess(t, "TestHelperBenchServers", fmt.Sprintf("%s=%d", benchServerEnv, hosts))
	childDone := make(chan string, 1)
	defer func() {
		stdin.Close()
		select {
		case line := <-childDone:
			t.Logf("servers: %s", line)
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
		}
		cmd.Wait()
	}()
	if !out.Scan() || out.Text() != "READY" {
		t.Fatalf("servers did not start: %q", out.Text())
	}
	go func() {
		var last string
		for out.Scan() {
			if strings.HasPrefix(out.Text(), "REQUESTS") {
				last = out.Text()
			}
		}
		childDone <- last
	}()

	check, err := ParseConfig(json.RawMessage(`{"type": "http", "http": {"path": "/health"}}`), "health_check")
	if err != nil {
		t.Fatal(err)
	}
	targets := make([]Target, hosts)
	for i := range targets {
		targets[i] = Target{Host: benchHost(i), Check: check}
	}
	reg := prometheus.NewRegistry()
	c := NewChecker(Options{Metrics: reg})

	// Memory sampling.
	var peakHeap, peakGoroutines atomic.Uint64
	sampleDone := make(chan struct{})
	stopSampling := make(chan struct{})
	go func() {
		defer close(sampleDone)
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peakHeap.Load() {
				peakHeap.Store(ms.HeapInuse)
			}
			if g := uint64(runtime.NumGoroutine()); g > peakGoroutines.Load() {
				peakGoroutines.Store(g)
			}
			select {
			case <-tick.C:
			case <-stopSampling:
				return
			}
		}
	}()

	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var warmTransitions int
	steady := map[TargetKey]int{}
	var steadyTotal int
	warmupEnd := time.Now().Add(check.Interval.D() + check.Jitter.D() + check.Timeout.D() + time.Second)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case tr := <-c.Transitions():
				mu.Lock()
				if tr.Previous == Unknown {
					warmTransitions++
				} else {
					steady[tr.Key]++
					steadyTotal++
				}
				mu.Unlock()
			case <-ctx.Done():
				return
			}
		}
	})

	if err := c.SetTargets(targets); err != nil {
		t.Fatal(err)
	}
	runErr := make(chan error, 1)
	start := time.Now()
	ru0 := rusage()
	go func() { runErr <- c.Run(ctx) }()

	// Warm-up: one interval, every target probed once.
	time.Sleep(time.Until(warmupEnd))
	probes0 := counterSum(t, reg, "xdsbridge_healthcheck_probes_total")
	ru1 := rusage()
	child1 := procCPU(cmd.Process.Pid)
	t1 := time.Now()
	snapshotUnknown := 0
	for _, s := range c.Snapshot() {
		if s.Verdict == Unknown {
			snapshotUnknown++
		}
	}
	if d := dur - time.Since(start); d > 0 {
		time.Sleep(d)
	}
	probes1 := counterSum(t, reg, "xdsbridge_healthcheck_probes_total")
	fails := counterLabel(t, reg, "xdsbridge_healthcheck_probes_total", "result", "fail")
	ru2 := rusage()
	child2 := procCPU(cmd.Process.Pid)
	t2 := time.Now()
	lagSum, lagCount, lagOver := histogram(t, reg, "xdsbridge_healthcheck_schedule_lag_seconds", 0.1)
	cancel()
	if err := <-runErr; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(stopSampling)
	<-sampleDone

	window := t2.Sub(t1).Seconds()
	cpu := (ru2.Utime.Nano() + ru2.Stime.Nano() - ru1.Utime.Nano() - ru1.Stime.Nano())
	cpuAll := (ru2.Utime.Nano() + ru2.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
	mu.Lock()
	maxPerHost := 0
	for _, n := range steady {
		maxPerHost = max(maxPerHost, n)
	}
	mu.Unlock()
	minutes := window / 60
	t.Logf("hosts %d, run %v, steady-state window %.1fs (after a %v warm-up)", hosts, dur, window, warmupEnd.Sub(start).Round(time.Millisecond))
	t.Logf("probes: %.0f/s in the window (ideal %d/(interval+mean jitter) = %.0f/s); %.2f%% failed", (probes1-probes0)/window, hosts, float64(hosts)/(check.Interval.D()+check.Jitter.D()/2).Seconds(), 100*fails/probes1)
	t.Logf("schedule lag: mean %.2fms over %.0f probes, %.0f started more than 100ms late", 1000*lagSum/lagCount, lagCount, lagOver)
	t.Logf("checker CPU: %.2fs (user %.2fs, system %.2fs) over %.1fs = %.1f%% of one core in the window, %.0fµs per probe (%.2fs total incl. warm-up); servers CPU: %.1f%% of one core",
		float64(cpu)/1e9, float64(ru2.Utime.Nano()-ru1.Utime.Nano())/1e9, float64(ru2.Stime.Nano()-ru1.Stime.Nano())/1e9,
		window, 100*float64(cpu)/1e9/window, float64(cpu)/1e3/(probes1-probes0), float64(cpuAll)/1e9, 100*(child2-child1)/window)
	t.Logf("checker memory: peak RSS %.1f MiB, peak heap in use %.1f MiB, peak goroutines %d",
		float64(ru2.Maxrss)/1024, float64(peakHeap.Load())/(1<<20), peakGoroutines.Load())
	t.Logf("transitions (pushes): %d first verdicts (Unknown → Healthy; %d targets still Unknown after the warm-up, their first probe failed); steady state %d in %.1fs = %.5f per host per minute (max for one host: %d)",
		warmTransitions, snapshotUnknown, steadyTotal, window, float64(steadyTotal)/float64(hosts)/minutes, maxPerHost)
	if perMin := float64(maxPerHost) / max(minutes, 1); perMin > 1 {
		t.Errorf("a host caused %d transitions in %.1f minutes (target: at most one per minute)", maxPerHost, minutes)
	}
}

func rusage() syscall.Rusage {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru
}

// procCPU returns the CPU seconds (user+system) of a process from /proc.
func procCPU(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	// Fields after the command: state(0) ... utime(11) stime(12).
	u, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (u + st) / 100 // USER_HZ
}

func counterSum(t *testing.T, reg *prometheus.Registry, name string) float64 {
	return counterLabel(t, reg, name, "", "")
}

func counterLabel(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			if label != "" {
				for _, lp := range m.GetLabel() {
					if lp.GetName() == label && lp.GetValue() != value {
						continue metrics
					}
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// histogram returns the sum, count and the number of observations above
// bound (a bucket boundary) of a histogram.
func histogram(t *testing.T, reg *prometheus.Registry, name string, bound float64) (sum, count, over float64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			h := m.GetHistogram()
			sum += h.GetSampleSum()
			count += float64(h.GetSampleCount())
			for _, b := range h.GetBucket() {
				if b.GetUpperBound() == bound {
					over += float64(h.GetSampleCount() - b.GetCumulativeCount())
				}
			}
		}
	}
	return sum, count, over
}
