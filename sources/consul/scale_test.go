package consul

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/xdsbridge/xdsbridge/sources"
	"github.com/xdsbridge/xdsbridge/sources/consul/consultest"
)

// scaleNodes is how many instances each service of the catalog-scale
// runs has, and by default how many catalog nodes they are spread over
// (one instance of each service on each node; scaleConfig.nodes).
const scaleNodes = 3

// scaleConfig is one catalog-scale run.
type scaleConfig struct {
	services int
	// nodes is how many catalog nodes the instances are on (0:
	// scaleNodes, each node an instance of every service): instance k
	// of service i is on node (i·scaleNodes + k) mod nodes (scaleNode).
	nodes    int
	rates    []int // flips per second, one phase each
	phase    time.Duration
	idle     time.Duration
	flipOver int // flips cycle over the first flipOver services (0: all)
	replicas int // sources run side by side (latency: the first's)
	// xds: each replica is a bridge built as the app builds it and the
	// flips are seen by a delta xDS client (startXDSBridge), not at the
	// source's Publish.
	xds   bool
	churn []churnPhase
	// source is more of the source's config (JSON members, each after a
	// comma), without an xDS client.
	source string
	// restart, when set, kills Consul after the flips, starts it again
	// and measures this long once it is back.
	restart time.Duration
	// cpuProfile, when set, is the file the test process's CPU profile
	// of the flip phases is written to.
	cpuProfile string
	// check, when set, is called after each phase ("flips", or the churn
	// kind) with its number of changes and the requests sent, by path.
	check func(t *testing.T, phase string, changes int, reqs map[string]int)
}

// churnPhase changes instances at a steady rate: "redeploy" replaces an
// instance by one of a new ID with its own check (same address, port and
// tags), "meta" changes an instance's service meta in place (its check
// unchanged). Both move the service list's index without changing the
// list.
type churnPhase struct {
	kind string
	rate int
}

// TestCatalogFlipsAtSteadyRate runs a small catalog-scale run against a
// real Consul server: 200 services × 3 instances on 3 nodes (hinted mode
// with the default 64 query slots), 10 flips/s for 3 s over 25 services,
// so each check turns critical, then passing again; then instances changed
// in place (meta) and redeployed (a new ID with its check), 2 a second.
// Every flip must reach a Publish, and what each change costs Consul is
// bounded, never a read of every service: a flip is carried by the change
// feed alone (at most one service read in ten flips), a change in place or
// a redeploy costs at most two service reads, and once nothing changes
// nothing is read.
func TestCatalogFlipsAtSteadyRate(t *testing.T) {
	// No hinted_refresh within the run: its reads (services / 5m a
	// second, spread) are not what the bounds are about.
	runScale(t, scaleConfig{services: 200, rates: []int{10}, phase: 3 * time.Second, flipOver: 25, source: `, "hinted_refresh": "24h"`,
		churn: []churnPhase{{kind: "meta", rate: 2}, {kind: "redeploy", rate: 2}},
		check: func(t *testing.T, phase string, changes int, reqs map[string]int) {
			reads := reqs["/v1/health/service/:name"]
			switch {
			case phase == "quiet" && reads > 0:
				t.Errorf("%d service reads while nothing changed (%v)", reads, reqs)
			case phase == "quiet":
			case changes == 0:
				t.Errorf("%s: no changes made", phase)
			case phase == "flips" && reads > changes/10:
				t.Errorf("%d flips read services %d times: the change feed should carry them (%v)", changes, reads, reqs)
			case phase != "flips" && reads > 2*changes:
				t.Errorf("%d changes (%s) read services %d times (%v)", changes, phase, reads, reqs)
			}
		}})
}

// TestCatalogScaleBenchmark is the catalog-scale benchmark, gated by
// XDSBRIDGE_CONSUL_BENCH=1:
//
//	XDSBRIDGE_CONSUL_BENCH=1 go test -run TestCatalogScaleBenchmark -v -timeout 30m ./sources/consul/
//
// XDSBRIDGE_CONSUL_BENCH_SERVICES (default 5000), _RATES (flips per second,
// comma-separated, one phase each; default 10,100), _SECONDS (per phase,
// default 60), _IDLE (seconds, default 30), _REPLICAS (sources side by
// side, default 1) and _CHURN (phases of instance changes after the flips,
// e.g. "redeploy:1,meta:1"; see churnPhase) adjust it; _DEV=1 runs a
// dev agent (-dev: no data directory, no disk writes) instead of a server
// with a data directory; _XDS=1 runs each replica as a bridge built as the
// app builds it and times each flip to a delta xDS client's EDS response
// (xdsbench_test.go) instead of to the source's Publish; _RESTART=N kills
// Consul after the flips and reports the N seconds after it is back;
// _CPUPROFILE=file writes the test process's CPU profile of the flip
// phases (go tool pprof file); _FEED_RATE sets feed_rate_limit; _NODES
// spreads the instances over that many catalog nodes instead of 3 (so
// that each node holds fewer: Consul's cost of a write grows with the
// checks of its node).
func TestCatalogScaleBenchmark(t *testing.T) {
	if os.Getenv("XDSBRIDGE_CONSUL_BENCH") != "1" {
		t.Skip("set XDSBRIDGE_CONSUL_BENCH=1 to run the benchmark")
	}
	cfg := scaleConfig{
		services: envInt(t, "XDSBRIDGE_CONSUL_BENCH_SERVICES", 5000),
		nodes:    envInt(t, "XDSBRIDGE_CONSUL_BENCH_NODES", scaleNodes),
		phase:    time.Duration(envInt(t, "XDSBRIDGE_CONSUL_BENCH_SECONDS", 60)) * time.Second,
		idle:     time.Duration(envInt(t, "XDSBRIDGE_CONSUL_BENCH_IDLE", 30)) * time.Second,
	}
	rates := os.Getenv("XDSBRIDGE_CONSUL_BENCH_RATES")
	if rates == "" {
		rates = "10,100"
	}
	for _, f := range strings.Split(rates, ",") {
		r, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || r <= 0 {
			t.Fatalf("XDSBRIDGE_CONSUL_BENCH_RATES: %q is not a positive integer", f)
		}
		cfg.rates = append(cfg.rates, r)
	}
	cfg.replicas = envInt(t, "XDSBRIDGE_CONSUL_BENCH_REPLICAS", 1)
	cfg.xds = os.Getenv("XDSBRIDGE_CONSUL_BENCH_XDS") == "1"
	cfg.restart = time.Duration(envInt(t, "XDSBRIDGE_CONSUL_BENCH_RESTART", 0)) * time.Second
	cfg.cpuProfile = os.Getenv("XDSBRIDGE_CONSUL_BENCH_CPUPROFILE")
	if r := os.Getenv("XDSBRIDGE_CONSUL_BENCH_FEED_RATE"); r != "" {
		cfg.source = `, "feed_rate_limit": ` + r
	}
	if c := os.Getenv("XDSBRIDGE_CONSUL_BENCH_CHURN"); c != "" {
		for _, f := range strings.Split(c, ",") {
			kind, r, _ := strings.Cut(strings.TrimSpace(f), ":")
			rate, err := strconv.Atoi(r)
			if (kind != "redeploy" && kind != "meta") || err != nil || rate <= 0 {
				t.Fatalf("XDSBRIDGE_CONSUL_BENCH_CHURN: %q is not redeploy:N or meta:N", f)
			}
			cfg.churn = append(cfg.churn, churnPhase{kind: kind, rate: rate})
		}
	}
	runScale(t, cfg)
}

// runScale starts a single Consul server (-server -bootstrap-expect=1 with a
// data directory; -dev with XDSBRIDGE_CONSUL_BENCH_DEV=1), registers the services through the catalog API, runs the
// source into a sink that times each flip, and logs: the initial sync time;
// while idle, then at each flip rate, the process's CPU (the source, the
// sink and the flipping client; cores), its RSS, Consul's CPU and the
// requests the source sent per second; for the flips, the time from the
// catalog write's call to the first Publish showing it, p50/p99/max.
func runScale(t *testing.T, cfg scaleConfig) {
	start := consultest.StartPersistentAgent
	if os.Getenv("XDSBRIDGE_CONSUL_BENCH_DEV") == "1" {
		start = consultest.StartAgent
	}
	a := start(t, "dc1")
	cfg.nodes = max(cfg.nodes, scaleNodes)
	registerCatalog(t, a, cfg.services, cfg.nodes)

	// One request counter for every replica: Consul's load.
	var rt requestCounter
	sink := newFlipSink(cfg.services)
	replicas := max(cfg.replicas, 1)
	began := time.Now()
	var sinks []*flipSink
	seenAt := "Publish"
	if cfg.xds {
		// Each replica is a bridge built as the app builds it, with a
		// delta xDS client; the requests are the bridges' own counts.
		seenAt = "xDS client (EDS)"
		if startXDSBridge == nil {
			t.Fatal("no xDS bridge hook (xdsbench_test.go)")
		}
		mc := &metricsCounter{}
		for r := 0; r < replicas; r++ {
			k := sink
			if r > 0 {
				k = newFlipSink(cfg.services)
			}
			sinks = append(sinks, k)
			mc.scrapes = append(mc.scrapes, startXDSBridge(t, a.Addr(), k))
		}
		rt = mc
	} else {
		crt := &countingRT{byEP: map[string]int{}}
		rt = crt
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, replicas)
		for r := 0; r < replicas; r++ {
			src, err := New("consul", []byte(fmt.Sprintf(`{"address": %q, "services": {"exclude": ["consul"]}%s}`, a.Addr(), cfg.source)), sources.Env{Logger: testLogger(t)})
			if err != nil {
				t.Fatal(err)
			}
			s := src.(*Source)
			s.wrapRoundTripper = func(next http.RoundTripper) http.RoundTripper { return countInto{next: next, c: crt} }
			k := sink
			if r > 0 {
				k = newFlipSink(cfg.services)
			}
			sinks = append(sinks, k)
			go func() { done <- s.Run(ctx, k) }()
		}
		t.Cleanup(func() {
			cancel()
			for range replicas {
				if err := <-done; err != nil {
					t.Errorf("Run: %v", err)
				}
			}
		})
	}
	for _, k := range sinks {
		select {
		case <-k.synced:
		case <-time.After(3 * time.Minute):
			t.Fatalf("no publish with %d services after 3m", cfg.services)
		}
	}
	t.Logf("%d services × %d instances on %d nodes, %d replicas: initial sync (to %s) %s, %d requests; load average %s", cfg.services, scaleNodes, cfg.nodes, replicas,
		seenAt, time.Since(began).Round(time.Millisecond), total(rt), loadAverage())

	time.Sleep(time.Second) // let the start-up reads settle
	if cfg.idle > 0 {
		m := startMeasure(a, rt)
		time.Sleep(cfg.idle)
		usage, _ := m.stop()
		t.Logf("idle %s: %s", cfg.idle, usage)
	}
	// The flips go through a client of their own with at most 8 writes in
	// flight (and so 8 connections): a tick that finds them all busy is
	// skipped and counted.
	wcfg := api.DefaultConfig()
	wcfg.Address = a.Addr()
	wcfg.Transport = newTransport(8, nil)
	writer, err := api.NewClient(wcfg)
	if err != nil {
		t.Fatal(err)
	}
	writes := make(chan struct{}, 8)
	next, over := 0, cfg.services
	if cfg.flipOver > 0 {
		over = cfg.flipOver
	}
	stopProfile := func() {}
	if cfg.cpuProfile != "" {
		f, err := os.Create(cfg.cpuProfile)
		if err != nil {
			t.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			t.Fatal(err)
		}
		stopProfile = func() { pprof.StopCPUProfile(); f.Close() }
	}
	for _, rate := range cfg.rates {
		m := startMeasure(a, rt)
		flips, skipped := 0, 0
		tick := time.NewTicker(time.Second / time.Duration(rate))
		end := time.Now().Add(cfg.phase)
		for time.Now().Before(end) {
			<-tick.C
			i := next % over
			next++
			svc := scaleName(i)
			status, want := api.HealthCritical, sources.HealthUnhealthy
			if sink.unhealthy(svc) {
				status, want = api.HealthPassing, sources.HealthHealthy
			}
			select {
			case writes <- struct{}{}:
			default:
				skipped++
				continue
			}
			f := sink.expect(svc, want)
			if f == nil {
				<-writes
				continue // the previous flip of this service is still pending
			}
			flips++
			go func() {
				defer func() { <-writes }()
				sink.returned(svc, f, setCheck(writer, cfg.nodes, 0, i, status))
			}()
		}
		tick.Stop()
		wait := time.Now().Add(30 * time.Second)
		for sink.pendingCount() > 0 && time.Now().Before(wait) {
			time.Sleep(10 * time.Millisecond)
		}
		usage, reqs := m.stop()
		ft, missed := sink.take()
		failed := sink.takeFailed()
		if missed > 0 || failed > 0 || len(ft.fromReturn) == 0 {
			t.Errorf("%d flips/s: %d flips, %d not seen within 30s, %d catalog writes failed", rate, flips, missed, failed)
			continue
		}
		lat := ft.fromReturn
		t.Logf("%d flips/s for %s (%d flips, %d ticks skipped with 8 writes in flight): flip → %s from the catalog write's return p50 %s, p99 %s, max %s (%d seen before the write returned); from its call p50 %s, p99 %s; the write's own call p50 %s, p99 %s; %s; load average %s",
			rate, cfg.phase, flips, skipped, seenAt, pct(lat, 0.50), pct(lat, 0.99), lat[len(lat)-1].Round(time.Microsecond), ft.early,
			pct(ft.fromCall, 0.5), pct(ft.fromCall, 0.99), pct(ft.writes, 0.5), pct(ft.writes, 0.99), usage, loadAverage())
		if cfg.check != nil {
			cfg.check(t, "flips", flips, reqs)
		}
	}
	stopProfile()
	if cfg.restart > 0 {
		// Consul killed, down 2 s, started again: what the bridges read
		// once it is back (the outage's own recovery probes excluded).
		a.Stop()
		time.Sleep(2 * time.Second)
		a.Restart()
		m := startMeasure(a, rt)
		time.Sleep(cfg.restart)
		usage, _ := m.stop()
		t.Logf("the %s after Consul was restarted (killed, down 2s): %s; load average %s", cfg.restart, usage, loadAverage())
	}
	for k, ph := range cfg.churn {
		n, reqs := churnAt(t, a, writer, rt, ph, cfg.services, cfg.nodes, k, cfg.phase)
		if cfg.check != nil {
			cfg.check(t, ph.kind, n, reqs)
		}
	}
	if cfg.check != nil {
		// Nothing changes: nothing is read (a service read after a change
		// applied from the feed must not be read again and again).
		m := startMeasure(a, rt)
		time.Sleep(2 * time.Second)
		usage, reqs := m.stop()
		t.Logf("quiet 2s: %s", usage)
		cfg.check(t, "quiet", 0, reqs)
	}
}

// countInto is a round tripper counting into a shared countingRT.
type countInto struct {
	next http.RoundTripper
	c    *countingRT
}

func (x countInto) RoundTrip(r *http.Request) (*http.Response, error) {
	x.c.count(r)
	return x.next.RoundTrip(r)
}

// churnAt runs the k-th churn phase.
func churnAt(t *testing.T, a *consultest.Agent, writer *api.Client, rt requestCounter, ph churnPhase, services, nodes, k int, d time.Duration) (changes int, reqs map[string]int) {
	m := startMeasure(a, rt)
	var failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Second / time.Duration(ph.rate))
	defer tick.Stop()
	n := 0
	for end := time.Now().Add(d); time.Now().Before(end); n++ {
		<-tick.C
		// A spread of services, none twice; the k-th phase starts
		// elsewhere, so phases change different services.
		i := (n*7919 + k*services/2 + k) % services
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := churnOne(writer, ph.kind, nodes, i); err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
			}
		}()
	}
	wg.Wait()
	time.Sleep(2 * time.Second) // the reads it caused
	if failed.Load() > 0 {
		t.Errorf("%s: %d of %d changes failed, the first: %v", ph.kind, failed.Load(), n, firstErr.Load())
	}
	usage, reqs := m.stop()
	t.Logf("%s at %d/s for %s: %d changes; %s", ph.kind, ph.rate, d, n, usage)
	return n, reqs
}

// churnOne changes service i's instance 1 (once per service).
func churnOne(c *api.Client, kind string, nodes, i int) error {
	node, _ := scaleNode(nodes, i, 1)
	svc := scaleName(i)
	inst := scaleInstance(i, 1)
	id := inst.ID
	var ops api.TxnOps
	switch kind {
	case "meta":
		inst.Meta = map[string]string{"version": "2"}
		ops = api.TxnOps{{Service: &api.ServiceTxnOp{Verb: api.ServiceSet, Node: node, Service: inst}}}
	default: // redeploy
		inst.ID = id + "r"
		ops = api.TxnOps{
			{Service: &api.ServiceTxnOp{Verb: api.ServiceDelete, Node: node, Service: api.AgentService{ID: id, Service: svc}}},
			{Service: &api.ServiceTxnOp{Verb: api.ServiceSet, Node: node, Service: inst}},
			{Check: &api.CheckTxnOp{Verb: api.CheckSet, Check: api.HealthCheck{
				Node: node, CheckID: inst.ID + "-chk", Name: "bench", Status: api.HealthPassing, ServiceID: inst.ID, ServiceName: svc}}},
		}
	}
	ok, resp, _, err := c.Txn().Txn(ops, nil)
	if err == nil && !ok {
		err = fmt.Errorf("transaction refused: %+v", resp.Errors)
	}
	return err
}

func scaleName(i int) string { return fmt.Sprintf("svc-%05d", i) }

// scaleNode is the catalog node of instance k of service i, of nodes.
func scaleNode(nodes, i, k int) (name, addr string) { return benchNode((i*scaleNodes + k) % nodes) }

// benchNode is the n-th catalog node.
func benchNode(n int) (name, addr string) {
	return fmt.Sprintf("bench-node-%d", n), fmt.Sprintf("127.7.%d.%d", n/250, n%250+1)
}

// scaleInstance is instance k of service i (on whichever node): its
// address is the k-th instance's of every service (scaleAddr), its port
// the service's.
func scaleInstance(i, k int) api.AgentService {
	return api.AgentService{ID: fmt.Sprintf("%s-%d", scaleName(i), k), Service: scaleName(i), Address: scaleAddr(k), Port: 10000 + i, Tags: []string{"bench"}}
}

// scaleAddr is the address of every service's instance k: a flip is seen
// on the instance at scaleAddr(0).
func scaleAddr(k int) string { return fmt.Sprintf("127.0.6.%d", k+1) }

// registerCatalog registers n services with scaleNodes instances each,
// each with one passing check, on nodes catalog nodes (scaleNode),
// through catalog transactions.
func registerCatalog(t testing.TB, a *consultest.Agent, n, nodes int) {
	for k := 0; k < nodes; k++ {
		name, addr := benchNode(k)
		if _, err := a.Client.Catalog().Register(&api.CatalogRegistration{Node: name, Address: addr}, nil); err != nil {
			t.Fatal(err)
		}
	}
	const perTxn = 32 // two operations each; Consul takes at most 128
	work := make(chan [2]int)
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range work {
				var ops api.TxnOps
				for j := r[0]; j < r[1]; j++ {
					k, i := j%scaleNodes, j/scaleNodes
					node, _ := scaleNode(nodes, i, k)
					inst := scaleInstance(i, k)
					ops = append(ops,
						&api.TxnOp{Service: &api.ServiceTxnOp{Verb: api.ServiceSet, Node: node, Service: inst}},
						&api.TxnOp{Check: &api.CheckTxnOp{Verb: api.CheckSet, Check: api.HealthCheck{
							Node: node, CheckID: inst.ID + "-chk", Name: "bench", Status: api.HealthPassing,
							ServiceID: inst.ID, ServiceName: inst.Service}}})
				}
				ok, resp, _, err := a.Client.Txn().Txn(ops, nil)
				if err == nil && !ok {
					err = fmt.Errorf("transaction refused: %+v", resp.Errors)
				}
				if err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	total := n * scaleNodes
	for j := 0; j < total; j += perTxn {
		work <- [2]int{j, min(j+perTxn, total)}
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
}

// setCheck sets the status of the check of service i's instance k (of
// nodes catalog nodes).
func setCheck(c *api.Client, nodes, k, i int, status string) error {
	node, addr := scaleNode(nodes, i, k)
	inst := scaleInstance(i, k)
	_, err := c.Catalog().Register(&api.CatalogRegistration{
		Node: node, Address: addr, SkipNodeUpdate: true,
		Check: &api.AgentCheck{Node: node, CheckID: inst.ID + "-chk", Name: "bench", Status: status,
			ServiceID: inst.ID, ServiceName: inst.Service},
	}, nil)
	return err
}

func pct(lat []time.Duration, p float64) time.Duration {
	return lat[min(len(lat)-1, int(float64(len(lat))*p))].Round(time.Microsecond)
}

// flipSink is a sources.Sink that times flips: from the catalog write's
// call, and from its return, to the first Publish (or, with an xDS client,
// the first EDS response; observe) in which the service's instance 0
// has the wanted health.
type flipSink struct {
	want   int
	synced chan struct{}

	mu      sync.Mutex
	last    []sources.Service
	xds     map[string]sources.HealthStatus // observed by an xDS client, by cluster
	pending map[string]*flipRecord
	done    []*flipRecord
	failed  int
}

// flipRecord is one flip: when its write was called and returned, and
// when the change was seen.
type flipRecord struct {
	want            sources.HealthStatus
	call, ret, seen time.Time
}

func newFlipSink(services int) *flipSink {
	return &flipSink{want: services, synced: make(chan struct{}), pending: map[string]*flipRecord{}}
}

func (k *flipSink) Publish(_ context.Context, u sources.Update) error {
	now := time.Now()
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.last == nil && len(u.Services) >= k.want {
		close(k.synced)
	}
	k.last = u.Services
	for name := range k.pending {
		k.settleLocked(name, now)
	}
	return nil
}

// observe notes the health an xDS client received for a cluster's
// instance 0; synced is called when the client has every service.
func (k *flipSink) observe(cluster string, h sources.HealthStatus, now time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.xds == nil {
		k.xds = map[string]sources.HealthStatus{}
	}
	k.xds[cluster] = h
	if len(k.xds) == k.want {
		select {
		case <-k.synced:
		default:
			close(k.synced)
		}
	}
	k.settleLocked(cluster, now)
}

func (k *flipSink) settleLocked(name string, now time.Time) {
	if f := k.pending[name]; f != nil && k.healthLocked(name) == f.want {
		f.seen = now
		k.done = append(k.done, f)
		delete(k.pending, name)
	}
}

func (k *flipSink) PublishPolicy(context.Context, sources.PolicyUpdate) error { return nil }
func (k *flipSink) Fail(context.Context, string, error)                       {}

// healthLocked is the published (or, with an xDS client, received) health
// of name's instance 0 (at scaleAddr(0)).
func (k *flipSink) healthLocked(name string) sources.HealthStatus {
	if k.xds != nil {
		return k.xds[name]
	}
	i := sort.Search(len(k.last), func(i int) bool { return k.last[i].Name >= name })
	if i == len(k.last) || k.last[i].Name != name {
		return sources.HealthUnknown
	}
	addr := scaleAddr(0)
	for _, e := range k.last[i].Endpoints {
		if e.Address == addr {
			return e.Health
		}
	}
	return sources.HealthUnknown
}

func (k *flipSink) unhealthy(name string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.healthLocked(name) == sources.HealthUnhealthy
}

// expect starts timing a flip of name (its write is being called); nil if
// one is still pending.
func (k *flipSink) expect(name string, want sources.HealthStatus) *flipRecord {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.pending[name]; ok {
		return nil
	}
	f := &flipRecord{want: want, call: time.Now()}
	k.pending[name] = f
	return f
}

// returned notes that f's write returned; failed writes are dropped.
func (k *flipSink) returned(name string, f *flipRecord, err error) {
	now := time.Now()
	k.mu.Lock()
	defer k.mu.Unlock()
	if err != nil {
		k.failed++
		if k.pending[name] == f {
			delete(k.pending, name)
		}
		k.done = slices.DeleteFunc(k.done, func(x *flipRecord) bool { return x == f })
		return
	}
	f.ret = now
}

func (k *flipSink) takeFailed() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	n := k.failed
	k.failed = 0
	return n
}

func (k *flipSink) pendingCount() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	n := len(k.pending)
	for _, f := range k.done {
		if f.ret.IsZero() {
			n++ // seen, its write not returned yet
		}
	}
	return n
}

// flipTimes are the sorted durations of a phase's flips.
type flipTimes struct {
	fromReturn, fromCall, writes []time.Duration
	// early counts flips seen before their write returned (from the
	// return: 0).
	early int
}

// take returns the durations of the flips seen and how many are still
// pending, and starts over.
func (k *flipSink) take() (ft flipTimes, missed int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, f := range k.done {
		if f.ret.IsZero() {
			missed++
			continue
		}
		d := f.seen.Sub(f.ret)
		if d < 0 {
			d = 0
			ft.early++
		}
		ft.fromReturn = append(ft.fromReturn, d)
		ft.fromCall = append(ft.fromCall, f.seen.Sub(f.call))
		ft.writes = append(ft.writes, f.ret.Sub(f.call))
	}
	missed += len(k.pending)
	k.done, k.pending = nil, map[string]*flipRecord{}
	for _, l := range [][]time.Duration{ft.fromReturn, ft.fromCall, ft.writes} {
		slices.Sort(l)
	}
	return ft, missed
}

// measure is the resource use between startMeasure and stop.
type measure struct {
	a         *consultest.Agent
	rt        requestCounter
	at        time.Time
	self      time.Duration
	consulCPU time.Duration
}

func startMeasure(a *consultest.Agent, rt requestCounter) *measure {
	rt.take()
	return &measure{a: a, rt: rt, at: time.Now(), self: selfCPU(), consulCPU: procCPU(a.Pid())}
}

func (m *measure) stop() (string, map[string]int) {
	secs := time.Since(m.at).Seconds()
	reqs := m.rt.take()
	total := 0
	for _, v := range reqs {
		total += v
	}
	return fmt.Sprintf("bridge %.3f cores, RSS %d MB; Consul %.3f cores; %.1f requests/s %v",
		(selfCPU()-m.self).Seconds()/secs, selfRSS()>>20, (procCPU(m.a.Pid())-m.consulCPU).Seconds()/secs, float64(total)/secs, reqs), reqs
}

// requestCounter counts the requests sent to Consul by endpoint since
// its last take.
type requestCounter interface{ take() map[string]int }

func total(c requestCounter) int {
	n := 0
	for _, v := range c.take() {
		n += v
	}
	return n
}

// metricsCounter counts the requests of bridges from their
// xdsbridge_consul_requests_total (scrapes: one per bridge, cumulative).
type metricsCounter struct {
	scrapes []func() map[string]int
	last    map[string]int
}

func (m *metricsCounter) take() map[string]int {
	now := map[string]int{}
	for _, s := range m.scrapes {
		for k, v := range s() {
			now[k] += v
		}
	}
	out := map[string]int{}
	for k, v := range now {
		if d := v - m.last[k]; d != 0 {
			out[k] = d
		}
	}
	m.last = now
	return out
}

// selfCPU is this process's user and system CPU time.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU is a process's user and system CPU time from /proc/<pid>/stat
// (clock ticks of 10 ms).
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// loadAverage is the machine's load average over 1, 5 and 15 minutes
// (the machine may be shared: the figures depend on it).
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// selfRSS is this process's resident set size in bytes.
func selfRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}
