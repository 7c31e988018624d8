package bridge

import (
	"context"
	"errors"
	"maps"
	"reflect"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/xdsbridge/xdsbridge/healthcheck"
	"github.com/xdsbridge/xdsbridge/sources"
	"github.com/xdsbridge/xdsbridge/translate"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder is a Publisher that records each publish.
type recorder struct {
	mu      sync.Mutex
	calls   []call
	ready   int
	changed chan struct{}
	fail    error
	zones   map[string][]string // service → the zone of each locality group, last published
}

type call struct {
	changed []string
	removed []string
	loads   map[string]int // endpoints per changed service
	at      time.Time
}

func newRecorder() *recorder {
	return &recorder{changed: make(chan struct{}, 100), zones: map[string][]string{}}
}

func (r *recorder) PublishServices(changed []translate.Resources, removed []string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		return r.fail
	}
	c := call{removed: append([]string(nil), removed...), loads: map[string]int{}, at: time.Now()}
	for _, res := range changed {
		c.changed = append(c.changed, res.Cluster.GetName())
		n := 0
		var zones []string
		for _, g := range res.Load.GetEndpoints() {
			n += len(g.GetLbEndpoints())
			zones = append(zones, g.GetLocality().GetZone())
		}
		r.zones[res.Cluster.GetName()] = zones
		c.loads[res.Cluster.GetName()] = n
	}
	sort.Strings(c.changed)
	r.calls = append(r.calls, c)
	r.changed <- struct{}{}
	return nil
}

func (r *recorder) MarkReady() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ready++
}

func (r *recorder) lastZones() map[string][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.zones)
}

func (r *recorder) next(t *testing.T) call {
	t.Helper()
	select {
	case <-r.changed:
	case <-time.After(5 * time.Second):
		t.Fatal("timed out waiting for a publish")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[len(r.calls)-1]
}

func (r *recorder) none(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case <-r.changed:
		r.mu.Lock()
		defer r.mu.Unlock()
		t.Fatalf("unexpected publish %+v", r.calls[len(r.calls)-1])
	case <-time.After(d):
	}
}

func run(t *testing.T, opts Options, pub Publisher) *Loop {
	t.Helper()
	l := New(opts, pub)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return l
}

func service(name string, ports ...uint32) sources.Service {
	s := sources.Service{Name: name}
	for _, p := range ports {
		s.Endpoints = append(s.Endpoints, sources.Endpoint{Address: "10.0.0.1", Port: p})
	}
	return s
}

func publish(t *testing.T, l *Loop, src string, svcs ...sources.Service) {
	t.Helper()
	if err := l.Publish(context.Background(), sources.Update{Source: src, Services: svcs}); err != nil {
		t.Fatal(err)
	}
}

func TestReadyOnlyAfterEverySourceSynced(t *testing.T) {
	rec := newRecorder()
	l := run(t, Options{Sources: []string{"a", "b"}, Quiet: time.Millisecond}, rec)
	publish(t, l, "a", service("x", 1))
	rec.none(t, 100*time.Millisecond)
	if l.Ready() {
		t.Fatal("ready before source b synced")
	}
	publish(t, l, "b", service("y", 1))
	c := rec.next(t)
	if d := cmp.Diff([]string{"x", "y"}, c.changed); d != "" {
		t.Fatalf("first publish (-want +got):\n%s", d)
	}
	waitTrue(t, l.Ready)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.ready != 1 {
		t.Fatalf("MarkReady called %d times", rec.ready)
	}
}

func TestReadyWithNoServices(t *testing.T) {
	rec := newRecorder()
	l := run(t, Options{Sources: []string{"a"}, Quiet: time.Millisecond}, rec)
	publish(t, l, "a")
	waitTrue(t, l.Ready)
}

func waitTrue(t *testing.T, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestOnlyChangedServicesRebuilt(t *testing.T) {
	rec := newRecorder()
	l := run(t, Options{Sources: []string{"a"}, Quiet: time.Millisecond}, rec)
	publish(t, l, "a", service("x", 1), service("y", 1), service("z", 1))
	rec.next(t)
	publish(t, l, "a", service("x", 1), service("y", 1, 2), service("z", 1))
	c := rec.next(t)
	if d := cmp.Diff(call{changed: []string{"y"}, loads: map[string]int{"y": 2}}, c, cmp.AllowUnexported(call{}), cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".at" }, cmp.Ignore())); d != "" {
		t.Fatalf("(-want +got):\n%s", d)
	}
	// The same set again publishes nothing.
	publish(t, l, "a", service("x", 1), service("y", 1, 2), service("z", 1))
	rec.none(t, 100*time.Millisecond)
	// Dropping z removes it.
	publish(t, l, "a", service("x", 1), service("y", 1, 2))
	c = rec.next(t)
	if d := cmp.Diff([]string{"z"}, c.removed); d != "" {
		t.Fatalf("removed (-want +got):\n%s", d)
	}
}

func TestDebounceBatchesBurstsAndMaxHoldBoundsThem(t *testing.T) {
	rec := newRecorder()
	l := run(t, Options{Sources: []string{"a"}, Quiet: 40 * time.Millisecond, MaxHold: 150 * time.Millisecond}, rec)
	publish(t, l, "a", service("x", 1))
	rec.next(t)

	// A burst inside the quiet period becomes one publish (two when it
	// began after the quiet period: its leading edge), the last its final
	// state. Each state has its own number of endpoints (rv4: every state
	// had 2, so a publish of any of them passed).
	for p := uint32(2); p < 7; p++ {
		ports := make([]uint32, p)
		for i := range ports {
			ports[i] = uint32(i + 1)
		}
		publish(t, l, "a", service("x", ports...))
	}
	c := rec.next(t)
	if c.loads["x"] != 6 {
		c = rec.next(t)
	}
	if c.loads["x"] != 6 {
		t.Fatalf("burst published %d endpoints, want the last state (6)", c.loads["x"])
	}
	rec.none(t, 80*time.Millisecond)

	// A steady stream faster than the quiet period still publishes within
	// the max hold.
	start := time.Now()
	stop := make(chan struct{})
	go func() {
		tk := time.NewTicker(10 * time.Millisecond)
		defer tk.Stop()
		for p := uint32(100); ; p++ {
			select {
			case <-stop:
				return
			case <-tk.C:
				_ = l.Publish(context.Background(), sources.Update{Source: "a", Services: []sources.Service{service("x", p)}})
			}
		}
	}()
	rec.next(t)
	close(stop)
	if waited := time.Since(start); waited > time.Second {
		t.Fatalf("steady stream starved the publish for %s (max hold 150ms)", waited)
	}
}

func TestOwnershipFirstSourceKeepsService(t *testing.T) {
	rec := newRecorder()
	l := run(t, Options{Sources: []string{"a", "b"}, Quiet: time.Millisecond}, rec)
	publish(t, l, "a", service("x", 1))
	publish(t, l, "b", service("x", 2, 3))
	c := rec.next(t)
	if c.loads["x"] != 1 {
		t.Fatalf("x published with %d endpoints; the first owner (a, 1 endpoint) must keep it", c.loads["x"])
	}
	if d := cmp.Diff(map[string][]string{"x": {"a", "b"}}, l.Conflicts()); d != "" {
		t.Fatalf("conflicts (-want +got):\n%s", d)
	}
	// b's changes to x are ignored while a owns it.
	publish(t, l, "b", service("x", 4))
	rec.none(t, 50*time.Millisecond)
	// When a drops x, b's claim takes over.
	publish(t, l, "a")
	c = rec.next(t)
	if c.loads["x"] != 1 || len(c.changed) != 1 {
		t.Fatalf("after a dropped x: %+v", c)
	}
	if len(l.Conflicts()) != 0 {
		t.Fatalf("conflicts remain: %v", l.Conflicts())
	}
}

// TestDefaultLocalityOfTheOwner: endpoints without a locality take the
// default locality of the source that owns their service, also when the
// service passes to another owner with the same endpoints.
func TestDefaultLocalityOfTheOwner(t *testing.T) {
	rec := newRecorder()
	l := run(t, Options{Sources: []string{"a", "b"}, Quiet: time.Millisecond,
		DefaultLocality: map[string]sources.Locality{"a": {Zone: "za"}}}, rec)
	y := service("y", 2)
	y.Endpoints[0].Locality = sources.Locality{Zone: "zy"}
	publish(t, l, "a", service("x", 1), y)
	publish(t, l, "b", service("x", 1))
	rec.next(t)
	if d := cmp.Diff(map[string][]string{"x": {"za"}, "y": {"zy"}}, rec.lastZones()); d != "" {
		t.Fatalf("zones (-want +got):\n%s", d)
	}
	// b has no default locality: the same endpoints change.
	publish(t, l, "a", y)
	if c := rec.next(t); len(c.changed) != 1 || c.changed[0] != "x" {
		t.Fatalf("after x passed to b: %+v", c)
	}
	if d := cmp.Diff(map[string][]string{"x": {""}, "y": {"zy"}}, rec.lastZones()); d != "" {
		t.Fatalf("after x passed to b, zones (-want +got):\n%s", d)
	}
}

func TestFailKeepsLastStateAndMarksStale(t *testing.T) {
	rec := newRecorder()
	l := run(t, Options{Sources: []string{"a"}, Quiet: time.Millisecond}, rec)
	publish(t, l, "a", service("x", 1))
	rec.next(t)
	l.Fail(context.Background(), "a", errors.New("registry down"))
	rec.none(t, 50*time.Millisecond)
	waitTrue(t, func() bool { return l.Sources()[0].Stale })
	st := l.Sources()[0]
	if st.LastError != "registry down" || !st.Synced {
		t.Fatalf("status %+v", st)
	}
	publish(t, l, "a", service("x", 1))
	waitTrue(t, func() bool { return !l.Sources()[0].Stale })
}

func TestPublishErrorIsRetried(t *testing.T) {
	rec := newRecorder()
	l := run(t, Options{Sources: []string{"a"}, Quiet: time.Millisecond}, rec)
	publish(t, l, "a", service("x", 1))
	rec.next(t)
	rec.mu.Lock()
	rec.fail = errors.New("cache full")
	rec.mu.Unlock()
	publish(t, l, "a", service("x", 1, 2))
	time.Sleep(30 * time.Millisecond)
	rec.mu.Lock()
	rec.fail = nil
	rec.mu.Unlock()
	// Another source event (here: an unrelated service) retries the kept dirty set.
	publish(t, l, "a", service("x", 1, 2), service("y", 1))
	c := rec.next(t)
	if d := cmp.Diff([]string{"x", "y"}, c.changed); d != "" {
		t.Fatalf("retry (-want +got):\n%s", d)
	}
}

// fakeChecks is a Checks with verdicts set by the test.
type fakeChecks struct {
	mu       sync.Mutex
	verdicts map[sources.HostKey]healthcheck.Verdict
	hosts    []healthcheck.ServiceHosts
}

func (f *fakeChecks) Verdict(_ string, k sources.HostKey) healthcheck.Verdict {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.verdicts[k]
}

func (f *fakeChecks) Detail(string, sources.HostKey) any { return nil }

func (f *fakeChecks) SetHosts(h []healthcheck.ServiceHosts) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hosts = h
}

func (f *fakeChecks) set(k sources.HostKey, v healthcheck.Verdict) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.verdicts[k] = v
}

func TestMatrixRetainsAbsentHealthyHostAndDeletesWhenItFails(t *testing.T) {
	rec := newRecorder()
	fc := &fakeChecks{verdicts: map[sources.HostKey]healthcheck.Verdict{}}
	l := run(t, Options{Sources: []string{"a"}, Quiet: time.Millisecond, HealthChecks: fc}, rec)
	h1 := sources.HostKey{Address: "10.0.0.1", Port: 1}
	h2 := sources.HostKey{Address: "10.0.0.1", Port: 2}
	fc.set(h1, healthcheck.Healthy)
	fc.set(h2, healthcheck.Healthy)
	publish(t, l, "a", service("x", 1, 2))
	if c := rec.next(t); c.loads["x"] != 2 {
		t.Fatalf("%+v", c)
	}
	// h2 absent from discovery but passing: retained.
	publish(t, l, "a", service("x", 1))
	rec.none(t, 50*time.Millisecond)
	hosts := l.Hosts("x")["x"]
	if len(hosts) != 2 || hosts[1].Rule != healthcheck.RuleRetained || hosts[1].AbsentSince.IsZero() {
		t.Fatalf("hosts %+v", hosts)
	}
	// Its check fails: deleted.
	fc.set(h2, healthcheck.Unhealthy)
	l.ChecksChanged(context.Background(), "x")
	if c := rec.next(t); c.loads["x"] != 1 {
		t.Fatalf("after the absent host failed: %+v", c)
	}
	// A discovered host failing its check stays published (UNHEALTHY).
	fc.set(h1, healthcheck.Unhealthy)
	l.ChecksChanged(context.Background(), "x")
	if c := rec.next(t); c.loads["x"] != 1 {
		t.Fatalf("discovered failing host dropped: %+v", c)
	}
	if h := l.Hosts("x")["x"]; len(h) != 1 || h[0].Health != sources.HealthUnhealthy || h[0].Rule != healthcheck.RuleDiscoveredFailed {
		t.Fatalf("hosts %+v", h)
	}
}

// retainedMetric reads xdsbridge_hosts_retained.
func retainedMetric(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "xdsbridge_hosts_retained" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("no xdsbridge_hosts_retained")
	return 0
}

func hostInfo(l *Loop, service string, k sources.HostKey) (HostInfo, bool) {
	for _, h := range l.Hosts(service)[service] {
		if h.Host == k.String() {
			return h, true
		}
	}
	return HostInfo{}, false
}

// retentionLoop runs a loop with max_retention ret over service x with
// hosts 1 and 2, both passing their check, and returns it once x is
// published.
func retentionLoop(t *testing.T, ret time.Duration) (*Loop, *recorder, *fakeChecks, *prometheus.Registry) {
	t.Helper()
	rec := newRecorder()
	fc := &fakeChecks{verdicts: map[sources.HostKey]healthcheck.Verdict{}}
	reg := prometheus.NewRegistry()
	l := run(t, Options{Sources: []string{"a"}, Quiet: 5 * time.Millisecond, HealthChecks: fc, MaxRetention: ret, Metrics: reg}, rec)
	fc.set(sources.HostKey{Address: "10.0.0.1", Port: 1}, healthcheck.Healthy)
	fc.set(sources.HostKey{Address: "10.0.0.1", Port: 2}, healthcheck.Healthy)
	publish(t, l, "a", service("x", 1, 2))
	if c := rec.next(t); c.loads["x"] != 2 {
		t.Fatalf("%+v", c)
	}
	return l, rec, fc, reg
}

// removeAndRetain publishes x without host 2 and waits until it is
// retained; it returns when it became absent.
func removeAndRetain(t *testing.T, l *Loop, rec *recorder) time.Time {
	t.Helper()
	h2 := sources.HostKey{Address: "10.0.0.1", Port: 2}
	publish(t, l, "a", service("x", 1))
	var since time.Time
	waitTrue(t, func() bool {
		h, ok := hostInfo(l, "x", h2)
		since = h.AbsentSince
		return ok && !h.Discovered && h.Published && h.Rule == healthcheck.RuleRetained
	})
	return since
}

// A retained host goes when max_retention has passed since it left
// discovery, with no other event, and not before.
func TestRetentionExpiresOnTimeWithoutEvent(t *testing.T) {
	const maxRet = 300 * time.Millisecond
	l, rec, fc, reg := retentionLoop(t, maxRet)
	h2 := sources.HostKey{Address: "10.0.0.1", Port: 2}
	since := removeAndRetain(t, l, rec)
	if got := retainedMetric(t, reg); got != 1 {
		t.Fatalf("xdsbridge_hosts_retained = %v, want 1", got)
	}
	// Nothing is published before the bound (the host stays as it was).
	rec.none(t, time.Until(since.Add(maxRet))-20*time.Millisecond)
	c := rec.next(t)
	if c.loads["x"] != 1 || len(c.changed) != 1 {
		t.Fatalf("publish at expiry: %+v", c)
	}
	if after := c.at.Sub(since); after < maxRet || after > maxRet+500*time.Millisecond {
		t.Fatalf("dropped %s after it left discovery, want %s (+ debounce)", after, maxRet)
	}
	h, ok := hostInfo(l, "x", h2)
	if !ok || h.Published || h.Rule != healthcheck.RuleRetentionExpired {
		t.Fatalf("h2 in /debug/hosts after expiry: %+v (found %v)", h, ok)
	}
	if got := retainedMetric(t, reg); got != 0 {
		t.Fatalf("xdsbridge_hosts_retained = %v after expiry, want 0", got)
	}
	// The checker stops probing it (told right after the publish).
	waitTrue(t, func() bool {
		fc.mu.Lock()
		defer fc.mu.Unlock()
		return len(fc.hosts) == 1 && len(fc.hosts[0].Hosts) == 1
	})
	// It stays gone: nothing brings it back but discovery.
	rec.none(t, 2*maxRet)
}

// A host rediscovered before the bound is kept, and its retention starts
// again when it leaves again.
func TestRetentionRediscoveredHostKept(t *testing.T) {
	const maxRet = 300 * time.Millisecond
	l, rec, _, _ := retentionLoop(t, maxRet)
	h2 := sources.HostKey{Address: "10.0.0.1", Port: 2}
	first := removeAndRetain(t, l, rec)
	time.Sleep(maxRet / 2)
	publish(t, l, "a", service("x", 1, 2))
	waitTrue(t, func() bool {
		h, ok := hostInfo(l, "x", h2)
		return ok && h.Discovered && h.Published
	})
	// Past the first bound: still served (nothing published; it never left).
	rec.none(t, time.Until(first.Add(maxRet))+maxRet/2)
	if h, _ := hostInfo(l, "x", h2); !h.Published || h.Rule != healthcheck.RuleDiscoveredOK {
		t.Fatalf("h2: %+v", h)
	}
	// Removed again: the bound counts from now.
	second := removeAndRetain(t, l, rec)
	if !second.After(first.Add(maxRet)) {
		t.Fatalf("absent since %v, first absence %v: retention not restarted", second, first)
	}
	c := rec.next(t)
	if after := c.at.Sub(second); c.loads["x"] != 1 || after < maxRet {
		t.Fatalf("publish %+v %s after the second removal", c, after)
	}
}

// An expiry whose publish fails is retried on the next event, still
// expired: the failure does not start the host's retention again.
func TestRetentionExpiryRetriedAfterPublishFailure(t *testing.T) {
	const maxRet = 200 * time.Millisecond
	l, rec, _, _ := retentionLoop(t, maxRet)
	h2 := sources.HostKey{Address: "10.0.0.1", Port: 2}
	since := removeAndRetain(t, l, rec)
	rec.mu.Lock()
	rec.fail = errors.New("cache full")
	rec.mu.Unlock()
	time.Sleep(time.Until(since.Add(maxRet)) + 100*time.Millisecond)
	rec.mu.Lock()
	rec.fail = nil
	rec.mu.Unlock()
	// An unrelated service retries the kept dirty set.
	publish(t, l, "a", service("x", 1), service("y", 1))
	c := rec.next(t)
	if d := cmp.Diff([]string{"x", "y"}, c.changed); d != "" || c.loads["x"] != 1 {
		t.Fatalf("retry %+v (-want +got changed):\n%s", c, d)
	}
	if h, ok := hostInfo(l, "x", h2); !ok || h.Published || h.Rule != healthcheck.RuleRetentionExpired {
		t.Fatalf("h2: %+v (found %v)", h, ok)
	}
}

// xdsbridge_hosts counts a host the last merge left out as NONE, until its
// service is merged again (README, "Health checks merged with discovery").
func TestHostsMetricNone(t *testing.T) {
	rec := newRecorder()
	reg := prometheus.NewRegistry()
	fc := &fakeChecks{verdicts: map[sources.HostKey]healthcheck.Verdict{}}
	l := run(t, Options{Sources: []string{"a"}, Quiet: time.Millisecond, HealthChecks: fc, Metrics: reg}, rec)
	h1 := sources.HostKey{Address: "10.0.0.1", Port: 1}
	h2 := sources.HostKey{Address: "10.0.0.1", Port: 2}
	fc.set(h1, healthcheck.Healthy)
	fc.set(h2, healthcheck.Unhealthy)
	hosts := func() map[string]float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]float64{}
		for _, mf := range mfs {
			if mf.GetName() == "xdsbridge_hosts" {
				for _, m := range mf.GetMetric() {
					out[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
		return out
	}
	publish(t, l, "a", service("x", 1, 2))
	rec.next(t)
	if got, want := hosts(), map[string]float64{"HEALTHY": 1, "UNHEALTHY": 1}; !reflect.DeepEqual(got, want) {
		t.Fatalf("both discovered: xdsbridge_hosts %v, want %v", got, want)
	}
	// h2 leaves discovery with its check failing: removed, counted as NONE.
	publish(t, l, "a", service("x", 1))
	rec.next(t)
	if got, want := hosts(), map[string]float64{"HEALTHY": 1, "NONE": 1}; !reflect.DeepEqual(got, want) {
		t.Fatalf("h2 removed: xdsbridge_hosts %v, want %v", got, want)
	}
	// The next merge of x forgets it.
	fc.set(h1, healthcheck.Unhealthy)
	l.ChecksChanged(context.Background(), "x")
	rec.next(t)
	if got, want := hosts(), map[string]float64{"UNHEALTHY": 1}; !reflect.DeepEqual(got, want) {
		t.Fatalf("after the next merge: xdsbridge_hosts %v, want %v", got, want)
	}
}
