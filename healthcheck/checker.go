// Package healthcheck actively probes endpoints (TCP connect, HTTP/1.1 GET,
// gRPC grpc.health.v1) and merges the verdicts with discovery health.
//
// The prober (Checker) is a scheduler: a timer heap of targets starting due
// probes, TCP connects on one epoll loop (Linux) and the others each in its
// own goroutine, with at most one probe in flight per
// target and a bound on the probes in flight at once that by default grows
// with the targets (see Options.Workers), so that probes waiting for a
// connect or an answer (a blackholed host) delay no other probe. A target
// is an address:port plus a check; equal targets (same TargetKey)
// discovered under several services or sources are probed once and share
// the result. Verdicts follow thresholds with hysteresis, and the
// consumer hears only of verdict changes (Transitions).
//
// See README.md for the semantics (thresholds, initial state, jitter).
package healthcheck

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/xdsbridge/xdsbridge/sources"
)

// DefaultWorkers is the least bound on probes in flight at once when
// Options.Workers is 0 (automatic).
const DefaultWorkers = 128

// MaxAutoWorkers caps the automatic bound on probes in flight (each costs a
// socket, and off the connect loop a goroutine, while it waits).
const MaxAutoWorkers = 65536

// Verdict is what an active check says of a host, after thresholds: the
// checker's verdict of a target, and what the merge asks of a host
// (Manager.Verdict), which may also be NoCheck.
type Verdict int

const (
	// Unknown: checked, but no verdict yet. The host's discovery health
	// stands.
	Unknown Verdict = iota
	// Healthy: the check passes.
	Healthy
	// Unhealthy: the check fails.
	Unhealthy
	// NoCheck: no active check is configured for the host (the merge's
	// look-up only; a checker's target always has a check).
	NoCheck
)

var verdictNames = [...]string{"unknown", "healthy", "unhealthy", "none"}

func (v Verdict) String() string {
	if v >= 0 && int(v) < len(verdictNames) {
		return verdictNames[v]
	}
	return fmt.Sprintf("Verdict(%d)", int(v))
}

// MarshalText writes the verdict's name (unknown, healthy, unhealthy, none).
func (v Verdict) MarshalText() ([]byte, error) { return []byte(v.String()), nil }

// Target is what to probe: an address:port and the check to run there.
type Target struct {
	Host  sources.HostKey
	Check Config
}

// TargetKey identifies a probe stream: the host and the canonical form of
// its (normalized) check. Targets with equal keys share one probe stream and
// one verdict. It is comparable and usable as a map key (also in JSON).
type TargetKey struct {
	Host  sources.HostKey
	Check string
}

// Key returns the target's key.
func (t Target) Key() TargetKey {
	return TargetKey{Host: t.Host, Check: t.Check.Normalize().canonical()}
}

func (k TargetKey) String() string { return k.Host.String() + " " + k.Check }

// MarshalText writes String(), so that maps keyed by TargetKey encode as JSON.
func (k TargetKey) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// Transition is a verdict change of one target, as the consumer sees it:
// Previous is the verdict of the last transition delivered for Key (Unknown
// for a new target), Verdict the current one. They always differ.
type Transition struct {
	Key      TargetKey
	Previous Verdict
	Verdict  Verdict
}

// State is what the checker knows about one target, for /debug/hosts.
type State struct {
	Host    sources.HostKey `json:"-"`
	Address string          `json:"address"`
	Type    string          `json:"type"`
	Verdict Verdict         `json:"verdict"`
	// Since is when the verdict last changed (or the target was added).
	Since time.Time `json:"since"`
	// LastResult is "ok", "fail", "error" (the bridge could not probe: out
	// of file descriptors, memory, buffers or local ports; it counts
	// neither way and the verdict stands) or "" (not probed yet).
	LastResult           string        `json:"last_result,omitempty"`
	LastTime             time.Time     `json:"last_time,omitzero"`
	LastError            string        `json:"last_error,omitempty"`
	LastLatency          time.Duration `json:"last_latency_ns,omitempty"`
	ConsecutiveSuccesses uint32        `json:"consecutive_successes"`
	ConsecutiveFailures  uint32        `json:"consecutive_failures"`
	Probes               uint64        `json:"probes"`
	Transitions          uint64        `json:"transitions"`
	// NextProbe is when the next probe is due (zero while one is in flight).
	NextProbe time.Time `json:"next_probe,omitzero"`
}

// Options configure a Checker. The zero value is usable.
type Options struct {
	// Workers bounds the probes in flight at once. 0 (the default) sizes
	// the bound from the targets: the sum over the targets of timeout ÷
	// interval, the most probes that can be in flight if every probe waits
	// out its timeout (100,000 targets at 1s/5s: 20,000), at least
	// DefaultWorkers and at most MaxAutoWorkers; so hosts that never answer
	// delay no other probe. A probe in flight costs a socket, and a
	// goroutine unless it is a TCP check on the connect loop (Linux, an IP
	// address). Due probes beyond the bound wait; the lag shows in the
	// xdsbridge_healthcheck_schedule_lag_seconds histogram.
	Workers int
	// HTTPKeepAlive is ignored: whether a check keeps its connection
	// between probes is its reuse_connection (Config.ReuseConnection).
	//
	// Deprecated: set Config.ReuseConnection.
	HTTPKeepAlive bool
	// HTTPIdleTimeout closes a kept HTTP connection that has been idle
	// longer than this before the next probe, which then dials anew (0:
	// never).
	HTTPIdleTimeout time.Duration
	// Seed seeds the jitter (0: random). For tests.
	Seed uint64
	// Logger (default slog.Default()).
	Logger *slog.Logger
	// Metrics, if not nil, gets the checker's collectors.
	Metrics prometheus.Registerer
	// TransitionBuffer is the capacity of the Transitions channel (default
	// 0). Transitions waiting in the channel are no longer coalesced.
	TransitionBuffer int
}

// Checker probes a set of targets on a schedule. Its methods are safe for
// concurrent use. NewChecker starts nothing; Run does the probing.
type Checker struct {
	opts    Options
	log     *slog.Logger
	probers *probers
	m       *metrics

	wake     chan struct{} // scheduler: the heap top may have changed
	pendWake chan struct{} // delivery: a transition is pending
	out      chan Transition

	mu      sync.Mutex
	rng     *rand.Rand
	targets map[TargetKey]*target
	queue   targetHeap
	running bool
	// Pending transitions, coalesced per key, in first-queued order.
	pend      map[TargetKey]*Transition
	pendOrder []TargetKey
	// counted is this checker's part of the targets gauge, which checkers
	// on one registry share (internal/metrics.Shared).
	counted int
	// load is the sum of timeout ÷ interval over the targets (the automatic
	// bound on probes in flight); active the probes in flight; full that
	// the scheduler waits for one of them to end.
	load   float64
	active int
	full   bool

	// portableTCP makes every TCP check dial in a goroutine, as on
	// systems without the connect loop. For tests.
	portableTCP bool
	// loopProbes counts the probes started on the connect loop. For tests.
	loopProbes atomic.Uint64
}

type target struct {
	key  TargetKey
	addr string
	cfg  Config

	// Guarded by Checker.mu.
	next     time.Time
	idx      int // index in the heap, -1 when not in it
	inflight bool
	removed  bool
	probed   bool    // some probe has set or confirmed the verdict
	seen     Verdict // verdict the consumer last got
	st       State
	// conn is the connection kept between probes (*grpc.ClientConn or
	// *httpConn), or nil.
	conn io.Closer
	// dest is the TCP check's address for the connect loop (tcpDestOf),
	// or nil: the check then dials in a goroutine.
	dest tcpDest
}

// NewChecker returns a checker with no targets. It starts no goroutines.
func NewChecker(opts Options) *Checker {
	if opts.Workers < 0 {
		opts.Workers = 0
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	seed := opts.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	c := &Checker{
		opts:     opts,
		log:      opts.Logger,
		probers:  newProbers(opts),
		m:        newMetrics(opts.Metrics, opts.Logger),
		wake:     make(chan struct{}, 1),
		pendWake: make(chan struct{}, 1),
		out:      make(chan Transition, opts.TransitionBuffer),
		rng:      rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		targets:  make(map[TargetKey]*target),
		pend:     make(map[TargetKey]*Transition),
	}
	return c
}

// Transitions delivers verdict changes. It is never closed. Delivery never
// blocks the scheduler: changes wait in a queue coalesced per target (a
// target that flips and flips back before the consumer reads is not
// reported), so a slow consumer gets the latest verdict of each target,
// not every step. Transitions are delivered while Run runs; those queued
// while it does not are delivered when it starts.
//
// Every change is reported, including the initial verdict of a target added
// with initial_state healthy or unhealthy (Previous: Unknown). A removed
// target's pending transitions are dropped; its removal is not reported
// (the caller removed it).
func (c *Checker) Transitions() <-chan Transition { return c.out }

// SetTargets replaces the set of targets. Targets with equal keys are one.
// New targets get their first probe at a random point within one interval
// (no burst at start) and their initial state; targets that stay keep their
// schedule and state; removed targets stop being probed (a probe in flight
// is abandoned) and their gRPC connections close. Invalid targets (bad
// check config, port 0) are left out and reported in the error; the valid
// ones are applied all the same.
func (c *Checker) SetTargets(ts []Target) error {
	want := make(map[TargetKey]Target, len(ts))
	var errs []error
	for _, t := range ts {
		cfg := t.Check.Normalize()
		if err := cfg.Validate("health_check"); err != nil {
			errs = append(errs, fmt.Errorf("target %s: %w", t.Host, err))
			continue
		}
		if t.Host.Address == "" || t.Host.Port == 0 || t.Host.Port > 65535 {
			errs = append(errs, fmt.Errorf("target %s: bad address or port", t.Host))
			continue
		}
		k := TargetKey{Host: t.Host, Check: cfg.canonical()}
		want[k] = Target{Host: t.Host, Check: cfg}
	}

	var toClose []io.Closer
	c.mu.Lock()
	for k, t := range c.targets {
		if _, ok := want[k]; ok {
			continue
		}
		t.removed = true
		c.load -= t.cfg.Timeout.D().Seconds() / t.cfg.Interval.D().Seconds()
		delete(c.targets, k)
		if t.idx >= 0 {
			heap.Remove(&c.queue, t.idx)
		}
		delete(c.pend, k)
		if !t.inflight && t.conn != nil {
			toClose = append(toClose, t.conn)
			t.conn = nil
		}
	}
	now := time.Now()
	wake := false
	for k, w := range want {
		if _, ok := c.targets[k]; ok {
			continue
		}
		t := &target{key: k, addr: w.Host.String(), cfg: w.Check, idx: -1}
		if w.Check.Type == TypeTCP && !c.portableTCP {
			t.dest = tcpDestOf(w.Host)
		}
		t.st = State{Host: w.Host, Address: t.addr, Type: w.Check.Type, Since: now}
		switch w.Check.InitialState {
		case InitialHealthy:
			t.st.Verdict = Healthy
		case InitialUnhealthy:
			t.st.Verdict = Unhealthy
		}
		t.next = now.Add(c.randDuration(w.Check.Interval.D()))
		c.load += w.Check.Timeout.D().Seconds() / w.Check.Interval.D().Seconds()
		c.targets[k] = t
		heap.Push(&c.queue, t)
		wake = true
		if t.st.Verdict != Unknown {
			c.queueTransition(t)
		}
	}
	delta := len(c.targets) - c.counted
	c.counted = len(c.targets)
	c.compactPending()
	c.mu.Unlock()

	for _, conn := range toClose {
		conn.Close()
	}
	c.m.addTargets(delta)
	if wake {
		signal(c.wake)
	}
	return errors.Join(errs...)
}

// State returns what the checker knows about the target with key k.
func (c *Checker) State(k TargetKey) (State, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.targets[k]
	if !ok {
		return State{}, false
	}
	return t.state(), true
}

// Verdict returns the current verdict of k (Unknown if k is not a target).
func (c *Checker) Verdict(k TargetKey) Verdict {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t, ok := c.targets[k]; ok {
		return t.st.Verdict
	}
	return Unknown
}

// Delivered returns the verdict of the last transition delivered for k
// (Unknown before any, or if k is not a target): what a consumer that
// follows Transitions has been told. A consumer that rebuilds on each
// transition, and at other times too, must read this rather than Verdict:
// a change undone before its transition is delivered is coalesced away and
// never reported, so a rebuild in between that read the current verdict
// would publish the short-lived one and never be corrected. The value
// changes just before the transition that reports it is sent, so a
// rebuild caused by that transition reads it. (If Run stops while that
// send waits, it reverts, and the transition is queued again; a consumer
// that keeps rebuilding while Run is stopped and restarted could have read
// the reverted value. Manager.Run stops the checker and its consumer
// together.)
func (c *Checker) Delivered(k TargetKey) Verdict {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t, ok := c.targets[k]; ok {
		return t.seen
	}
	return Unknown
}

// Snapshot returns the state of every target.
func (c *Checker) Snapshot() map[TargetKey]State {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[TargetKey]State, len(c.targets))
	for k, t := range c.targets {
		out[k] = t.state()
	}
	return out
}

func (t *target) state() State {
	s := t.st
	if t.idx >= 0 {
		s.NextProbe = t.next
	}
	return s
}

// Run probes the targets until ctx is done, then closes the gRPC
// connections and returns nil. Probes cut short by the end of Run count for
// nothing. Run may be called again after it returns, but not concurrently.
func (c *Checker) Run(ctx context.Context) error {
	c.mu.Lock()
	if c.running {
		c.mu.Unlock()
		return errors.New("healthcheck: Checker.Run is already running")
	}
	c.running = true
	c.mu.Unlock()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { c.deliver(ctx) })
	loop, err := newTCPLoop(func(t *target, err error, start, end time.Time) {
		c.finish(ctx, t, nil, err, start, end)
		c.release()
	})
	if err != nil {
		// TCP checks dial in goroutines, as on systems without the loop.
		c.log.Debug("health check connect loop unavailable", "error", err)
	} else {
		wg.Go(func() { loop.run(ctx) })
	}
	c.schedule(ctx, &wg, loop)
	wg.Wait()

	var conns []io.Closer
	c.mu.Lock()
	c.running = false
	for _, t := range c.targets {
		if t.conn != nil {
			conns = append(conns, t.conn)
			t.conn = nil
		}
	}
	c.mu.Unlock()
	for _, conn := range conns {
		conn.Close()
	}
	return nil
}

// schedule pops due targets off the heap and starts their probes while
// fewer than the bound are in flight: a TCP check with an IP address on
// loop (if not nil), any other in a goroutine of wg.
func (c *Checker) schedule(ctx context.Context, wg *sync.WaitGroup, loop *tcpLoop) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for ctx.Err() == nil {
		// (A probe cut short by the end of Run puts its target back, due at
		// once: the loop must not start it again.)
		var due *target
		wait := time.Hour
		c.mu.Lock()
		if len(c.queue) > 0 {
			top := c.queue[0].t
			now := time.Now()
			if d := top.next.Sub(now); d > 0 {
				wait = d
			} else if c.active >= c.limit() {
				c.full = true // a probe ending wakes the scheduler
			} else {
				heap.Pop(&c.queue)
				top.inflight = true
				c.active++
				due = top
				c.m.lag.Observe(-d.Seconds())
			}
		}
		c.mu.Unlock()
		if due != nil && due.dest != nil && loop != nil {
			c.loopProbes.Add(1)
			if !loop.start(due, due.dest, due.cfg.Timeout.D()) {
				// The loop has stopped: Run is stopping.
				c.requeue(due)
				c.release()
			}
			continue
		}
		if due != nil {
			wg.Go(func() {
				c.probe(ctx, due)
				c.release()
			})
			continue
		}
		timer.Reset(wait)
		select {
		case <-timer.C:
		case <-c.wake:
		case <-ctx.Done():
			return
		}
	}
}

// limit is the bound on probes in flight. Called with c.mu held.
func (c *Checker) limit() int {
	if c.opts.Workers > 0 {
		return c.opts.Workers
	}
	return min(max(DefaultWorkers, int(math.Ceil(c.load))), MaxAutoWorkers)
}

// release counts the end of a probe, and wakes the scheduler if it waits
// for one.
func (c *Checker) release() {
	c.mu.Lock()
	c.active--
	wake := c.full
	c.full = false
	c.mu.Unlock()
	if wake {
		signal(c.wake)
	}
}

// requeue puts back a target whose probe did not happen (Run is stopping):
// it is due again right away when Run restarts.
func (c *Checker) requeue(t *target) {
	var conn io.Closer
	c.mu.Lock()
	t.inflight = false
	if t.removed {
		conn, t.conn = t.conn, nil
	} else if t.idx < 0 {
		t.next = time.Now()
		heap.Push(&c.queue, t)
	}
	c.mu.Unlock()
	if conn != nil {
		conn.Close()
	}
}

// probe runs one probe of t (a worker) and records its result.
func (c *Checker) probe(ctx context.Context, t *target) {
	c.mu.Lock()
	if t.removed {
		c.mu.Unlock()
		c.requeue(t)
		return
	}
	conn := t.conn
	c.mu.Unlock()

	cfg := t.cfg
	start := time.Now()
	if cfg.Type == TypeHTTP {
		// The connection's deadline is the probe's timeout: no context.
		hc, _ := conn.(*httpConn)
		hc, err := c.probers.probeHTTP(ctx, start.Add(cfg.Timeout.D()), t.addr, cfg.HTTP, cfg.reuse(), hc)
		conn = nil
		if hc != nil {
			conn = hc
		}
		c.finish(ctx, t, conn, err, start, time.Now())
		return
	}
	pctx, cancel := context.WithTimeout(ctx, cfg.Timeout.D())
	var err error
	switch cfg.Type {
	case TypeTCP:
		err = c.probers.probeTCP(pctx, t.addr)
	case TypeGRPC:
		gc, _ := conn.(*grpc.ClientConn)
		if gc == nil {
			gc, err = c.probers.grpcConn(t.addr, cfg.GRPC, cfg.Timeout.D())
		}
		conn = nil
		if err == nil {
			var keep bool
			keep, err = c.probers.probeGRPC(pctx, gc, cfg.GRPC)
			if keep && cfg.reuse() {
				conn = gc
			} else {
				gc.Close()
			}
		}
	default:
		err = fmt.Errorf("unknown check type %q", cfg.Type)
	}
	end := time.Now()
	cancel()
	c.finish(ctx, t, conn, err, start, end)
}

// finish records the result of one probe of t that ran from start to end,
// keeps conn for the next probe, and schedules it.
func (c *Checker) finish(ctx context.Context, t *target, conn io.Closer, err error, start, end time.Time) {
	cfg := &t.cfg
	if ctx.Err() != nil {
		// Run is stopping: the probe was cut short and says nothing.
		c.mu.Lock()
		t.conn = conn
		c.mu.Unlock()
		c.requeue(t)
		return
	}
	latency := end.Sub(start)

	c.mu.Lock()
	t.inflight = false
	if t.removed {
		c.mu.Unlock()
		if conn != nil {
			conn.Close()
		}
		return
	}
	t.conn = conn
	before := t.st.Verdict
	c.record(t, err, end, latency)
	after := t.st.Verdict
	changed := after != before
	if changed {
		t.st.Since = end
		t.st.Transitions++
		c.queueTransition(t)
	}
	t.next = end.Add(cfg.Interval.D() + c.randDuration(cfg.Jitter.D()))
	heap.Push(&c.queue, t)
	top := t.idx == 0
	c.mu.Unlock()

	c.m.observe(cfg.Type, err, latency)
	if changed {
		c.m.transition(after)
		c.log.Debug("health check verdict changed", "target", t.addr, "type", cfg.Type,
			"from", before, "to", after, "error", errString(err))
	}
	if top {
		signal(c.wake)
	}
}

// record applies one probe result to t's state and verdict. Called with
// c.mu held.
//
// The thresholds (Envoy's semantics, one deviation noted):
//   - Healthy turns Unhealthy after unhealthy_threshold consecutive failures.
//   - Unhealthy turns Healthy after healthy_threshold consecutive successes,
//     except before any probe has given a verdict (initial_state unhealthy),
//     when one success is enough: Envoy's "during startup, only a single
//     successful health check is required to mark a host healthy".
//   - Unknown (initial_state unknown) turns Healthy on the first success, as
//     at Envoy's startup, and Unhealthy only after unhealthy_threshold
//     consecutive failures: meanwhile discovery health stands, so a restart
//     of the bridge never publishes a burst of UNHEALTHY hosts on the
//     strength of one failed probe.
//   - Unlike Envoy, an HTTP status outside expected_statuses (e.g. 503)
//     counts as one failure like any other, not as an immediate verdict: the
//     thresholds are what keeps a flapping host from causing a push per
//     probe.
func (c *Checker) record(t *target, err error, at time.Time, latency time.Duration) {
	s := &t.st
	s.Probes++
	s.LastTime = at
	s.LastLatency = latency
	cfg := &t.cfg
	if localError(err) {
		// The bridge's own shortage says nothing of the host.
		s.LastResult, s.LastError = "error", err.Error()
		return
	}
	if err == nil {
		s.LastResult, s.LastError = "ok", ""
		s.ConsecutiveFailures = 0
		if s.ConsecutiveSuccesses < ^uint32(0) {
			s.ConsecutiveSuccesses++
		}
		switch s.Verdict {
		case Unknown:
			s.Verdict = Healthy
		case Unhealthy:
			if !t.probed || s.ConsecutiveSuccesses >= cfg.HealthyThreshold {
				s.Verdict = Healthy
			}
		}
	} else {
		s.LastResult, s.LastError = "fail", err.Error()
		s.ConsecutiveSuccesses = 0
		if s.ConsecutiveFailures < ^uint32(0) {
			s.ConsecutiveFailures++
		}
		if s.Verdict != Unhealthy && s.ConsecutiveFailures >= cfg.UnhealthyThreshold {
			s.Verdict = Unhealthy
		}
		if s.Verdict == Unhealthy {
			t.probed = true // the probes agree with the initial state
		}
	}
	if s.Verdict == Healthy && err == nil {
		t.probed = true
	}
}

// localError reports whether err is the bridge's own shortage (file
// descriptors, memory, buffers, local ports) rather than anything the host
// did.
func localError(err error) bool {
	if err == nil {
		return false
	}
	for _, e := range localErrnos {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// localErrnos are the errors of the bridge's own shortages. EADDRNOTAVAIL
// is connect(2)'s answer when the socket could get no local address: no
// free port in the ephemeral range (net.ipv4.ip_local_port_range, shared
// by every outgoing connection of the bridge's host), or no source address
// for the route (the bridge's host lost its address); either is the
// bridge's host's state, not the target's.
var localErrnos = []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.EADDRNOTAVAIL}

// queueTransition queues t's current verdict for the consumer, coalescing
// with a transition of t still waiting. Called with c.mu held.
func (c *Checker) queueTransition(t *target) {
	if p, ok := c.pend[t.key]; ok {
		p.Verdict = t.st.Verdict
	} else {
		c.pend[t.key] = &Transition{Key: t.key, Previous: t.seen, Verdict: t.st.Verdict}
		c.pendOrder = append(c.pendOrder, t.key)
	}
	signal(c.pendWake)
}

// compactPending drops keys of removed targets from the queue order when
// they pile up. Called with c.mu held.
func (c *Checker) compactPending() {
	if len(c.pendOrder) <= 2*len(c.pend)+64 {
		return
	}
	out := c.pendOrder[:0]
	seen := make(map[TargetKey]bool, len(c.pend))
	for _, k := range c.pendOrder {
		if _, ok := c.pend[k]; ok && !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	clear(c.pendOrder[len(out):])
	c.pendOrder = out
}

// nextPending pops the oldest pending transition that still changes
// something for the consumer.
func (c *Checker) nextPending() (Transition, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.pendOrder) > 0 {
		k := c.pendOrder[0]
		c.pendOrder[0] = TargetKey{}
		c.pendOrder = c.pendOrder[1:]
		p, ok := c.pend[k]
		if !ok {
			continue // removed target
		}
		delete(c.pend, k)
		if p.Previous == p.Verdict {
			continue // flipped back before anyone saw it
		}
		if t, ok := c.targets[k]; ok {
			t.seen = p.Verdict
		}
		return *p, true
	}
	c.pendOrder = nil
	return Transition{}, false
}

// unsend puts back a transition that could not be delivered (Run is
// stopping), in front of the queue.
func (c *Checker) unsend(tr Transition) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.targets[tr.Key]
	if !ok {
		return
	}
	t.seen = tr.Previous
	if p, ok := c.pend[tr.Key]; ok {
		p.Previous = tr.Previous
		return
	}
	c.pend[tr.Key] = &Transition{Key: tr.Key, Previous: tr.Previous, Verdict: t.st.Verdict}
	c.pendOrder = append([]TargetKey{tr.Key}, c.pendOrder...)
}

// deliver sends pending transitions to the consumer until ctx is done.
func (c *Checker) deliver(ctx context.Context) {
	for {
		tr, ok := c.nextPending()
		if !ok {
			select {
			case <-c.pendWake:
				continue
			case <-ctx.Done():
				return
			}
		}
		select {
		case c.out <- tr:
		case <-ctx.Done():
			c.unsend(tr)
			return
		}
	}
}

// randDuration returns a random duration in [0, d). Called with c.mu held.
func (c *Checker) randDuration(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(c.rng.Int64N(int64(d)))
}

// signal does a non-blocking send on a wake-up channel of capacity 1.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// targetHeap orders targets by next probe time. Each entry holds its time
// as a number, so that ordering reads no target.
type targetHeap []heapEntry

type heapEntry struct {
	at int64 // t.next, in nanoseconds since heapEpoch (monotonic)
	t  *target
}

var heapEpoch = time.Now()

func (h targetHeap) Len() int           { return len(h) }
func (h targetHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h targetHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].t.idx = i
	h[j].t.idx = j
}
func (h *targetHeap) Push(x any) {
	t := x.(*target)
	t.idx = len(*h)
	*h = append(*h, heapEntry{at: int64(t.next.Sub(heapEpoch)), t: t})
}
func (h *targetHeap) Pop() any {
	old := *h
	n := len(old)
	t := old[n-1].t
	old[n-1] = heapEntry{}
	t.idx = -1
	*h = old[:n-1]
	return t
}
