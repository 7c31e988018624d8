package healthcheck

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/xdsbridge/xdsbridge/config/decode"
	"github.com/xdsbridge/xdsbridge/sources"
)

const waitLimit = 10 * time.Second

// ---- backends ----

// httpBackend is a real HTTP server whose /health the test toggles.
type httpBackend struct {
	srv   *httptest.Server
	host  sources.HostKey
	fail  atomic.Bool
	delay atomic.Int64 // nanoseconds
	// decide, if set, overrides fail: request n (from 1) succeeds if true.
	decide atomic.Pointer[func(n int64) bool]

	reqs        atomic.Int64
	inflight    atomic.Int64
	maxInflight atomic.Int64
	mu          sync.Mutex
	lastHost    string
	lastUA      string
	lastPath    string
}

func newHTTPBackend(t *testing.T) *httpBackend {
	t.Helper()
	b := &httpBackend{}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := b.reqs.Add(1)
		in := b.inflight.Add(1)
		defer b.inflight.Add(-1)
		for {
			m := b.maxInflight.Load()
			if in <= m || b.maxInflight.CompareAndSwap(m, in) {
				break
			}
		}
		b.mu.Lock()
		b.lastHost, b.lastUA, b.lastPath = r.Host, r.UserAgent(), r.URL.Path
		b.mu.Unlock()
		if d := b.delay.Load(); d > 0 {
			select {
			case <-time.After(time.Duration(d)):
			case <-r.Context().Done():
				return
			}
		}
		ok := !b.fail.Load()
		if f := b.decide.Load(); f != nil {
			ok = (*f)(n)
		}
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "unhealthy")
			return
		}
		fmt.Fprintln(w, "ok")
	}))
	t.Cleanup(b.srv.Close)
	b.host = hostOf(b.srv.Listener.Addr())
	return b
}

func hostOf(a net.Addr) sources.HostKey {
	ta := a.(*net.TCPAddr)
	return sources.HostKey{Address: ta.IP.String(), Port: uint32(ta.Port)}
}

// ---- checks ----

func ms(n int) decode.Duration { return decode.Duration(time.Duration(n) * time.Millisecond) }

func httpCheck(interval int, mods ...func(*Config)) Config {
	c := Config{Type: TypeHTTP, Interval: ms(interval), Timeout: ms(1000), HTTP: &HTTPConfig{Path: "/health"}}
	for _, m := range mods {
		m(&c)
	}
	return c
}

func tcpCheck(interval int, mods ...func(*Config)) Config {
	c := Config{Type: TypeTCP, Interval: ms(interval), Timeout: ms(1000)}
	for _, m := range mods {
		m(&c)
	}
	return c
}

func initial(s string) func(*Config) { return func(c *Config) { c.InitialState = s } }

// ---- harness: a running checker and the transitions it emitted ----

type harness struct {
	t       *testing.T
	c       *Checker
	cancel  context.CancelFunc
	done    chan error
	colDone chan struct{}

	mu  sync.Mutex
	trs []Transition
}

func startChecker(t *testing.T, opts Options, targets ...Target) *harness {
	t.Helper()
	if opts.Seed == 0 {
		opts.Seed = 1
	}
	h := &harness{t: t, c: NewChecker(opts), done: make(chan error, 1), colDone: make(chan struct{})}
	if err := h.c.SetTargets(targets); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() { h.done <- h.c.Run(ctx) }()
	go func() {
		defer close(h.colDone)
		for {
			select {
			case tr := <-h.c.Transitions():
				h.mu.Lock()
				h.trs = append(h.trs, tr)
				h.mu.Unlock()
			case <-ctx.Done():
				return
			}
		}
	}()
	t.Cleanup(h.stop)
	return h
}

func (h *harness) stop() {
	if h.cancel == nil {
		return
	}
	h.cancel()
	h.cancel = nil
	select {
	case err := <-h.done:
		if err != nil {
			h.t.Errorf("Run: %v", err)
		}
	case <-time.After(waitLimit):
		h.t.Fatal("Run did not return after cancel")
	}
	<-h.colDone
}

func (h *harness) transitions(k TargetKey) []Transition {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []Transition
	for _, tr := range h.trs {
		if tr.Key == k {
			out = append(out, tr)
		}
	}
	return out
}

// waitFor polls cond until it holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// waitVerdict waits until the consumer got a transition of k to v.
func (h *harness) waitVerdict(k TargetKey, v Verdict) {
	h.t.Helper()
	waitFor(h.t, fmt.Sprintf("%s to turn %s", k.Host, v), func() bool {
		trs := h.transitions(k)
		return len(trs) > 0 && trs[len(trs)-1].Verdict == v
	})
}

func (h *harness) state(k TargetKey) State {
	h.t.Helper()
	s, ok := h.c.State(k)
	if !ok {
		h.t.Fatalf("no state for %s", k)
	}
	return s
}

// waitProbes waits until k has had at least n probes.
func (h *harness) waitProbes(k TargetKey, n uint64) State {
	h.t.Helper()
	var s State
	waitFor(h.t, fmt.Sprintf("%d probes of %s", n, k.Host), func() bool {
		s = h.state(k)
		return s.Probes >= n
	})
	return s
}

// verifyNoLeaks checks, after every other cleanup of t, that t left no
// goroutines behind.
func verifyNoLeaks(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
}

// ---- tests ----

func TestHTTPThresholds(t *testing.T) {
	verifyNoLeaks(t)
	b := newHTTPBackend(t)
	tg := Target{Host: b.host, Check: httpCheck(20, func(c *Config) { c.HTTP.Host = "web.example" })}
	k := tg.Key()
	h := startChecker(t, Options{}, tg)

	// Unknown → Healthy on the first success.
	h.waitVerdict(k, Healthy)
	s := h.state(k)
	if s.Probes != 1 || s.ConsecutiveSuccesses != 1 {
		t.Errorf("healthy after %d probes (%+v)", s.Probes, s)
	}
	b.mu.Lock()
	if b.lastHost != "web.example" || b.lastUA != UserAgent || b.lastPath != "/health" {
		t.Errorf("request Host %q, User-Agent %q, path %q", b.lastHost, b.lastUA, b.lastPath)
	}
	b.mu.Unlock()

	// Healthy → Unhealthy only after 3 consecutive failures.
	b.fail.Store(true)
	h.waitVerdict(k, Unhealthy)
	s = h.state(k)
	if s.ConsecutiveFailures != 3 || s.LastResult != "fail" || s.LastError != "status 503" {
		t.Errorf("unhealthy with state %+v", s)
	}

	// Unhealthy → Healthy only after 2 consecutive successes.
	b.fail.Store(false)
	h.waitVerdict(k, Healthy)
	s = h.state(k)
	if s.ConsecutiveSuccesses != 2 {
		t.Errorf("healthy again with state %+v", s)
	}
	want := []Transition{{k, Unknown, Healthy}, {k, Healthy, Unhealthy}, {k, Unhealthy, Healthy}}
	if got := h.transitions(k); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("transitions %v, want %v", got, want)
	}
	h.stop()
}

func TestFlappingHostBelowThresholds(t *testing.T) {
	alternate := func(n int64) bool { return n%2 == 0 } // fail, ok, fail, ok, ...
	b1, b2 := newHTTPBackend(t), newHTTPBackend(t)
	b1.decide.Store(&alternate)
	b2.decide.Store(&alternate)
	start := []Target{
		{Host: b1.host, Check: httpCheck(20, initial(InitialHealthy))},
		{Host: b2.host, Check: httpCheck(20, initial(InitialUnknown))},
	}
	h := startChecker(t, Options{}, start...)
	kh, ku := start[0].Key(), start[1].Key()
	h.waitProbes(kh, 20)
	h.waitProbes(ku, 20)
	h.stop()

	// Starting healthy: the initial verdict only, never a change.
	if got := h.transitions(kh); len(got) != 1 || got[0].Verdict != Healthy {
		t.Errorf("healthy-start target: transitions %v", got)
	}
	// Starting unknown: healthy on its first success, then nothing.
	if got := h.transitions(ku); len(got) != 1 || got[0].Verdict != Healthy {
		t.Errorf("unknown-start target: transitions %v", got)
	}
	if s := h.state(kh); s.Transitions != 0 || s.Verdict != Healthy {
		t.Errorf("state %+v", s)
	}
}

func TestUnknownNeedsThresholdToTurnUnhealthy(t *testing.T) {
	b := newHTTPBackend(t)
	b.fail.Store(true)
	tg := Target{Host: b.host, Check: httpCheck(20)}
	k := tg.Key()
	h := startChecker(t, Options{}, tg)
	// After one and two failures the verdict is still Unknown: discovery
	// health stands, no burst of UNHEALTHY at start.
	s := h.waitProbes(k, 1)
	if s.Verdict != Unknown && s.Probes < 3 {
		t.Fatalf("verdict %s after %d failures", s.Verdict, s.Probes)
	}
	h.waitVerdict(k, Unhealthy)
	if s := h.state(k); s.Probes != 3 {
		t.Errorf("unhealthy after %d probes, want 3", s.Probes)
	}
	if got := h.transitions(k); len(got) != 1 || got[0].Previous != Unknown {
		t.Errorf("transitions %v", got)
	}
	// Back from a probe-made Unhealthy takes healthy_threshold successes.
	b.fail.Store(false)
	h.waitVerdict(k, Healthy)
	if s := h.state(k); s.ConsecutiveSuccesses != 2 {
		t.Errorf("state %+v", s)
	}
}

func TestInitialStates(t *testing.T) {
	b := newHTTPBackend(t)
	b.fail.Store(true)
	slow := func(c *Config) { c.Interval = ms(200) }
	tu := Target{Host: b.host, Check: httpCheck(20, initial(InitialUnhealthy))}
	th := Target{Host: b.host, Check: httpCheck(20, initial(InitialHealthy), slow)}
	h := startChecker(t, Options{}, tu, th)
	// The initial verdicts are reported as transitions from Unknown right
	// away, and State has them before any probe.
	h.waitVerdict(tu.Key(), Unhealthy)
	h.waitVerdict(th.Key(), Healthy)
	h.waitProbes(tu.Key(), 1)

	// initial unhealthy: its very first success is enough (Envoy's startup
	// rule), but only if no failure came first.
	tu2 := Target{Host: b.host, Check: httpCheck(20, initial(InitialUnhealthy), func(c *Config) { c.HTTP.Path = "/other" })}
	b.fail.Store(false)
	if err := h.c.SetTargets([]Target{tu, th, tu2}); err != nil {
		t.Fatal(err)
	}
	h.waitVerdict(tu2.Key(), Healthy)
	if s := h.state(tu2.Key()); s.Probes != 1 {
		t.Errorf("initially unhealthy target healthy after %d probes, want 1", s.Probes)
	}
	h.waitVerdict(tu.Key(), Healthy)
	if s := h.state(tu.Key()); s.ConsecutiveSuccesses != 2 {
		t.Errorf("initially unhealthy target that failed first: healthy after %d successes, want 2", s.ConsecutiveSuccesses)
	}
}

func TestSharedProbe(t *testing.T) {
	b := newHTTPBackend(t)
	// The same address:port and check, discovered under two services and
	// written two ways: one target, one probe stream.
	parsed, err := ParseConfig([]byte(`{"type": "http", "interval": "20ms", "jitter": 0, "timeout": "1s", "http": {"path": "/health"}}`), "hc")
	if err != nil {
		t.Fatal(err)
	}
	t1 := Target{Host: b.host, Check: httpCheck(20)}
	t2 := Target{Host: b.host, Check: parsed}
	if t1.Key() != t2.Key() {
		t.Fatalf("keys differ:\n%s\n%s", t1.Key(), t2.Key())
	}
	h := startChecker(t, Options{}, t1, t2, t1)
	if n := len(h.c.Snapshot()); n != 1 {
		t.Fatalf("%d targets, want 1", n)
	}
	s := h.waitProbes(t1.Key(), 10)
	h.stop()
	s = h.state(t1.Key())
	if got := b.reqs.Load(); uint64(got) != s.Probes {
		t.Errorf("server saw %d requests, checker made %d probes", got, s.Probes)
	}
	if m := b.maxInflight.Load(); m != 1 {
		t.Errorf("%d requests in flight at once", m)
	}
}

func TestOneProbeInFlight(t *testing.T) {
	b := newHTTPBackend(t)
	b.delay.Store(int64(60 * time.Millisecond)) // 3× the interval
	tg := Target{Host: b.host, Check: httpCheck(20)}
	h := startChecker(t, Options{Workers: 8}, tg)
	h.waitProbes(tg.Key(), 5)
	if m := b.maxInflight.Load(); m != 1 {
		t.Errorf("%d probes of one target in flight at once", m)
	}
	if s := h.state(tg.Key()); s.LastLatency < 60*time.Millisecond || s.Verdict != Healthy {
		t.Errorf("state %+v", s)
	}
}

func TestTimeout(t *testing.T) {
	b := newHTTPBackend(t)
	b.delay.Store(int64(500 * time.Millisecond))
	tg := Target{Host: b.host, Check: httpCheck(20, func(c *Config) { c.Timeout = ms(30); c.UnhealthyThreshold = 1 })}
	h := startChecker(t, Options{}, tg)
	h.waitVerdict(tg.Key(), Unhealthy)
	s := h.state(tg.Key())
	if s.LastError != "timeout" || s.LastLatency > 400*time.Millisecond {
		t.Errorf("state %+v", s)
	}
}

func TestExpectedStatuses(t *testing.T) {
	b := newHTTPBackend(t)
	b.fail.Store(true) // 503
	tg := Target{Host: b.host, Check: httpCheck(20, func(c *Config) {
		c.HTTP.ExpectedStatuses = []StatusRange{{200, 300}, {503, 504}}
	})}
	h := startChecker(t, Options{}, tg)
	h.waitVerdict(tg.Key(), Healthy)
}

func TestJitterSpreadsFirstProbes(t *testing.T) {
	const n = 40
	const interval = 400 * time.Millisecond
	var mu sync.Mutex
	first := map[int]time.Time{}
	var targets []Target
	for i := range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				mu.Lock()
				if _, ok := first[i]; !ok {
					first[i] = time.Now()
				}
				mu.Unlock()
				c.Close()
			}
		}()
		targets = append(targets, Target{Host: hostOf(ln.Addr()), Check: tcpCheck(int(interval / time.Millisecond))})
	}
	begin := time.Now()
	h := startChecker(t, Options{Seed: 42}, targets...)
	waitFor(t, "every target probed once", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(first) == n
	})
	h.stop()
	mu.Lock()
	defer mu.Unlock()
	var earliest, latest time.Duration = interval, 0
	buckets := make([]int, 4)
	for _, at := range first {
		d := at.Sub(begin)
		earliest, latest = min(earliest, d), max(latest, d)
		buckets[min(int(d*4/interval), 3)]++
	}
	// Spread over one interval: no quarter of it gets more than half the
	// targets (uniform: a quarter each), and the spread covers most of it.
	for i, c := range buckets {
		if c > n/2 {
			t.Errorf("quarter %d of the first interval got %d of %d first probes (%v)", i, c, n, buckets)
		}
	}
	if latest-earliest < interval/2 {
		t.Errorf("first probes within %v of each other, want spread over ~%v", latest-earliest, interval)
	}
}

func TestSetTargetsAddRemoveKeep(t *testing.T) {
	a, b, c := newHTTPBackend(t), newHTTPBackend(t), newHTTPBackend(t)
	ta, tb, tc := Target{Host: a.host, Check: httpCheck(20)}, Target{Host: b.host, Check: httpCheck(20)}, Target{Host: c.host, Check: httpCheck(20)}
	h := startChecker(t, Options{}, ta, tb)
	h.waitVerdict(ta.Key(), Healthy)
	h.waitVerdict(tb.Key(), Healthy)
	sb := h.waitProbes(tb.Key(), 3)

	if err := h.c.SetTargets([]Target{tb, tc}); err != nil {
		t.Fatal(err)
	}
	if _, ok := h.c.State(ta.Key()); ok {
		t.Error("removed target still has state")
	}
	reqsA := a.reqs.Load()
	h.waitVerdict(tc.Key(), Healthy)
	sb2 := h.waitProbes(tb.Key(), sb.Probes+3)
	if sb2.Since != sb.Since || sb2.Verdict != Healthy || sb2.Transitions != 1 {
		t.Errorf("kept target lost its state: before %+v after %+v", sb, sb2)
	}
	// A removed target is probed no more (one probe may have been in flight).
	if got := a.reqs.Load(); got > reqsA+1 {
		t.Errorf("removed target probed %d more times", got-reqsA)
	}
	if n := len(h.c.Snapshot()); n != 2 {
		t.Errorf("%d targets, want 2", n)
	}
	// Removing everything, then adding back: a fresh target from Unknown.
	if err := h.c.SetTargets(nil); err != nil {
		t.Fatal(err)
	}
	if err := h.c.SetTargets([]Target{ta}); err != nil {
		t.Fatal(err)
	}
	s := h.state(ta.Key())
	if s.Verdict != Unknown || s.Probes != 0 {
		t.Errorf("re-added target state %+v", s)
	}
	// Invalid targets are reported and left out; the rest applies.
	err := h.c.SetTargets([]Target{ta, {Host: sources.HostKey{Address: "127.0.0.1"}, Check: tcpCheck(20)}, {Host: b.host, Check: Config{Type: "udp"}}})
	if err == nil || !strings.Contains(err.Error(), "bad address or port") || !strings.Contains(err.Error(), `health_check.type: "udp"`) {
		t.Errorf("SetTargets error %v", err)
	}
	if n := len(h.c.Snapshot()); n != 1 {
		t.Errorf("%d targets, want 1", n)
	}
}

func TestTCP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	serve := func(ln net.Listener) {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}
	go serve(ln)
	tg := Target{Host: hostOf(ln.Addr()), Check: tcpCheck(20)}
	h := startChecker(t, Options{}, tg)
	h.waitVerdict(tg.Key(), Healthy)
	ln.Close()
	h.waitVerdict(tg.Key(), Unhealthy)
	if s := h.state(tg.Key()); !strings.Contains(s.LastError, "refused") {
		t.Errorf("last error %q", s.LastError)
	}
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("cannot reopen %s: %v", addr, err)
	}
	defer ln.Close()
	go serve(ln)
	h.waitVerdict(tg.Key(), Healthy)
}

// countingListener counts accepted connections.
type countingListener struct {
	net.Listener
	accepts atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepts.Add(1)
	}
	return c, err
}

func startGRPC(t *testing.T, addr string) (*grpc.Server, *health.Server, *countingListener) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	cl := &countingListener{Listener: ln}
	srv := grpc.NewServer()
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	go srv.Serve(cl)
	t.Cleanup(srv.Stop)
	return srv, hs, cl
}

func TestGRPC(t *testing.T) {
	verifyNoLeaks(t)
	srv, hs, cl := startGRPC(t, "127.0.0.1:0")
	hs.SetServingStatus("echo", healthpb.HealthCheckResponse_SERVING)
	host := hostOf(cl.Addr())
	tg := Target{Host: host, Check: Config{Type: TypeGRPC, Interval: ms(20), Timeout: ms(1000), GRPC: &GRPCConfig{ServiceName: "echo"}}}
	unknown := Target{Host: host, Check: Config{Type: TypeGRPC, Interval: ms(20), Timeout: ms(1000), UnhealthyThreshold: 1, GRPC: &GRPCConfig{ServiceName: "nope"}}}
	h := startChecker(t, Options{}, tg, unknown)
	k := tg.Key()
	h.waitVerdict(k, Healthy)
	h.waitVerdict(unknown.Key(), Unhealthy)
	if s := h.state(unknown.Key()); !strings.Contains(s.LastError, `"nope" unknown`) {
		t.Errorf("unknown service: %+v", s)
	}
	s := h.waitProbes(k, 5)
	// One connection per target, reused across probes.
	if n := cl.accepts.Load(); n != 2 {
		t.Errorf("%d connections for 2 targets after %d probes", n, s.Probes)
	}

	hs.SetServingStatus("echo", healthpb.HealthCheckResponse_NOT_SERVING)
	h.waitVerdict(k, Unhealthy)
	if s := h.state(k); s.LastError != "status NOT_SERVING" {
		t.Errorf("state %+v", s)
	}
	hs.SetServingStatus("echo", healthpb.HealthCheckResponse_SERVING)
	h.waitVerdict(k, Healthy)

	// The server goes away, then comes back on the same address: the probe
	// redials instead of waiting out gRPC's reconnect backoff.
	addr := cl.Addr().String()
	srv.Stop()
	h.waitVerdict(k, Unhealthy)
	_, hs2, _ := startGRPC(t, addr)
	hs2.SetServingStatus("echo", healthpb.HealthCheckResponse_SERVING)
	h.waitVerdict(k, Healthy)
	h.stop()
}

func TestRunStopsCleanly(t *testing.T) {
	verifyNoLeaks(t)
	b := newHTTPBackend(t)
	b.delay.Store(int64(5 * time.Second)) // a probe in flight at stop time
	fast := newHTTPBackend(t)
	_, hs, cl := startGRPC(t, "127.0.0.1:0")
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	targets := []Target{
		{Host: b.host, Check: httpCheck(20, func(c *Config) { c.Timeout = ms(10000) })},
		{Host: fast.host, Check: httpCheck(20)},
		{Host: hostOf(cl.Addr()), Check: Config{Type: TypeGRPC, Interval: ms(20)}},
		{Host: hostOf(ln.Addr()), Check: tcpCheck(20)},
	}
	reg := prometheus.NewRegistry()
	h := startChecker(t, Options{Metrics: reg}, targets...)
	h.waitVerdict(targets[1].Key(), Healthy)
	h.waitVerdict(targets[2].Key(), Healthy)
	waitFor(t, "the slow probe to be in flight", func() bool { return b.inflight.Load() == 1 })

	begin := time.Now()
	h.stop()
	if d := time.Since(begin); d > time.Second {
		t.Errorf("Run took %v to stop", d)
	}
	// The probe cut short counts for nothing.
	if s := h.state(targets[0].Key()); s.Probes != 0 || s.Verdict != Unknown {
		t.Errorf("aborted probe recorded: %+v", s)
	}

	// Metrics were registered and counted.
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, mf := range mfs {
		got[mf.GetName()] = true
		if mf.GetName() == "xdsbridge_healthcheck_targets" && mf.GetMetric()[0].GetGauge().GetValue() != 4 {
			t.Errorf("targets gauge %v", mf.GetMetric()[0].GetGauge().GetValue())
		}
	}
	for _, name := range []string{"xdsbridge_healthcheck_probes_total", "xdsbridge_healthcheck_probe_duration_seconds", "xdsbridge_healthcheck_targets", "xdsbridge_healthcheck_transitions_total", "xdsbridge_healthcheck_schedule_lag_seconds"} {
		if !got[name] {
			t.Errorf("metric %s missing", name)
		}
	}
	b.delay.Store(0)

	// Run can run again and picks up where it left off.
	h2 := &harness{t: t, c: h.c, done: make(chan error, 1), colDone: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	h2.cancel = cancel
	go func() { h2.done <- h.c.Run(ctx) }()
	close(h2.colDone)
	waitFor(t, "Run to start", func() bool { h.c.mu.Lock(); defer h.c.mu.Unlock(); return h.c.running })
	if err := h.c.Run(ctx); err == nil {
		t.Error("a second concurrent Run did not fail")
	}
	waitFor(t, "probes after restart", func() bool { s, _ := h.c.State(targets[0].Key()); return s.Probes > 0 })
	h2.stop()
}

func TestTransitionCoalescing(t *testing.T) {
	// No Run: transitions queue up; a slow consumer sees the latest verdict
	// of each target, and a flip back is not reported at all.
	c := NewChecker(Options{Seed: 1})
	h1 := sources.HostKey{Address: "127.0.0.1", Port: 1}
	h2 := sources.HostKey{Address: "127.0.0.1", Port: 2}
	t1, t2 := Target{Host: h1, Check: tcpCheck(1000)}, Target{Host: h2, Check: tcpCheck(1000)}
	if err := c.SetTargets([]Target{t1, t2}); err != nil {
		t.Fatal(err)
	}
	set := func(k TargetKey, v Verdict) {
		c.mu.Lock()
		c.targets[k].st.Verdict = v
		c.queueTransition(c.targets[k])
		c.mu.Unlock()
	}
	set(t1.Key(), Healthy)
	set(t2.Key(), Healthy)
	set(t1.Key(), Unhealthy)
	set(t2.Key(), Unhealthy)
	set(t2.Key(), Unknown) // back to what the consumer knows
	tr, ok := c.nextPending()
	if !ok || tr != (Transition{t1.Key(), Unknown, Unhealthy}) {
		t.Fatalf("got %v %v", tr, ok)
	}
	if tr, ok := c.nextPending(); ok {
		t.Fatalf("flip back reported: %v", tr)
	}
	set(t1.Key(), Healthy)
	c.unsend(Transition{t1.Key(), Unhealthy, Healthy}) // as if delivery was cut short
	tr, ok = c.nextPending()
	if !ok || tr != (Transition{t1.Key(), Unhealthy, Healthy}) {
		t.Fatalf("got %v %v", tr, ok)
	}
	// A removed target's pending transition is dropped.
	set(t2.Key(), Healthy)
	if err := c.SetTargets([]Target{t1}); err != nil {
		t.Fatal(err)
	}
	if tr, ok := c.nextPending(); ok {
		t.Fatalf("removed target reported: %v", tr)
	}
}
