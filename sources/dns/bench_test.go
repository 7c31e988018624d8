package dns

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/xdsbridge/xdsbridge/sources"
)

// The benchmark's DNS server runs in a child process (this test binary,
// re-executed) so that the CPU and memory figures are the bridge's alone.
const (
	benchServerEnv = "XDSBRIDGE_DNS_BENCH_SERVER" // "<names>,<ttl>,<wave period>,<wave size>"
	benchNames     = 10000
	benchTTL       = 30
	benchWaveSize  = benchNames / 100 // 1% of the names change per wave
	benchWave      = 10 * time.Second
)

// benchName is the i-th name; benchAddr the address it has in the given
// version (how many times it has changed).
func benchName(i int) string { return "n" + strconv.Itoa(i) + ".bench." }

func benchAddr(i, version int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, byte(version), byte(i >> 8), byte(i)})
}

// benchVersion is how many waves (each changing the next waveSize names,
// cyclically) have touched name i after elapsed; 0 when waves are off.
func benchVersion(i int, elapsed, period time.Duration, waveSize, names int) int {
	if period <= 0 {
		return 0
	}
	v := 0
	for w := 1; w <= int(elapsed/period); w++ {
		start := ((w - 1) * waveSize) % names
		if i >= start && i < start+waveSize {
			v++
		}
	}
	return v
}

// runBenchServer serves the benchmark names until killed; it prints its
// address on stdout first.
func runBenchServer(spec string) {
	var names, ttl, waveSize int
	var period time.Duration
	if _, err := fmt.Sscanf(spec, "%d,%d,%d,%d", &names, &ttl, &period, &waveSize); err != nil {
		fmt.Fprintln(os.Stderr, "bad", benchServerEnv, err)
		os.Exit(2)
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	start := time.Now()
	handler := func(w mdns.ResponseWriter, req *mdns.Msg) {
		m := new(mdns.Msg)
		m.SetReply(req)
		q := req.Question[0]
		i, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(q.Name, "n"), ".bench."))
		if err != nil || i < 0 || i >= names {
			m.Rcode = mdns.RcodeNameError
		} else if q.Qtype == mdns.TypeA {
			v := benchVersion(i, time.Since(start), period, waveSize, names)
			m.Answer = append(m.Answer, &mdns.A{
				Hdr: mdns.RR_Header{Name: q.Name, Rrtype: mdns.TypeA, Class: mdns.ClassINET, Ttl: uint32(ttl)},
				A:   benchAddr(i, v).AsSlice(),
			})
		}
		_ = w.WriteMsg(m)
	}
	srv := &mdns.Server{PacketConn: pc, Handler: mdns.HandlerFunc(handler)}
	srv.NotifyStartedFunc = func() { fmt.Println(pc.LocalAddr().String()) }
	_ = srv.ActivateAndServe()
	os.Exit(0)
}

// countingSink counts publishes and how many services really changed.
type countingSink struct {
	mu        sync.Mutex
	publishes int
	fails     int
	changed   int // services whose endpoints differ from the previous update
	last      map[string][]sources.Endpoint
}

func (s *countingSink) PublishPolicy(context.Context, sources.PolicyUpdate) error { return nil }

func (s *countingSink) Publish(_ context.Context, u sources.Update) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.publishes++
	next := make(map[string][]sources.Endpoint, len(u.Services))
	for _, svc := range u.Services {
		next[svc.Name] = svc.Endpoints
		if s.last != nil && !sameEndpoints(s.last[svc.Name], svc.Endpoints) {
			s.changed++
		}
	}
	s.last = next
	return nil
}

func (s *countingSink) Fail(context.Context, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fails++
}

func (s *countingSink) counts() (publishes, fails, changed int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.publishes, s.fails, s.changed
}

func benchDuration(b *testing.B) time.Duration {
	d := 40 * time.Second // long enough for one TTL-driven refresh of every name
	if v := os.Getenv("XDSBRIDGE_DNS_BENCH_DURATION"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			b.Fatalf("XDSBRIDGE_DNS_BENCH_DURATION: %v", err)
		}
	}
	return d
}

// BenchmarkTenThousandNames resolves 10,000 names with 30s TTLs and
// respect_dns_ttl for XDSBRIDGE_DNS_BENCH_DURATION (default 40s; the issue's
// figure is 2m) and prints queries/s, CPU, memory and publishes (the xDS
// pushes the source causes). Run with -bench TenThousandNames -benchtime 1x.
func BenchmarkTenThousandNames(b *testing.B) {
	b.Run("unchanged", func(b *testing.B) { benchTenThousand(b, 0) })
	b.Run("1pct-changing", func(b *testing.B) { benchTenThousand(b, benchWave) })
}

func benchTenThousand(b *testing.B, wave time.Duration) {
	dur := benchDuration(b)
	addr := startBenchServer(b, wave)
	svcs := make([]svcCfg, benchNames)
	for i := range svcs {
		svcs[i] = svcCfg{"name": fmt.Sprintf("svc%d", i), "dns_lookup_family": "V4_ONLY", "respect_dns_ttl": true,
			"hosts": []map[string]any{{"name": strings.TrimSuffix(benchName(i), "."), "port": 80}}}
	}
	cfg := map[string]any{"resolvers": []string{addr}, "timeout": "2s", "services": svcs}
	s, err := New("bench", mustJSON(b, cfg), sources.Env{})
	if err != nil {
		b.Fatal(err)
	}
	src := s.(*Source)
	sink := &countingSink{}
	runtime.GC()

	for b.Loop() {
		ctx, cancel := context.WithCancel(context.Background())
		var ru0, ru1 syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
		start := time.Now()
		done := make(chan error, 1)
		go func() { done <- src.Run(ctx, sink) }()
		peakHeap, firstRound := sampleUntil(src, sink, start.Add(dur))
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		elapsed := time.Since(start)
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)

		queries := sumQueries(src)
		publishes, fails, changed := sink.counts()
		cpu := cpuSeconds(ru1) - cpuSeconds(ru0)
		expect := 0
		if wave > 0 {
			for i := range benchNames {
				expect += min(benchVersion(i, elapsed, wave, benchWaveSize, benchNames), 1)
			}
		}
		b.Logf("10,000 names, TTL %ds, respect_dns_ttl, %s (waves: %v):", benchTTL, elapsed.Round(time.Second), wave)
		b.Logf("  queries sent: %.0f (%.1f/s overall; first round of 10,000 names took %s)",
			queries, queries/elapsed.Seconds(), firstRound.Round(time.Millisecond))
		b.Logf("  bridge CPU: %.2fs user+sys (%.1f%% of one core)", cpu, 100*cpu/elapsed.Seconds())
		b.Logf("  peak heap: %.1f MiB, peak RSS: %.1f MiB", float64(peakHeap)/(1<<20), float64(ru1.Maxrss)/1024)
		b.Logf("  publishes (xDS pushes): %d; service endpoint sets really changed: %d (names changed at the server: %d, each seen within TTL+jitter ≤ 33s); failures: %d",
			publishes, changed, expect, fails)
		b.ReportMetric(queries/elapsed.Seconds(), "queries/s")
		b.ReportMetric(cpu, "cpu-s")
		b.ReportMetric(float64(publishes), "publishes")
		b.ReportMetric(float64(peakHeap)/(1<<20), "peak-heap-MiB")
	}
}

// sampleUntil samples the heap every 250ms until end and notes when the
// first publish (the end of the first round) arrived.
func sampleUntil(src *Source, sink *countingSink, end time.Time) (peakHeap uint64, firstRound time.Duration) {
	start := time.Now()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	var ms runtime.MemStats
	for now := start; now.Before(end); now = <-tick.C {
		runtime.ReadMemStats(&ms)
		peakHeap = max(peakHeap, ms.HeapAlloc)
		if p, _, _ := sink.counts(); p > 0 && firstRound == 0 {
			firstRound = time.Since(start)
		}
	}
	return peakHeap, firstRound
}

func cpuSeconds(ru syscall.Rusage) float64 {
	return float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
}

// sumQueries adds up the source's query counter over all labels.
func sumQueries(src *Source) float64 {
	ch := make(chan prometheus.Metric, 64)
	go func() {
		src.metrics.queries.Collect(ch)
		close(ch)
	}()
	total := 0.0
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err == nil {
			total += d.GetCounter().GetValue()
		}
	}
	return total
}

// startBenchServer re-executes the test binary as the DNS server.
func startBenchServer(b *testing.B, wave time.Duration) string {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d,%d,%d,%d", benchServerEnv, benchNames, benchTTL, int64(wave), benchWaveSize))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		b.Fatalf("bench server: %v", err)
	}
	return strings.TrimSpace(line)
}
