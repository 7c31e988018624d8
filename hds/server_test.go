package hds

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	healthv3 "github.com/envoyproxy/go-control-plane/envoy/service/health/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/xdsbridge/xdsbridge/config/decode"
	"github.com/xdsbridge/xdsbridge/healthcheck"
	"github.com/xdsbridge/xdsbridge/sources"
)

const waitLimit = 10 * time.Second

type harness struct {
	t    *testing.T
	s    *Server
	addr string

	mu  sync.Mutex
	trs []healthcheck.Transition
}

func startServer(t *testing.T, opts Options, targets []healthcheck.Target) *harness {
	t.Helper()
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	s.SetTargets(targets)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	s.Register(g)
	go g.Serve(ln)
	ctx, cancel := context.WithCancel(context.Background())
	h := &harness{t: t, s: s, addr: ln.Addr().String()}
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	go func() {
		for {
			select {
			case tr := <-s.Transitions():
				h.mu.Lock()
				h.trs = append(h.trs, tr)
				h.mu.Unlock()
			case <-ctx.Done():
				return
			}
		}
	}()
	t.Cleanup(func() { cancel(); g.Stop(); <-done })
	return h
}

func (h *harness) transitions() []healthcheck.Transition {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]healthcheck.Transition(nil), h.trs...)
}

// fakeChecker is an HDS client standing for an Envoy: it keeps the last
// specifier and reports what the test says.
type fakeChecker struct {
	t      *testing.T
	node   string
	cancel context.CancelFunc
	stream healthv3.HealthDiscoveryService_StreamHealthCheckClient

	mu   sync.Mutex
	spec *healthv3.HealthCheckSpecifier
	n    int
}

func (h *harness) connect(node, zone string) *fakeChecker {
	h.t.Helper()
	conn, err := grpc.NewClient(h.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := healthv3.NewHealthDiscoveryServiceClient(conn).StreamHealthCheck(ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	f := &fakeChecker{t: h.t, node: node, cancel: cancel, stream: stream}
	h.t.Cleanup(cancel)
	err = stream.Send(&healthv3.HealthCheckRequestOrEndpointHealthResponse{RequestType: &healthv3.HealthCheckRequestOrEndpointHealthResponse_HealthCheckRequest{
		HealthCheckRequest: &healthv3.HealthCheckRequest{
			Node:       &corev3.Node{Id: node, Locality: &corev3.Locality{Zone: zone}},
			Capability: &healthv3.Capability{HealthCheckProtocols: []healthv3.Capability_Protocol{healthv3.Capability_HTTP, healthv3.Capability_TCP}},
		},
	}})
	if err != nil {
		h.t.Fatal(err)
	}
	go func() {
		for {
			spec, err := stream.Recv()
			if err != nil {
				return
			}
			f.mu.Lock()
			f.spec, f.n = spec, f.n+1
			f.mu.Unlock()
		}
	}()
	return f
}

// endpoints returns the address:ports in the checker's last specifier.
func (f *fakeChecker) endpoints() map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]string{}
	for _, c := range f.spec.GetClusterHealthChecks() {
		for _, le := range c.GetLocalityEndpoints() {
			for _, e := range le.GetEndpoints() {
				out[endpointString(e)] = c.GetClusterName()
			}
		}
	}
	return out
}

// report sends one EndpointHealthResponse covering the checker's endpoints,
// with status(address:port).
func (f *fakeChecker) report(status func(string) corev3.HealthStatus) {
	f.t.Helper()
	if err := f.send(status); err != nil {
		f.t.Fatal(err)
	}
}

// send is report for other goroutines than the test's: it returns the
// error.
func (f *fakeChecker) send(status func(string) corev3.HealthStatus) error {
	f.mu.Lock()
	spec := f.spec
	f.mu.Unlock()
	resp := &healthv3.EndpointHealthResponse{}
	for _, c := range spec.GetClusterHealthChecks() {
		ceh := &healthv3.ClusterEndpointsHealth{ClusterName: c.GetClusterName()}
		for _, le := range c.GetLocalityEndpoints() {
			leh := &healthv3.LocalityEndpointsHealth{Locality: le.GetLocality()}
			for _, e := range le.GetEndpoints() {
				leh.EndpointsHealth = append(leh.EndpointsHealth, &healthv3.EndpointHealth{Endpoint: e, HealthStatus: status(endpointString(e))})
			}
			ceh.LocalityEndpointsHealth = append(ceh.LocalityEndpointsHealth, leh)
		}
		resp.ClusterEndpointsHealth = append(resp.ClusterEndpointsHealth, ceh)
	}
	return f.stream.Send(&healthv3.HealthCheckRequestOrEndpointHealthResponse{RequestType: &healthv3.HealthCheckRequestOrEndpointHealthResponse_EndpointHealthResponse{EndpointHealthResponse: resp}})
}

func all(s corev3.HealthStatus) func(string) corev3.HealthStatus {
	return func(string) corev3.HealthStatus { return s }
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func targets(n int, typ string) []healthcheck.Target {
	out := make([]healthcheck.Target, n)
	for i := range out {
		c := healthcheck.Config{Type: typ, Interval: decode.Duration(100 * time.Millisecond)}
		out[i] = healthcheck.Target{Host: sources.HostKey{Address: fmt.Sprintf("10.0.0.%d", i+1), Port: 8080}, Check: c}
	}
	return out
}

// coverage counts, per endpoint, the checkers whose specifier holds it.
func coverage(fs ...*fakeChecker) map[string][]string {
	out := map[string][]string{}
	for _, f := range fs {
		for ep := range f.endpoints() {
			out[ep] = append(out[ep], f.node)
		}
	}
	return out
}

// covered reports whether the checkers' specifiers hold n endpoints, each
// at exactly k of them.
func covered(n, k int, fs ...*fakeChecker) func() bool {
	return func() bool {
		cov := coverage(fs...)
		if len(cov) != n {
			return false
		}
		for _, nodes := range cov {
			if len(nodes) != k {
				return false
			}
		}
		return true
	}
}

func TestHDSAssignsEachTargetToKCheckersInTwoZones(t *testing.T) {
	ts := targets(40, healthcheck.TypeHTTP)
	h := startServer(t, Options{}, ts)
	zone := map[string]string{}
	var fs []*fakeChecker
	for i := range 4 {
		z := []string{"zone-a", "zone-b"}[i%2]
		node := fmt.Sprintf("envoy-%d", i)
		zone[node] = z
		fs = append(fs, h.connect(node, z))
	}
	// The checkers connect one by one, and the first two in one zone hold
	// everything until the others are there: wait for the last specifiers.
	atTwo := covered(len(ts), 2, fs...)
	waitFor(t, "every endpoint at 2 checkers, one in each zone", func() bool {
		if !atTwo() {
			return false
		}
		for _, nodes := range coverage(fs...) {
			if len(nodes) != 2 || zone[nodes[0]] == zone[nodes[1]] {
				return false
			}
		}
		return true
	})
	if u := h.s.Unassigned(); len(u) != 0 {
		t.Errorf("unassigned: %v", u)
	}
	// The specifier asks for probes at the check's interval even without
	// traffic.
	f := fs[0]
	f.mu.Lock()
	hc := f.spec.GetClusterHealthChecks()[0].GetHealthChecks()[0]
	f.mu.Unlock()
	if hc.GetNoTrafficInterval().AsDuration() != 100*time.Millisecond || hc.GetHttpHealthCheck().GetPath() != "/" {
		t.Errorf("health check %v", hc)
	}
}

// Under the majority rule a checker that reports everything unhealthy (it
// cannot reach anyone) takes nothing away; both checkers of an endpoint
// reporting it unhealthy make it unhealthy.
func TestHDSMajorityIgnoresLoneDissenter(t *testing.T) {
	ts := targets(10, healthcheck.TypeTCP)
	h := startServer(t, Options{K: 2}, ts)
	a, b := h.connect("envoy-a", "z1"), h.connect("envoy-b", "z2")
	waitFor(t, "both checkers assigned everything", func() bool {
		return len(a.endpoints()) == len(ts) && len(b.endpoints()) == len(ts)
	})
	a.report(all(corev3.HealthStatus_HEALTHY))
	b.report(all(corev3.HealthStatus_HEALTHY))
	waitFor(t, "every target healthy", func() bool { return len(h.transitions()) == len(ts) })
	// b loses its network: after a healthy report, its unhealthy reports count.
	b.report(all(corev3.HealthStatus_UNHEALTHY))
	a.report(all(corev3.HealthStatus_HEALTHY))
	time.Sleep(100 * time.Millisecond)
	if trs := h.transitions(); len(trs) != len(ts) {
		t.Fatalf("a lone dissenter changed verdicts: %v", trs[len(ts):])
	}
	for k, st := range h.s.Snapshot() {
		if st.Verdict != healthcheck.Healthy || len(st.Checkers) != 2 {
			t.Errorf("%s: %+v", k, st)
		}
	}
	dead := ts[3].Host.String()
	a.report(func(ep string) corev3.HealthStatus {
		if ep == dead {
			return corev3.HealthStatus_UNHEALTHY
		}
		return corev3.HealthStatus_HEALTHY
	})
	waitFor(t, "the dead endpoint unhealthy", func() bool {
		trs := h.transitions()
		last := trs[len(trs)-1]
		return last.Key.Host.String() == dead && last.Verdict == healthcheck.Unhealthy
	})
	if n := len(h.transitions()); n != len(ts)+1 {
		t.Errorf("%d transitions, want %d", n, len(ts)+1)
	}
}

// A checker whose stream ends, or that stops reporting, loses its
// endpoints to the others; verdicts do not flap meanwhile.
func TestHDSCheckerLossReassigns(t *testing.T) {
	ts := targets(30, healthcheck.TypeHTTP)
	h := startServer(t, Options{K: 2, ReportInterval: 50 * time.Millisecond, Silence: 500 * time.Millisecond}, ts)
	fs := []*fakeChecker{h.connect("e0", "z1"), h.connect("e1", "z1"), h.connect("e2", "z2"), h.connect("e3", "z2")}
	// The checkers report every interval, as Envoys do: a single report
	// would let a slow test miss the silence limit and lose its targets.
	rep := reportEvery(50*time.Millisecond, fs...)
	defer rep.stop()
	waitFor(t, "full coverage", covered(len(ts), 2, fs...))
	waitFor(t, "every target healthy", func() bool { return len(h.transitions()) == len(ts) })

	// e0's stream ends.
	rep.set(fs[1:]...)
	fs[0].cancel()
	waitFor(t, "coverage by the three others", covered(len(ts), 2, fs[1:]...))

	// e1 goes quiet while e2 and e3 keep reporting.
	rep.set(fs[2:]...)
	start := time.Now()
	waitFor(t, "coverage by e2 and e3", covered(len(ts), 2, fs[2:]...))
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("reassigned after %v (silence 500ms)", d)
	}
	if trs := h.transitions(); len(trs) != len(ts) {
		t.Errorf("verdicts changed while checkers came and went: %v", trs[len(ts):])
	}
}

// reporter sends, every interval, a report of every target healthy for
// each checker in its set that holds targets. A checker that holds none
// sends nothing, the least an Envoy does.
type reporter struct {
	mu   sync.Mutex
	fs   []*fakeChecker
	done chan struct{}
	wg   sync.WaitGroup
}

func reportEvery(every time.Duration, fs ...*fakeChecker) *reporter {
	r := &reporter{fs: fs, done: make(chan struct{})}
	r.wg.Go(func() {
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-r.done:
				return
			case <-tick.C:
				r.mu.Lock()
				fs := r.fs
				r.mu.Unlock()
				for _, f := range fs {
					if len(f.endpoints()) > 0 {
						_ = f.send(all(corev3.HealthStatus_HEALTHY))
					}
				}
			}
		}
	})
	return r
}

// set replaces the checkers that report.
func (r *reporter) set(fs ...*fakeChecker) {
	r.mu.Lock()
	r.fs = fs
	r.mu.Unlock()
}

func (r *reporter) stop() {
	close(r.done)
	r.wg.Wait()
}

func TestHDSUnassignedWithoutCheckers(t *testing.T) {
	ts := targets(3, healthcheck.TypeGRPC) // no Envoy declares gRPC
	h := startServer(t, Options{}, ts)
	h.connect("envoy", "z")
	waitFor(t, "the checker registered", func() bool {
		h.s.mu.Lock()
		defer h.s.mu.Unlock()
		return len(h.s.checkers) == 1
	})
	if u := h.s.Unassigned(); len(u) != len(ts) {
		t.Errorf("unassigned %v, want the 3 gRPC targets", u)
	}
}

// A checker that holds no target has nothing to report: its silence does
// not cost it the targets it is given later.
func TestHDSIdleCheckerStaysAvailable(t *testing.T) {
	ts := targets(1, healthcheck.TypeTCP)
	h := startServer(t, Options{K: 1, ReportInterval: 50 * time.Millisecond, Silence: 400 * time.Millisecond}, ts)
	a, b := h.connect("envoy-a", "z"), h.connect("envoy-b", "z")
	rep := reportEvery(50*time.Millisecond, a, b)
	var holder, idle *fakeChecker
	assigned := func() bool {
		switch {
		case len(a.endpoints()) == 1 && len(b.endpoints()) == 0:
			holder, idle = a, b
		case len(b.endpoints()) == 1 && len(a.endpoints()) == 0:
			holder, idle = b, a
		default:
			return false
		}
		return true
	}
	waitFor(t, "the target assigned", assigned)
	time.Sleep(1200 * time.Millisecond) // 3 × the silence: idle has said nothing
	rep.stop()
	waitFor(t, "the target assigned", assigned)
	holder.cancel()
	waitFor(t, "the idle checker to take the target", func() bool { return len(idle.endpoints()) == 1 })
}

// A seeded target starts from the seed (no transition to it), its first
// transition names the seed as Previous; Assigned is signalled when
// targets gain their first checker.
func TestHDSSeedAndAssigned(t *testing.T) {
	ts := targets(2, healthcheck.TypeTCP)
	h := startServer(t, Options{}, ts)
	k0, k1 := ts[0].Key(), ts[1].Key()
	h.s.Seed(k0, healthcheck.Unhealthy)
	if st, _ := h.s.State(k0); st.Verdict != healthcheck.Unhealthy || h.s.Delivered(k0) != healthcheck.Unhealthy {
		t.Fatalf("seeded verdict %s, delivered %s, want unhealthy", st.Verdict, h.s.Delivered(k0))
	}
	select {
	case <-h.s.Assigned():
	default:
	}
	f := h.connect("envoy", "z")
	select {
	case <-h.s.Assigned():
	case <-time.After(5 * time.Second):
		t.Fatal("no Assigned signal when the targets got their checker")
	}
	waitFor(t, "the checker assigned both", func() bool { return len(f.endpoints()) == 2 })
	f.report(all(corev3.HealthStatus_HEALTHY))
	waitFor(t, "both transitions", func() bool { return len(h.transitions()) == 2 })
	for _, tr := range h.transitions() {
		want := healthcheck.Unknown
		if tr.Key == k0 {
			want = healthcheck.Unhealthy
		} else if tr.Key != k1 {
			t.Fatalf("transition of %v", tr.Key)
		}
		if tr.Previous != want || tr.Verdict != healthcheck.Healthy {
			t.Errorf("%v: %s → %s, want %s → healthy", tr.Key, tr.Previous, tr.Verdict, want)
		}
	}
	if v := h.s.Delivered(k0); v != healthcheck.Healthy {
		t.Errorf("delivered %s after the transition, want healthy", v)
	}
	if st, ok := h.s.State(k1); !ok || len(st.Checkers) != 1 || st.Checkers[0].Node != "envoy" || !st.Checkers[0].Counted || st.Summary != "envoy healthy" {
		t.Errorf("state %+v, want envoy's counted report", st)
	}
}
