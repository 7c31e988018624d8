package app

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xdsbridge/xdsbridge/sources"
)

// A running source instance. The instances of one configured name share a
// gate: one is active and reaches the loop; a replacement (a reload changed
// the source's config) is pending until its first complete publish (not
// sources.Update.Incomplete), which retires
// the one it replaces in the same step, so the loop keeps the old
// instance's last state until the new one's first replaces it, and never
// sees the two interleaved.
type sourceInstance struct {
	src     sources.Source
	metrics *sourceMetrics
	gate    *sourceGate
	state   instanceState // under gate.mu
	// initial: started with the app; an unrecoverable error of its Run
	// stops the app. One started by a reload only logs it.
	initial bool
	cancel  context.CancelFunc
	// dropped is what a pending instance last reported dropped
	// (hasDropped), passed on when it takes over.
	dropped    []sources.Dropped
	hasDropped bool
}

type instanceState int

const (
	instActive instanceState = iota
	instPending
	instRetired
)

type sourceGate struct {
	mu     sync.Mutex
	active *sourceInstance
	// pending is the replacement not yet synced, if any: only the latest
	// reload's.
	pending *sourceInstance
}

// sourceMetrics registers one source instance's collectors on the app's
// registry and remembers them, so that they go when the instance does. A
// replacement's are held back (deferred) until it takes over: the two
// instances' collectors have the same names and labels.
type sourceMetrics struct {
	reg      prometheus.Registerer
	mu       sync.Mutex
	deferred bool
	cs       []prometheus.Collector
}

func (m *sourceMetrics) Register(c prometheus.Collector) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.deferred {
		if err := m.reg.Register(c); err != nil {
			return err
		}
	}
	m.cs = append(m.cs, c)
	return nil
}

func (m *sourceMetrics) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := m.Register(c); err != nil {
			panic(err)
		}
	}
}

func (m *sourceMetrics) Unregister(c prometheus.Collector) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := len(m.cs)
	m.cs = slices.DeleteFunc(m.cs, func(x prometheus.Collector) bool { return x == c })
	if m.deferred {
		return len(m.cs) < n // held back: the registry's are another instance's
	}
	return m.reg.Unregister(c)
}

// unregisterAll removes the instance's collectors from the registry (none
// if they were held back: the registry's collectors of the same names are
// another instance's).
func (m *sourceMetrics) unregisterAll() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.deferred {
		return
	}
	for _, c := range m.cs {
		m.reg.Unregister(c)
	}
}

// registerDeferred registers the collectors held back; the first error
// is returned (the others are still tried).
func (m *sourceMetrics) registerDeferred() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.deferred {
		return nil
	}
	m.deferred = false
	var first error
	for _, c := range m.cs {
		if err := m.reg.Register(c); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// gatedSink is a source instance's sink: the loop, behind its gate.
type gatedSink struct {
	a    *App
	inst *sourceInstance
}

// admit reports whether the instance may reach the loop (gate.mu held):
// the active one may; a pending one takes over, retiring the one it
// replaces (tookOver); a retired one may not.
func (s gatedSink) admit() (ok, tookOver bool) {
	g := s.inst.gate
	switch s.inst.state {
	case instActive:
		return true, false
	case instPending:
		old := g.active
		g.active, g.pending, s.inst.state = s.inst, nil, instActive
		if old != nil {
			old.state = instRetired
			s.a.retire(old, s.inst)
		}
		return true, true
	}
	return false, false
}

// publish passes one publish of the instance to the loop, if admitted,
// then, when it took over, what it reported dropped while pending.
func (s gatedSink) publish(ctx context.Context, source string, send func() error) error {
	s.inst.gate.mu.Lock()
	defer s.inst.gate.mu.Unlock()
	ok, tookOver := s.admit()
	if !ok {
		return nil
	}
	if err := send(); err != nil {
		return err
	}
	if tookOver && s.inst.hasDropped {
		s.a.Loop.ReportDropped(ctx, source, s.inst.dropped)
		s.inst.dropped, s.inst.hasDropped = nil, false
	}
	return nil
}

func (s gatedSink) Publish(ctx context.Context, u sources.Update) error {
	if u.Incomplete && s.pending() {
		// A part of the replacement's registry is failing: what it has
		// for that part may be nothing. The instance serving stays; the
		// replacement's complete publish, when the part answers, takes
		// over.
		return nil
	}
	return s.publish(ctx, u.Source, func() error { return s.a.Loop.Publish(ctx, u) })
}

// pending reports whether the instance is a replacement not yet active.
func (s gatedSink) pending() bool {
	s.inst.gate.mu.Lock()
	defer s.inst.gate.mu.Unlock()
	return s.inst.state == instPending
}

func (s gatedSink) PublishPolicy(ctx context.Context, u sources.PolicyUpdate) error {
	return s.publish(ctx, u.Source, func() error { return s.a.Loop.PublishPolicy(ctx, u) })
}

// Confirm implements sources.Confirmer for the active instance (a pending
// one's state is not served yet).
func (s gatedSink) Confirm(ctx context.Context, source string, at time.Time) {
	s.inst.gate.mu.Lock()
	defer s.inst.gate.mu.Unlock()
	if s.inst.state == instActive {
		s.a.Loop.Confirm(ctx, source, at)
	}
}

// ReportDropped implements sources.DropReporter: the active instance's
// reports go to the loop; a pending one's last is kept until it takes
// over.
func (s gatedSink) ReportDropped(ctx context.Context, source string, dropped []sources.Dropped) {
	s.inst.gate.mu.Lock()
	defer s.inst.gate.mu.Unlock()
	switch s.inst.state {
	case instActive:
		s.a.Loop.ReportDropped(ctx, source, dropped)
	case instPending:
		s.inst.dropped, s.inst.hasDropped = dropped, true
	}
}

// Fail reports the failures of the active instance and of a pending
// replacement (its new config does not work: the old instance's state
// stays served), not those of a retired one.
func (s gatedSink) Fail(ctx context.Context, source string, err error) {
	// Held while the failure is handed over, as Confirm does: a
	// replacement taking over in between would otherwise be marked stale
	// with the instance it replaced's error.
	s.inst.gate.mu.Lock()
	defer s.inst.gate.mu.Unlock()
	switch s.inst.state {
	case instActive:
		s.a.Loop.Fail(ctx, source, err)
	case instPending:
		s.a.Loop.Fail(ctx, source, fmt.Errorf("the source as reloaded has not synced (the previous config's state stays served): %w", err))
	}
}

var (
	_ sources.Sink         = gatedSink{}
	_ sources.Confirmer    = gatedSink{}
	_ sources.DropReporter = gatedSink{}
)

// runningSources is the source instances of a running app.
type runningSources struct {
	mu      sync.Mutex
	ctx     context.Context // nil until Run; the instances' parent
	stopped bool            // set once Run stops them: start nothing more
	wg      sync.WaitGroup
	errs    chan error // an initial instance's unrecoverable error
	// byName: the gate of each configured source; order: config order.
	byName map[string]*sourceGate
	order  []string
	// metrics of the instances built before Run, by name.
	built map[string]*sourceMetrics
}

// start runs an instance under the app's context. A pending instance
// shares the gate of the one it replaces.
func (a *App) start(inst *sourceInstance) {
	rs := &a.running
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.stopped {
		return
	}
	ctx, cancel := context.WithCancel(rs.ctx)
	inst.cancel = cancel
	rs.wg.Add(1)
	go func() {
		defer rs.wg.Done()
		err := inst.src.Run(ctx, gatedSink{a, inst})
		if err == nil || ctx.Err() != nil {
			return
		}
		err = fmt.Errorf("source %s: %w", inst.src.Name(), err)
		if inst.initial {
			select {
			case rs.errs <- err:
			default:
			}
			return
		}
		a.Log.Error("a source started by a config reload stopped; the state it or its predecessor last published stays served", "source", inst.src.Name(), "error", err)
		a.Loop.Fail(ctx, inst.src.Name(), err)
	}()
}

// retire stops an instance that was replaced (next, nil when removed)
// and moves the metrics over. It does not wait: the instance's state is
// retired already, so nothing it still does reaches the loop, and its
// goroutine ends with its context (Run waits for it).
func (a *App) retire(old, next *sourceInstance) {
	old.cancel()
	old.metrics.unregisterAll()
	if next != nil {
		if err := next.metrics.registerDeferred(); err != nil {
			a.Log.Warn("metrics of a reloaded source", "source", next.src.Name(), "error", err)
		}
		a.Log.Info("source replaced by its reloaded config", "source", next.src.Name())
	}
}

// runSources starts the sources built by New and returns once they all
// stopped: ctx done, or an initial source's unrecoverable error (returned).
func (a *App) runSources(ctx context.Context) error {
	rs := &a.running
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rs.mu.Lock()
	rs.ctx = ctx
	rs.errs = make(chan error, 1)
	rs.byName = map[string]*sourceGate{}
	rs.order = nil
	var insts []*sourceInstance
	for _, s := range a.Sources {
		inst := &sourceInstance{src: s, metrics: rs.built[s.Name()], initial: true}
		if inst.metrics == nil {
			inst.metrics = &sourceMetrics{reg: prometheus.NewRegistry()}
		}
		inst.gate = &sourceGate{active: inst}
		rs.byName[s.Name()] = inst.gate
		rs.order = append(rs.order, s.Name())
		insts = append(insts, inst)
	}
	rs.mu.Unlock()
	for _, inst := range insts {
		a.start(inst)
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-rs.errs:
	}
	cancel()
	rs.mu.Lock()
	rs.stopped = true
	rs.mu.Unlock()
	rs.wg.Wait()
	return err
}

// activeSources is the active instance of each configured source, in
// config order.
func (a *App) activeSources() []sources.Source {
	rs := &a.running
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.byName == nil {
		return a.Sources
	}
	out := make([]sources.Source, 0, len(rs.order))
	for _, n := range rs.order {
		g := rs.byName[n]
		g.mu.Lock()
		out = append(out, g.active.src)
		g.mu.Unlock()
	}
	return out
}
