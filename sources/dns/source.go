// Package dns is a discovery source that turns DNS names into endpoints with
// Envoy's STRICT_DNS and LOGICAL_DNS semantics. See README.md.
package dns

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/xdsbridge/xdsbridge/sources"
)

// DefaultResolvConf is where the system's resolvers are read from when the
// config names none.
const DefaultResolvConf = "/etc/resolv.conf"

// defaultCoalesce is how long the source waits after a change before it
// publishes, so that names changing together make one update.
const defaultCoalesce = 15 * time.Millisecond

// publishRetry is how long the source waits before retrying a Publish that
// failed while the source keeps running.
const publishRetry = time.Second

// Source resolves the configured names and publishes their endpoints. Name,
// ClaimedNames and DebugInfo are safe for concurrent use, also with Run; Run
// must be called at most once at a time.
type Source struct {
	name       string
	cfg        *Config
	log        *slog.Logger
	metrics    *metrics
	services   []*service
	targets    []*target
	resolvConf string
	coalesce   time.Duration

	mu        sync.Mutex // guards the per-target state below and resolvers
	resolvers []string
}

// service is one configured cluster.
type service struct {
	cfg     ServiceConfig
	logical bool
	targets []*target
	// Owned by the scheduler goroutine.
	dirty     bool
	published []sources.Endpoint
}

// target is one configured DNS name of a service: the unit that is scheduled
// and resolved.
type target struct {
	svc  *service
	spec lookupSpec // immutable; read by workers

	// Guarded by Source.mu; written only by the scheduler goroutine.
	done      bool       // first resolution finished (success or failure)
	answer    []hostAddr // last successful answer, de-duplicated, in answer order
	current   *hostAddr  // LOGICAL_DNS: the address in use
	ttl       time.Duration
	interval  time.Duration
	next      time.Time
	lastOK    time.Time
	lastErr   error
	lastErrAt time.Time
	failures  int

	heapIndex int // position in the scheduler heap, -1 when not in it
}

var (
	_ sources.Source        = (*Source)(nil)
	_ sources.StaticClaimer = (*Source)(nil)
	_ sources.Debugger      = (*Source)(nil)
	_ sources.Factory       = New
)

// New builds a DNS source from its config block. It does no I/O and starts
// no goroutines; the system resolvers are read when Run starts.
func New(name string, raw json.RawMessage, env sources.Env) (sources.Source, error) {
	cfg, err := parseConfig(raw)
	if err != nil {
		return nil, err
	}
	log := env.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Source{
		name:       name,
		cfg:        cfg,
		log:        log.With("source", name),
		metrics:    newMetrics(name),
		resolvConf: DefaultResolvConf,
		coalesce:   defaultCoalesce,
	}
	s.build()
	s.metrics.names.Set(float64(len(s.targets)))
	if env.Metrics != nil {
		if err := s.metrics.register(env.Metrics); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (s *Source) build() {
	for _, sc := range s.cfg.Services {
		svc := &service{cfg: sc, logical: sc.Type == TypeLogical}
		for _, h := range sc.Hosts {
			name := strings.TrimSuffix(h.Name, ".")
			t := &target{svc: svc, heapIndex: -1, spec: lookupSpec{
				fqdn: mdns.Fqdn(h.Name), name: name, port: uint32(h.Port),
				family: sc.DNSLookupFamily, srv: sc.SRV,
			}}
			svc.targets = append(svc.targets, t)
			s.targets = append(s.targets, t)
		}
		s.services = append(s.services, svc)
	}
}

// Name returns the configured source name.
func (s *Source) Name() string { return s.name }

// ClaimedNames returns the configured service names.
func (s *Source) ClaimedNames() ([]string, error) {
	out := make([]string, len(s.services))
	for i, svc := range s.services {
		out[i] = svc.cfg.Name
	}
	return out, nil
}

// Run resolves every name continuously and publishes to sink until ctx is
// done. It returns an error only if no resolver can be found.
func (s *Source) Run(ctx context.Context, sink sources.Sink) error {
	servers, err := s.servers()
	if err != nil {
		return err
	}
	s.reset(servers)
	res := &resolver{servers: servers, timeout: s.cfg.Timeout.D(), metrics: s.metrics}

	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	jobs := make(chan *target)
	results := make(chan result)
	for range min(s.cfg.MaxConcurrency, len(s.targets)) {
		wg.Go(func() { worker(ctx, res, jobs, results) })
	}
	sch := newScheduler(s, sink, jobs, results)
	return sch.loop(ctx)
}

// reset starts a run afresh: every name is resolved again before the first
// publish, which is sent whatever was published by an earlier run.
func (s *Source) reset(servers []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resolvers = servers
	for _, t := range s.targets {
		t.done, t.heapIndex = false, -1
	}
	for _, svc := range s.services {
		svc.dirty, svc.published = true, nil
	}
}

// servers returns the configured resolvers or those of resolv.conf.
func (s *Source) servers() ([]string, error) {
	if len(s.cfg.Resolvers) > 0 {
		out := make([]string, len(s.cfg.Resolvers))
		for i, r := range s.cfg.Resolvers {
			out[i], _ = resolverAddr(r) // validated by New
		}
		return out, nil
	}
	cc, err := mdns.ClientConfigFromFile(s.resolvConf)
	if err != nil {
		return nil, fmt.Errorf("reading system resolvers: %w", err)
	}
	var out []string
	for _, srv := range cc.Servers {
		if a, err := netip.ParseAddr(srv); err == nil {
			out = append(out, net.JoinHostPort(a.String(), cc.Port))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("reading system resolvers: no nameserver in %s", s.resolvConf)
	}
	return out, nil
}

// result is the outcome of one resolution.
type result struct {
	t     *target
	addrs []hostAddr
	err   error
	at    time.Time
}

// worker resolves the targets it receives until ctx is done.
func worker(ctx context.Context, res *resolver, jobs <-chan *target, results chan<- result) {
	for {
		select {
		case <-ctx.Done():
			return
		case t := <-jobs:
			addrs, err := res.resolve(ctx, t.spec)
			if ctx.Err() != nil {
				return
			}
			select {
			case results <- result{t: t, addrs: addrs, err: err, at: time.Now()}:
			case <-ctx.Done():
				return
			}
		}
	}
}

// apply records a resolution result on its target and returns whether the
// target's contribution to its service changed. Called by the scheduler.
func (s *Source) apply(r result) (changed bool) {
	t, sc := r.t, r.t.svc.cfg
	s.mu.Lock()
	defer s.mu.Unlock()
	t.done = true
	if r.err != nil {
		t.failures++
		t.lastErr, t.lastErrAt = r.err, r.at
		t.interval = sc.DNSFailureRefreshRate.D()
	} else {
		t.failures, t.lastErr, t.lastOK = 0, nil, r.at
		if t.svc.logical {
			changed = t.applyLogical(r.addrs)
		} else {
			changed = t.applyStrict(r.addrs)
		}
		t.ttl, t.interval = refreshInterval(sc, t.svc.logical, r.addrs)
	}
	t.next = r.at.Add(t.interval + jitter(sc, t.interval))
	return changed
}

// applyStrict replaces the answer; it changed if the set of address:port
// pairs differs (order and TTLs do not matter).
func (t *target) applyStrict(addrs []hostAddr) bool {
	old := t.answer
	t.answer = addrs
	a, b := slices.Clone(old), slices.Clone(addrs)
	sortAddrs(a)
	sortAddrs(b)
	return !slices.EqualFunc(a, b, func(x, y hostAddr) bool {
		return x.key() == y.key() && x.Hostname == y.Hostname && x.Weight == y.Weight && x.Priority == y.Priority
	})
}

// applyLogical keeps the current address while it is still in the answer,
// else takes the answer's first; an empty answer keeps the current one.
func (t *target) applyLogical(addrs []hostAddr) bool {
	t.answer = addrs
	if t.current != nil {
		for _, a := range addrs {
			if a.key() == t.current.key() {
				return false
			}
		}
	}
	if len(addrs) == 0 {
		return false
	}
	first := addrs[0]
	t.current = &first
	return true
}

// refreshInterval returns the TTL that applies to an answer and the interval
// until the next resolution, by Envoy's rules: without respect_dns_ttl the
// refresh rate; with it the minimum TTL of all records (strict) or the first
// record's TTL (logical), a TTL of 0 or an empty answer meaning the refresh rate.
func refreshInterval(sc ServiceConfig, logical bool, addrs []hostAddr) (ttl, interval time.Duration) {
	if len(addrs) > 0 {
		t := addrs[0].TTL
		if !logical {
			for _, a := range addrs {
				t = min(t, a.TTL)
			}
		}
		ttl = time.Duration(t) * time.Second
	}
	if sc.RespectDNSTTL && ttl > 0 {
		return ttl, ttl
	}
	return ttl, sc.DNSRefreshRate.D()
}

// jitter returns a random delay in [0, dns_jitter), dns_jitter defaulting to
// a tenth of the interval, so that names do not refresh in lockstep.
func jitter(sc ServiceConfig, interval time.Duration) time.Duration {
	j := interval / 10
	if sc.DNSJitter != nil {
		j = sc.DNSJitter.D()
	}
	if j <= 0 {
		return 0
	}
	return rand.N(j)
}

// endpoints computes the service's endpoints from its targets' answers,
// in normal form (sources.Normalize: a host two targets resolve to is
// listed once). Called with s.mu held or by the scheduler (the only writer).
func (svc *service) endpoints() []sources.Endpoint {
	var out []sources.Endpoint
	if svc.logical {
		if c := svc.targets[0].current; c != nil {
			out = append(out, endpoint(*c))
		}
		return out
	}
	for _, t := range svc.targets {
		for _, a := range t.answer {
			out = append(out, endpoint(a))
		}
	}
	return sources.Normalize(out)
}

func endpoint(a hostAddr) sources.Endpoint {
	return sources.Endpoint{
		Address:  a.IP.String(),
		Port:     a.Port,
		Hostname: a.Hostname,
		Weight:   a.Weight,
		Priority: a.Priority,
		Health:   sources.HealthUnknown,
	}
}

func sameEndpoints(a, b []sources.Endpoint) bool {
	return slices.EqualFunc(a, b, func(x, y sources.Endpoint) bool {
		return x.Key() == y.Key() && x.Hostname == y.Hostname && x.Weight == y.Weight &&
			x.Priority == y.Priority && x.Health == y.Health && x.Locality == y.Locality
	})
}
