// Package hds serves Envoy's Health Discovery Service
// (envoy.service.health.v3): Envoys whose bootstrap names the bridge in
// hds_config become health checkers. The server assigns each target (an
// address:port and its check, as healthcheck.Target) to k connected
// checkers able to run its check, spread over their localities, by
// rendezvous hashing (assign.go); reads their EndpointHealthResponses; and
// merges the checkers' reports of a target by a rule (majority, any, all)
// into one verdict, delivered as healthcheck.Transitions, as the local
// checker delivers its own.
//
// A checker whose stream ends, or that sends no report for Options.Silence,
// loses its targets to the other checkers at once. Targets no connected
// checker can take are listed by Unassigned, for the caller to check
// itself or leave to discovery health.
package hds

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	healthv3 "github.com/envoyproxy/go-control-plane/envoy/service/health/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/xdsbridge/xdsbridge/healthcheck"
	promreg "github.com/xdsbridge/xdsbridge/internal/metrics"
	"github.com/xdsbridge/xdsbridge/sources"
)

// Merge rules (Options.Rule): how the reports of a target's checkers make
// one verdict.
const (
	// RuleMajority: a verdict needs more than half of the reporting
	// checkers; a tie keeps the verdict as it was. One checker that cannot
	// reach anyone does not take endpoints away.
	RuleMajority = "majority"
	// RuleAny: one checker reporting a target unhealthy makes it unhealthy.
	RuleAny = "any"
	// RuleAll: a target is unhealthy only when every reporting checker says
	// so.
	RuleAll = "all"
)

// Defaults.
const (
	DefaultK              = 2
	DefaultReportInterval = 5 * time.Second
)

// Options configure a Server.
type Options struct {
	// K is how many checkers probe each target (default DefaultK).
	K int
	// Rule merges the checkers' reports (default RuleMajority).
	Rule string
	// ReportInterval is how often checkers report (the specifier's
	// interval; default DefaultReportInterval).
	ReportInterval time.Duration
	// Silence: a checker that sends no report for this long loses its
	// targets to others (default 3 × ReportInterval). A target's checker
	// therefore changes within Silence + ReportInterval of the checker
	// going quiet, and at once when its stream ends.
	Silence time.Duration
	// Logger (default slog.Default()); Metrics, if not nil, gets the
	// collectors.
	Logger  *slog.Logger
	Metrics prometheus.Registerer
}

// CheckerReport is what one checker last said of a target.
type CheckerReport struct {
	Checker string              `json:"checker"`
	Node    string              `json:"node"`
	Verdict healthcheck.Verdict `json:"verdict"`
	At      time.Time           `json:"at,omitzero"`
	// Counted is false while the report is ignored: the checker was
	// assigned the target too recently to have probed it (Envoy reports
	// hosts it has not checked yet as unhealthy).
	Counted bool `json:"counted"`
}

// TargetState is what HDS knows of a target, for /debug/hosts.
type TargetState struct {
	Verdict  healthcheck.Verdict `json:"verdict"`
	Checkers []CheckerReport     `json:"checkers"`
	// Summary says which checker said what, in one line: "checker-1
	// healthy, checker-4 unhealthy (not counted)", "no checker".
	Summary string `json:"summary"`
}

type checker struct {
	id       string // unique per stream
	node     string
	locality string
	protos   map[string]bool // healthcheck types it can run
	stream   healthv3.HealthDiscoveryService_StreamHealthCheckServer

	// Guarded by Server.mu.
	lastReport time.Time
	silent     bool
	targets    map[*target]bool
	pending    *healthv3.HealthCheckSpecifier // to send; nil: nothing new
	sent       bool                           // a specifier was queued
	wake       chan struct{}
}

type report struct {
	verdict   healthcheck.Verdict
	at        time.Time
	confirmed bool // a healthy report since the assignment
}

type target struct {
	t        healthcheck.Target
	key      healthcheck.TargetKey
	hash     uint64 // of key, for the assignment
	ep       string // address:port as in reports
	cluster  string
	grace    time.Duration
	checkers []string
	assigned map[string]time.Time
	reports  map[string]*report
	verdict  healthcheck.Verdict
	seen     healthcheck.Verdict
}

// Server is the HDS server. Its methods are safe for concurrent use.
type Server struct {
	healthv3.UnimplementedHealthDiscoveryServiceServer

	opts Options
	log  *slog.Logger
	m    *metrics

	mu       sync.Mutex
	seq      int
	checkers map[string]*checker
	targets  map[healthcheck.TargetKey]*target
	// by cluster name and address:port, for reports.
	byEndpoint map[string]map[string]*target

	pend      map[healthcheck.TargetKey]*healthcheck.Transition
	pendOrder []healthcheck.TargetKey
	pendWake  chan struct{}
	out       chan healthcheck.Transition
	// assigned is signalled when a target gains its first checker or
	// loses its last (Unassigned changed).
	assigned chan struct{}
}

// New returns a server with no targets and no checkers.
func New(opts Options) (*Server, error) {
	if opts.K <= 0 {
		opts.K = DefaultK
	}
	switch opts.Rule {
	case "":
		opts.Rule = RuleMajority
	case RuleMajority, RuleAny, RuleAll:
	default:
		return nil, fmt.Errorf("hds: rule %q is not one of majority, any, all", opts.Rule)
	}
	if opts.ReportInterval <= 0 {
		opts.ReportInterval = DefaultReportInterval
	}
	if opts.Silence <= 0 {
		opts.Silence = 3 * opts.ReportInterval
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	m, err := newMetrics(opts.Metrics)
	if err != nil {
		return nil, err
	}
	return &Server{
		opts:       opts,
		log:        opts.Logger,
		m:          m,
		checkers:   map[string]*checker{},
		targets:    map[healthcheck.TargetKey]*target{},
		byEndpoint: map[string]map[string]*target{},
		pend:       map[healthcheck.TargetKey]*healthcheck.Transition{},
		pendWake:   make(chan struct{}, 1),
		out:        make(chan healthcheck.Transition),
		assigned:   make(chan struct{}, 1),
	}, nil
}

// Register registers the service on a gRPC server (the xDS server's).
func (s *Server) Register(g grpc.ServiceRegistrar) {
	healthv3.RegisterHealthDiscoveryServiceServer(g, s)
}

// Transitions delivers verdict changes while Run runs, coalesced per target
// as healthcheck.Checker.Transitions does.
func (s *Server) Transitions() <-chan healthcheck.Transition { return s.out }

// SetTargets replaces the targets HDS checks. Targets that stay keep their
// checkers and reports.
func (s *Server) SetTargets(ts []healthcheck.Target) {
	s.mu.Lock()
	defer s.mu.Unlock()
	want := make(map[healthcheck.TargetKey]healthcheck.Target, len(ts))
	for _, t := range ts {
		t.Check = t.Check.Normalize()
		want[t.Key()] = t
	}
	for k, t := range s.targets {
		if _, ok := want[k]; !ok {
			delete(s.targets, k)
			delete(s.pend, k)
			delete(s.byEndpoint[t.cluster], t.ep)
			if len(s.byEndpoint[t.cluster]) == 0 {
				delete(s.byEndpoint, t.cluster)
			}
		}
	}
	for k, w := range want {
		if _, ok := s.targets[k]; ok {
			continue
		}
		c := w.Check
		t := &target{
			t: w, key: k, hash: hashString(k.String()), ep: endpointString(endpointOf(w.Host)), cluster: clusterName(k.Check),
			// Envoy reports a host it has not checked yet as unhealthy: a
			// checker's unhealthy reports count only once it has had time
			// to probe (or after a healthy one).
			grace:    time.Duration(c.UnhealthyThreshold)*(c.Interval.D()+c.Timeout.D()) + c.Jitter.D() + s.opts.ReportInterval,
			assigned: map[string]time.Time{},
			reports:  map[string]*report{},
		}
		s.targets[k] = t
		if s.byEndpoint[t.cluster] == nil {
			s.byEndpoint[t.cluster] = map[string]*target{}
		}
		s.byEndpoint[t.cluster][t.ep] = t
	}
	s.reassign(time.Now())
}

// Assigned is signalled (without blocking: one signal may stand for
// several) when a target gains its first checker or loses its last, that
// is when Unassigned may have changed.
func (s *Server) Assigned() <-chan struct{} { return s.assigned }

// Seed sets the verdict of target k (one of SetTargets), and the verdict
// Delivered returns, without a transition, and drops one pending: a
// target the caller checked itself until now starts from the caller's
// verdict rather than Unknown, so that handing it to the checkers changes
// nothing until they report otherwise.
func (s *Server) Seed(k healthcheck.TargetKey, v healthcheck.Verdict) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.targets[k]
	if t == nil {
		return
	}
	t.verdict, t.seen = v, v
	delete(s.pend, k)
}

// Delivered returns the verdict of the last transition delivered for k
// (or seeded; Unknown before any, or if k is not a target), as
// healthcheck.Checker.Delivered: what a consumer that follows Transitions
// has been told.
func (s *Server) Delivered(k healthcheck.TargetKey) healthcheck.Verdict {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.targets[k]; t != nil {
		return t.seen
	}
	return healthcheck.Unknown
}

// State returns what HDS knows of target k: the merged verdict and what
// each assigned checker last reported.
func (s *Server) State(k healthcheck.TargetKey) (TargetState, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.targets[k]
	if t == nil {
		return TargetState{}, false
	}
	return s.stateOf(t, time.Now()), true
}

// Unassigned returns the targets no connected checker can take (none is
// connected, or none runs the check's protocol).
func (s *Server) Unassigned() []healthcheck.Target {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []healthcheck.Target
	for _, t := range s.targets {
		if len(t.checkers) == 0 {
			out = append(out, t.t)
		}
	}
	return out
}

// Snapshot returns the state of every target: the merged verdict and what
// each assigned checker last reported.
func (s *Server) Snapshot() map[healthcheck.TargetKey]TargetState {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[healthcheck.TargetKey]TargetState, len(s.targets))
	now := time.Now()
	for k, t := range s.targets {
		out[k] = s.stateOf(t, now)
	}
	return out
}

// stateOf is t's state at now. Called with s.mu held.
func (s *Server) stateOf(t *target, now time.Time) TargetState {
	st := TargetState{Verdict: t.verdict, Checkers: []CheckerReport{}}
	for _, id := range t.checkers {
		cr := CheckerReport{Checker: id, Verdict: healthcheck.Unknown}
		if c := s.checkers[id]; c != nil {
			cr.Node = c.node
		}
		if r := t.reports[id]; r != nil {
			cr.Verdict, cr.At, cr.Counted = r.verdict, r.at, t.counts(id, r, now)
		}
		st.Checkers = append(st.Checkers, cr)
	}
	st.Summary = summary(st.Checkers)
	return st
}

// summary is TargetState.Summary.
func summary(crs []CheckerReport) string {
	if len(crs) == 0 {
		return "no checker"
	}
	var b strings.Builder
	for i, cr := range crs {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(cmp.Or(cr.Node, cr.Checker))
		switch {
		case cr.At.IsZero():
			b.WriteString(" no report yet")
		case !cr.Counted:
			b.WriteString(" " + cr.Verdict.String() + " (not counted)")
		default:
			b.WriteString(" " + cr.Verdict.String())
		}
	}
	return b.String()
}

// Run checks for silent checkers and delivers transitions until ctx is
// done.
func (s *Server) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Go(func() { s.deliver(ctx) })
	tick := time.NewTicker(max(min(s.opts.Silence/4, time.Second), 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			return nil
		case now := <-tick.C:
			s.mu.Lock()
			changed := false
			for _, c := range s.checkers {
				// A checker without targets may have nothing to report.
				if !c.silent && len(c.targets) > 0 && now.Sub(c.lastReport) > s.opts.Silence {
					c.silent = true
					changed = true
					s.m.silent.Inc()
					s.log.Warn("hds checker silent: its targets go to others", "checker", c.id, "node", c.node, "silence", s.opts.Silence)
				}
			}
			if changed {
				s.reassign(now)
			}
			s.mu.Unlock()
		}
	}
}

// StreamHealthCheck serves one checker.
func (s *Server) StreamHealthCheck(stream healthv3.HealthDiscoveryService_StreamHealthCheckServer) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	req := first.GetHealthCheckRequest()
	if req == nil {
		return errors.New("hds: the first message must be a HealthCheckRequest")
	}
	c := &checker{
		node:     req.GetNode().GetId(),
		locality: localityString(req.GetNode().GetLocality()),
		protos:   map[string]bool{},
		stream:   stream,
		targets:  map[*target]bool{},
		wake:     make(chan struct{}, 1),
	}
	for _, p := range req.GetCapability().GetHealthCheckProtocols() {
		switch p {
		case healthv3.Capability_HTTP:
			c.protos[healthcheck.TypeHTTP] = true
		case healthv3.Capability_TCP:
			c.protos[healthcheck.TypeTCP] = true
		}
	}
	s.mu.Lock()
	s.seq++
	c.id = c.node + "#" + strconv.Itoa(s.seq)
	c.lastReport = time.Now()
	s.checkers[c.id] = c
	s.m.checkers.Inc()
	s.reassign(time.Now())
	s.mu.Unlock()
	s.log.Info("hds checker connected", "checker", c.id, "locality", c.locality, "protocols", req.GetCapability().GetHealthCheckProtocols())
	defer func() {
		s.mu.Lock()
		delete(s.checkers, c.id)
		s.m.checkers.Dec()
		s.reassign(time.Now())
		s.mu.Unlock()
		s.log.Info("hds checker disconnected", "checker", c.id)
	}()

	ctx := stream.Context()
	recvErr := make(chan error, 1)
	go func() {
		for {
			msg, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			if r := msg.GetEndpointHealthResponse(); r != nil {
				s.report(c, r)
			}
		}
	}()
	for {
		s.mu.Lock()
		spec := c.pending
		c.pending = nil
		s.mu.Unlock()
		if spec != nil {
			if err := stream.Send(spec); err != nil {
				return err
			}
		}
		select {
		case <-c.wake:
		case err := <-recvErr:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// reassign recomputes every target's checkers and queues a specifier for
// each checker whose set changed. Called with s.mu held.
func (s *Server) reassign(now time.Time) {
	live := make(map[string][]candidate, 2)
	for _, c := range s.checkers {
		if c.silent {
			continue
		}
		for p := range c.protos {
			live[p] = append(live[p], newCandidate(c.id, c.locality))
		}
	}
	next := make(map[string]map[*target]bool, len(s.checkers))
	for _, c := range s.checkers {
		next[c.id] = make(map[*target]bool, len(c.targets))
	}
	pairs := 0
	flipped := false
	for _, t := range s.targets {
		ids := assign(t.hash, live[t.t.Check.Type], s.opts.K)
		flipped = flipped || (len(ids) == 0) != (len(t.checkers) == 0)
		for _, id := range ids {
			next[id][t] = true
			if _, ok := t.assigned[id]; !ok {
				t.assigned[id] = now
				delete(t.reports, id)
				s.m.assignments.Inc()
			}
		}
		for id := range t.assigned {
			if !slices.Contains(ids, id) {
				delete(t.assigned, id)
				delete(t.reports, id)
			}
		}
		t.checkers = ids
		pairs += len(ids)
		s.merge(t)
	}
	s.m.pairs.Set(float64(pairs))
	if flipped {
		select {
		case s.assigned <- struct{}{}:
		default:
		}
	}
	for id, c := range s.checkers {
		if c.sent && maps.Equal(c.targets, next[id]) {
			continue
		}
		if len(c.targets) == 0 && len(next[id]) > 0 {
			c.lastReport = now // its silence counts from its first targets
		}
		c.targets = next[id]
		c.pending = s.specifier(c)
		c.sent = true
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
}

// specifier is the HealthCheckSpecifier of c's targets: one cluster per
// check, named after it. Called with s.mu held.
func (s *Server) specifier(c *checker) *healthv3.HealthCheckSpecifier {
	ts := make([]*target, 0, len(c.targets))
	for t := range c.targets {
		ts = append(ts, t)
	}
	slices.SortFunc(ts, func(a, b *target) int {
		return cmp.Or(cmp.Compare(a.cluster, b.cluster), cmp.Compare(a.ep, b.ep))
	})
	spec := &healthv3.HealthCheckSpecifier{Interval: durationpb.New(s.opts.ReportInterval)}
	var le *healthv3.LocalityEndpoints
	for i, t := range ts {
		if i == 0 || t.cluster != ts[i-1].cluster {
			le = &healthv3.LocalityEndpoints{}
			spec.ClusterHealthChecks = append(spec.ClusterHealthChecks, &healthv3.ClusterHealthCheck{
				ClusterName:       t.cluster,
				HealthChecks:      []*corev3.HealthCheck{envoyCheck(t.t.Check)},
				LocalityEndpoints: []*healthv3.LocalityEndpoints{le},
			})
		}
		le.Endpoints = append(le.Endpoints, endpointOf(t.t.Host))
	}
	return spec
}

// envoyCheck is the Envoy form of a check. The no-traffic intervals are
// the interval: HDS clusters carry no traffic, and Envoy would otherwise
// probe them once a minute.
func envoyCheck(c healthcheck.Config) *corev3.HealthCheck {
	iv := durationpb.New(c.Interval.D())
	hc := &corev3.HealthCheck{
		Timeout:                  durationpb.New(c.Timeout.D()),
		Interval:                 iv,
		NoTrafficInterval:        iv,
		NoTrafficHealthyInterval: iv,
		UnhealthyThreshold:       wrapperspb.UInt32(c.UnhealthyThreshold),
		HealthyThreshold:         wrapperspb.UInt32(c.HealthyThreshold),
		ReuseConnection:          wrapperspb.Bool(c.ReuseConnection == nil || *c.ReuseConnection),
	}
	if c.Jitter > 0 {
		hc.IntervalJitter = durationpb.New(c.Jitter.D())
	}
	switch c.Type {
	case healthcheck.TypeTCP:
		hc.HealthChecker = &corev3.HealthCheck_TcpHealthCheck_{TcpHealthCheck: &corev3.HealthCheck_TcpHealthCheck{}}
	case healthcheck.TypeHTTP:
		h := &corev3.HealthCheck_HttpHealthCheck{Path: c.HTTP.Path, Host: c.HTTP.Host}
		for _, r := range c.HTTP.ExpectedStatuses {
			h.ExpectedStatuses = append(h.ExpectedStatuses, &typev3.Int64Range{Start: r.Start, End: r.End})
		}
		hc.HealthChecker = &corev3.HealthCheck_HttpHealthCheck_{HttpHealthCheck: h}
	}
	return hc
}

// report applies one EndpointHealthResponse of c.
func (s *Server) report(c *checker, r *healthv3.EndpointHealthResponse) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	c.lastReport = now
	s.m.reports.Inc()
	if c.silent {
		c.silent = false
		s.log.Info("hds checker reports again", "checker", c.id)
		s.reassign(now)
	}
	var buf []byte
	for _, ch := range r.GetClusterEndpointsHealth() {
		eps := s.byEndpoint[ch.GetClusterName()]
		for _, le := range ch.GetLocalityEndpointsHealth() {
			for _, eh := range le.GetEndpointsHealth() {
				buf = appendEndpoint(buf[:0], eh.GetEndpoint())
				t := eps[string(buf)]
				if t == nil {
					continue
				}
				if _, ok := t.assigned[c.id]; !ok {
					continue // a report from before a reassignment
				}
				v := healthcheck.Unknown
				switch eh.GetHealthStatus() {
				case corev3.HealthStatus_HEALTHY:
					v = healthcheck.Healthy
				case corev3.HealthStatus_UNHEALTHY, corev3.HealthStatus_TIMEOUT:
					v = healthcheck.Unhealthy
				}
				rep := t.reports[c.id]
				if rep == nil {
					rep = &report{}
					t.reports[c.id] = rep
				}
				rep.verdict, rep.at = v, now
				if v == healthcheck.Healthy {
					rep.confirmed = true
				}
				s.merge(t)
			}
		}
	}
}

// counts reports whether checker id's report r counts in the merge.
func (t *target) counts(id string, r *report, now time.Time) bool {
	switch r.verdict {
	case healthcheck.Healthy:
		return true
	case healthcheck.Unhealthy:
		return r.confirmed || now.Sub(t.assigned[id]) >= t.grace
	}
	return false
}

// merge recomputes t's verdict from its checkers' reports and queues a
// transition if it changed. Called with s.mu held.
func (s *Server) merge(t *target) {
	now := time.Now()
	var healthy, unhealthy int
	for _, id := range t.checkers {
		r := t.reports[id]
		if r == nil || !t.counts(id, r, now) {
			continue
		}
		if r.verdict == healthcheck.Healthy {
			healthy++
		} else {
			unhealthy++
		}
	}
	if healthy > 0 && unhealthy > 0 {
		s.m.disagreements.Inc()
	}
	n := healthy + unhealthy
	v := t.verdict
	switch s.opts.Rule {
	case RuleMajority:
		if 2*unhealthy > n {
			v = healthcheck.Unhealthy
		} else if 2*healthy > n {
			v = healthcheck.Healthy
		}
	case RuleAny:
		if unhealthy > 0 {
			v = healthcheck.Unhealthy
		} else if healthy > 0 {
			v = healthcheck.Healthy
		}
	case RuleAll:
		if n > 0 && unhealthy == n {
			v = healthcheck.Unhealthy
		} else if healthy > 0 {
			v = healthcheck.Healthy
		}
	}
	if v == t.verdict {
		return
	}
	t.verdict = v
	if p, ok := s.pend[t.key]; ok {
		p.Verdict = v
	} else {
		s.pend[t.key] = &healthcheck.Transition{Key: t.key, Previous: t.seen, Verdict: v}
		s.pendOrder = append(s.pendOrder, t.key)
	}
	select {
	case s.pendWake <- struct{}{}:
	default:
	}
}

func (s *Server) nextPending() (healthcheck.Transition, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.pendOrder) > 0 {
		k := s.pendOrder[0]
		s.pendOrder = s.pendOrder[1:]
		p, ok := s.pend[k]
		if !ok {
			continue
		}
		delete(s.pend, k)
		if p.Previous == p.Verdict {
			continue
		}
		if t := s.targets[k]; t != nil {
			t.seen = p.Verdict
		}
		return *p, true
	}
	s.pendOrder = nil
	return healthcheck.Transition{}, false
}

func (s *Server) deliver(ctx context.Context) {
	for {
		tr, ok := s.nextPending()
		if !ok {
			select {
			case <-s.pendWake:
				continue
			case <-ctx.Done():
				return
			}
		}
		select {
		case s.out <- tr:
		case <-ctx.Done():
			return
		}
	}
}

// clusterName names the HDS cluster of a check: its canonical form hashed.
func clusterName(check string) string {
	return fmt.Sprintf("xdsbridge-hds-%016x", mix(hashString(check)))
}

func endpointOf(h sources.HostKey) *endpointv3.Endpoint {
	return &endpointv3.Endpoint{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address:       h.Address,
		PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: h.Port},
	}}}}
}

// endpointString is the address:port by which reports name an endpoint.
func endpointString(e *endpointv3.Endpoint) string { return string(appendEndpoint(nil, e)) }

// appendEndpoint appends e's address:port (an IPv6 address in brackets).
func appendEndpoint(b []byte, e *endpointv3.Endpoint) []byte {
	sa := e.GetAddress().GetSocketAddress()
	a := sa.GetAddress()
	if strings.IndexByte(a, ':') >= 0 {
		b = append(append(append(b, '['), a...), ']')
	} else {
		b = append(b, a...)
	}
	b = append(b, ':')
	return strconv.AppendUint(b, uint64(sa.GetPortValue()), 10)
}

func localityString(l *corev3.Locality) string {
	if l.GetRegion() == "" && l.GetZone() == "" && l.GetSubZone() == "" {
		return ""
	}
	return l.GetRegion() + "/" + l.GetZone() + "/" + l.GetSubZone()
}

type metrics struct {
	checkers, pairs                             prometheus.Gauge
	assignments, reports, disagreements, silent prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		checkers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "xdsbridge_hds_checkers", Help: "HDS checkers (Envoys) connected.",
		}),
		pairs: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "xdsbridge_hds_assigned_pairs", Help: "Target × checker assignments in force.",
		}),
		assignments: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "xdsbridge_hds_assignments_total", Help: "Targets assigned to an HDS checker (initial assignments and moves).",
		}),
		reports: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "xdsbridge_hds_reports_total", Help: "EndpointHealthResponses received from HDS checkers.",
		}),
		disagreements: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "xdsbridge_hds_disagreements_total", Help: "Merges of a target's reports in which its checkers disagreed.",
		}),
		silent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "xdsbridge_hds_silent_checkers_total", Help: "HDS checkers that stopped reporting and lost their targets.",
		}),
	}
	return m, promreg.Register(reg, m.checkers, m.pairs, m.assignments, m.reports, m.disagreements, m.silent)
}

// Detail is State for healthcheck.Manager (a healthcheck.Remote).
func (s *Server) Detail(k healthcheck.TargetKey) (any, bool) {
	st, ok := s.State(k)
	return st, ok
}

var _ healthcheck.Remote = (*Server)(nil)
