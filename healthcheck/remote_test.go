package healthcheck

import (
	"context"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/xdsbridge/xdsbridge/sources"
)

// fakeRemote is a Remote whose assignment the test sets.
type fakeRemote struct {
	mu        sync.Mutex
	targets   []Target
	checkers  bool // false: every target is unassigned
	seeds     map[TargetKey]Verdict
	delivered map[TargetKey]Verdict
	assigned  chan struct{}
	trans     chan Transition
}

func newFakeRemote() *fakeRemote {
	return &fakeRemote{seeds: map[TargetKey]Verdict{}, delivered: map[TargetKey]Verdict{}, assigned: make(chan struct{}, 1), trans: make(chan Transition)}
}

func (f *fakeRemote) SetTargets(ts []Target) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.targets = slices.Clone(ts)
}

func (f *fakeRemote) Unassigned() []Target {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.checkers {
		return nil
	}
	return slices.Clone(f.targets)
}

func (f *fakeRemote) setCheckers(on bool) {
	f.mu.Lock()
	f.checkers = on
	f.mu.Unlock()
	select {
	case f.assigned <- struct{}{}:
	default:
	}
}

func (f *fakeRemote) Assigned() <-chan struct{}      { return f.assigned }
func (f *fakeRemote) Transitions() <-chan Transition { return f.trans }
func (f *fakeRemote) Run(ctx context.Context) error  { <-ctx.Done(); return nil }

func (f *fakeRemote) Seed(k TargetKey, v Verdict) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seeds[k], f.delivered[k] = v, v
}

func (f *fakeRemote) Delivered(k TargetKey) Verdict {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.delivered[k]
}

// deliver delivers a transition as the HDS server does: the verdict
// delivered is the transition's from when it is taken for delivery.
func (f *fakeRemote) deliver(tr Transition) {
	f.mu.Lock()
	f.delivered[tr.Key] = tr.Verdict
	f.mu.Unlock()
	f.trans <- tr
}

func (f *fakeRemote) Detail(k TargetKey) (any, bool) { return "remote", true }

// remoteHarness runs a Manager with a fake Remote over one host, a real
// TCP listener probed by the local checker when the remote cannot, and
// records every verdict Verdict answers after the first Healthy.
type remoteHarness struct {
	t       *testing.T
	m       *Manager
	r       *fakeRemote
	host    sources.HostKey
	key     TargetKey
	changed chan string
}

func newRemoteHarness(t *testing.T, fb Fallback) *remoteHarness {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(lis.Addr().String())
	p, _ := strconv.Atoi(port)
	host := sources.HostKey{Address: "127.0.0.1", Port: uint32(p)}
	check := tcpCheck(20, func(c *Config) { c.HealthyThreshold, c.UnhealthyThreshold = 1, 1 })
	h := &remoteHarness{t: t, r: newFakeRemote(), host: host, key: Target{Host: host, Check: check}.Key(), changed: make(chan string, 100)}
	h.m = NewManager(NewChecker(Options{Seed: 1}), nil, map[string]Config{"web": check})
	h.m.UseRemote(h.r, fb)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = h.m.Run(ctx, func(_ context.Context, s string) {
			select {
			case h.changed <- s:
			default:
			}
		})
	}()
	t.Cleanup(func() { cancel(); <-done })
	h.m.SetHosts([]ServiceHosts{{Service: "web", Source: "file", Hosts: []sources.HostKey{host}}})
	return h
}

func (h *remoteHarness) verdict() Verdict { return h.m.Verdict("web", h.host) }

// waitFor polls until cond holds, failing the test after 5s; every verdict
// read meanwhile must be one of allowed.
func (h *remoteHarness) waitFor(what string, cond func() bool, allowed ...Verdict) {
	h.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if v := h.verdict(); !slices.Contains(allowed, v) {
			h.t.Fatalf("waiting for %s: the verdict read %s, want one of %v", what, v, allowed)
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("no %s after 5s (verdict %s)", what, h.verdict())
		}
		time.Sleep(time.Millisecond)
	}
}

func (h *remoteHarness) owner() owner {
	h.m.mu.Lock()
	defer h.m.mu.Unlock()
	return h.m.owner[h.key]
}

// A target handed from the local checker to the remote and back keeps
// its verdict across each hand-over (the remote is seeded with it; the
// local checker's Unknown before its first probe reads as the verdict the
// target had), and the remote's transitions reach the merge.
func TestManagerRemoteHandoverKeepsVerdict(t *testing.T) {
	h := newRemoteHarness(t, FallbackLocal)
	h.waitFor("the local checker's verdict", func() bool { return h.verdict() == Healthy }, Unknown, Healthy)
	if h.owner() != ownedLocal {
		t.Fatalf("owner %d with no checker connected, want local", h.owner())
	}

	h.r.setCheckers(true)
	h.waitFor("the hand-over to the remote", func() bool { return h.owner() == ownedRemote }, Healthy)
	if v := h.verdict(); v != Healthy {
		t.Fatalf("verdict %s after the hand-over, want healthy", v)
	}
	h.r.mu.Lock()
	seeded, ok := h.r.seeds[h.key]
	h.r.mu.Unlock()
	if !ok || seeded != Healthy {
		t.Errorf("remote seeded with %s (%v), want healthy", seeded, ok)
	}
	if d, ok := h.m.Detail("web", h.host).(RemoteDetail); !ok || d.State() != "remote" {
		t.Errorf("detail %v, want the remote's", d)
	}

	// The remote's verdict is the one the merge reads.
	for len(h.changed) > 0 {
		<-h.changed
	}
	h.r.deliver(Transition{Key: h.key, Previous: Healthy, Verdict: Unhealthy})
	h.waitFor("the remote's transition", func() bool { return h.verdict() == Unhealthy }, Healthy, Unhealthy)
	select {
	case s := <-h.changed:
		if s != "web" {
			t.Errorf("changed(%q), want web", s)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the remote's transition did not mark the service changed")
	}

	// Back to the local checker: the remote's Unhealthy stands until the
	// local checker's first verdict (the listener answers: Healthy).
	h.r.setCheckers(false)
	h.waitFor("the hand-over to the local checker", func() bool { return h.owner() == ownedLocal }, Unhealthy)
	h.waitFor("the local checker's verdict", func() bool { return h.verdict() == Healthy }, Unhealthy, Healthy)
}

// With fallback source, a target the remote cannot check is checked by no
// one: Unknown, so its source's health stands, and the service is marked
// changed when a verdict is dropped so.
func TestManagerRemoteFallbackSource(t *testing.T) {
	h := newRemoteHarness(t, FallbackSource)
	h.waitFor("the routing", func() bool { return h.owner() == ownedNone }, Unknown)
	h.r.setCheckers(true)
	h.waitFor("the hand-over to the remote", func() bool { return h.owner() == ownedRemote }, Unknown)
	h.r.deliver(Transition{Key: h.key, Previous: Unknown, Verdict: Healthy})
	h.waitFor("the remote's transition", func() bool { return h.verdict() == Healthy }, Unknown, Healthy)
	for len(h.changed) > 0 {
		<-h.changed
	}
	h.r.setCheckers(false)
	h.waitFor("the fallback", func() bool { return h.owner() == ownedNone }, Healthy, Unknown)
	if v := h.verdict(); v != Unknown {
		t.Errorf("verdict %s with no checker and fallback source, want unknown", v)
	}
	select {
	case <-h.changed:
	case <-time.After(5 * time.Second):
		t.Fatal("dropping the verdict did not mark the service changed")
	}
	h.m.checker.mu.Lock()
	n := len(h.m.checker.targets)
	h.m.checker.mu.Unlock()
	if n != 0 {
		t.Errorf("the local checker has %d targets with fallback source, want 0", n)
	}
}
