// Package consul is the Consul catalog source: it watches the service list
// and the health of each selected service with blocking queries, in one or
// more datacenters, and publishes their instances as endpoints. When Consul
// cannot be read it reports the error and keeps the last endpoints ("fail
// static"). README.md documents the configuration and the mapping rules.
package consul

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/xdsbridge/xdsbridge/sources"
)

// Source watches a Consul catalog. Run may be called once; Name and
// DebugInfo are safe for concurrent use with it.
type Source struct {
	name    string
	set     *settings
	log     *slog.Logger
	metrics *metrics
	mapper  *mapper

	// Test hooks, set before Run: wrap the HTTP round tripper, wrap dialed
	// connections.
	wrapRoundTripper func(http.RoundTripper) http.RoundTripper
	wrapConn         func(net.Conn) net.Conn

	changed chan struct{} // capacity 1: "state changed, flush soon"
	// entriesAt: when config entries first changed since the last flush
	// (UnixNano; 0: they did not). Their changes wait the whole
	// coalescing window from then (no leading edge, and not cut short by
	// a window a service change started): one edit of several entries
	// comes in as several reads.
	entriesAt atomic.Int64

	mu          sync.Mutex
	dcs         []*dcState // local first, then failover order
	tlsLogged   string     // the TLS problem last logged at ERROR, and when
	tlsLoggedAt time.Time
	pendingErrs []string
	errsDropped int
	published   time.Time
	staleSince  time.Time // when the first watch failed; zero while none is failing
	ce          *ceState  // nil without config_entries

	live atomic.Pointer[liveness] // set by Run

	// The last snapshot, by cluster name, and its sorted names
	// (snapshotLocked); genSeq numbers the changes of service states.
	clusters     map[string]*clusterCache
	clusterNames []string
	genSeq       uint64
	// dropped is the sorted list of the instances every state drops,
	// built again only when one state's changed (droppedFresh false).
	dropped      []sources.Dropped
	droppedFresh bool
	// touched are the states changed since the last snapshot
	// (touchLocked); touchAll: every state is to be walked again.
	touched  map[stateKey]bool
	touchAll bool
	// snap is the list last returned by snapshotLocked, in clusterNames
	// order; it is published, so never modified: the next is a copy.
	snap []sources.Service
	// sincePub are the clusters the snapshots since the last publish
	// built again, added or removed; sinceAll: one of them walked every
	// state (deltaLocked).
	sincePub map[string]bool
	sinceAll bool
}

// ceState is what the config-entry watches know. Guarded by Source.mu.
type ceState struct {
	watches map[string]*watchInfo // by kind
	seen    map[string]bool       // kinds read at least once
	entries entrySet              // the last good list of each kind
	version uint64                // bumped at each change of entries
	diags   []Diagnostic          // of the last conversion
	counts  map[string]int        // entries by kind
	// published is when the policy was last published.
	published time.Time
}

var (
	_ sources.Source          = (*Source)(nil)
	_ sources.Debugger        = (*Source)(nil)
	_ sources.PolicyPublisher = (*Source)(nil)
	_ sources.HostExplainer   = (*Source)(nil)
)

// dcState is what is known about one datacenter. Guarded by Source.mu.
type dcState struct {
	query    string // datacenter query parameter; "" is the agent's own
	label    string // name for logs, metrics and debug output
	priority uint32
	actual   string // datacenter name as reported in results

	list     watchInfo
	feed     [2]watchInfo // the change feed's queries (feedStates), in hinted mode
	sweep    watchInfo    // the reads of every check, in hinted mode
	listSeen bool
	selected int
	services map[string]*svcState
	// notReady counts the states of services whose first health read
	// has not completed (readyLocked).
	notReady int
}

// svcState is the last good health result of one service in one
// datacenter. Guarded by Source.mu.
type svcState struct {
	info      watchInfo
	ready     bool
	published bool // false: every instance is an excluded proxy/gateway kind
	instances []instance
	nodes     map[string]bool
	dropped   []sources.Dropped // instances left out, and why (under the service's name; droppedLocked)
	checks    map[string]string // service check status by node "\x00" check ID
	checkless bool              // an instance has no service check
	gen       uint64            // Source.genSeq at the last change
	// entries is the health result the state was mapped from, with the
	// change feed's check changes applied (patchEntries); version counts
	// its changes. applied are the changes applied from the feed since the
	// last read that it did not have, and feedIndex the highest index of
	// them (0: none).
	entries   []*api.ServiceEntry
	version   uint64
	applied   []checkChange
	feedIndex uint64
}

// seen is the index up to which the state knows its checks: its last
// read's, or a change applied from the change feed since.
func (st *svcState) seen() uint64 { return max(st.info.index, st.feedIndex) }

// watchInfo is one watch's progress, shown by DebugInfo.
type watchInfo struct {
	state       string // starting, blocking, waiting, backoff
	index       uint64
	indexResets int
	lastContact time.Duration
	lastSuccess time.Time
	lastError   string
	lastErrorAt time.Time
	failing     bool
}

// New is the sources.Factory of the Consul source. It validates the config
// block (unknown fields are errors), reads the CONSUL_* environment and
// loads the TLS files (errors name the field: "tls.ca_file: /x/ca.pem: no
// certificates found"); it does no network I/O and starts no goroutines.
func New(name string, raw json.RawMessage, env sources.Env) (sources.Source, error) {
	set, err := parseConfig(raw, env.BaseDir)
	if err != nil {
		return nil, err
	}
	log := env.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("source", name)
	s := &Source{
		name:    name,
		set:     set,
		log:     log,
		mapper:  &mapper{m: set.mapping, sel: set.sel, log: log},
		changed: make(chan struct{}, 1),
	}
	s.dcs = append(s.dcs, newDCState(set.localDC, 0))
	for i, dc := range set.failoverDCs {
		s.dcs = append(s.dcs, newDCState(dc, uint32(i+1)))
	}
	if set.configEntries {
		s.ce = &ceState{watches: map[string]*watchInfo{}, seen: map[string]bool{}, entries: newEntrySet(), counts: map[string]int{}}
		for _, k := range entryKinds {
			s.ce.watches[k] = &watchInfo{state: "starting"}
		}
	}
	s.metrics = newMetrics(name, s)
	s.metrics.withEntries = set.configEntries
	if env.Metrics != nil {
		if err := s.metrics.register(env.Metrics); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func newDCState(query string, priority uint32) *dcState {
	label := query
	if label == "" {
		label = "local"
	}
	return &dcState{query: query, label: label, priority: priority, actual: query, services: map[string]*svcState{}}
}

// Name implements sources.Source.
func (s *Source) Name() string { return s.name }

// PublishesPolicy implements sources.PolicyPublisher: with config_entries
// the source publishes a policy besides its services.
func (s *Source) PublishesPolicy() bool { return s.set.configEntries }

// Run implements sources.Source. It returns nil when ctx is done and an
// error only when the Consul client cannot be built (an unreadable token
// file; the TLS files were loaded by New).
func (s *Source) Run(ctx context.Context, sink sources.Sink) error {
	client, transport, err := s.newClient(s.set.maxQueries, s.wrapRoundTripper)
	if err != nil {
		return fmt.Errorf("consul source %s: %w", s.name, err)
	}
	defer transport.CloseIdleConnections()
	// The liveness probe has a client and a connection of its own: it is
	// never queued behind the blocking queries holding the others.
	liveClient, liveTransport, err := s.newClient(1, nil)
	if err != nil {
		return fmt.Errorf("consul source %s: %w", s.name, err)
	}
	defer liveTransport.CloseIdleConnections()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := newRunner(s, client)
	lv := newLiveness(s, liveClient)
	s.live.Store(lv)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		r.rec.run(ctx)
	}()
	go func() {
		defer wg.Done()
		lv.run(ctx, sink)
	}()
	for _, dc := range s.dcs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.runDC(ctx, dc)
		}()
	}
	if s.ce != nil {
		for _, kind := range entryKinds {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r.watchConfigEntries(ctx, kind)
			}()
		}
	}
	s.coordinate(ctx, sink)
	cancel()
	wg.Wait()
	return nil
}

// newClient builds an API client on a transport of its own with at most
// maxConns connections (max_concurrent_queries for the watches), its
// round tripper wrapped by wrapRT if not nil.
func (s *Source) newClient(maxConns int, wrapRT func(http.RoundTripper) http.RoundTripper) (*api.Client, *http.Transport, error) {
	ac := *s.set.apiConfig
	transport := newTransport(maxConns, s.wrapConn)
	// Loaded and checked at New; with it set, the API does not load the
	// files again.
	transport.TLSClientConfig = s.set.tls.config.Clone()
	hc, err := api.NewHttpClient(transport, ac.TLSConfig)
	if err != nil {
		return nil, nil, err
	}
	if wrapRT != nil {
		hc.Transport = wrapRT(hc.Transport)
	}
	ac.HttpClient = hc
	ac.Transport = transport
	c, err := api.NewClient(&ac)
	if err != nil {
		return nil, nil, err
	}
	return c, transport, nil
}

// idleConns is how many idle connections a transport keeps: after a burst
// of reads (the start, every service read again) the others are closed at
// once rather than held against the agent's per-client limit.
const idleConns = 8

// newTransport is a pooled transport allowing at most maxConns connections
// to the agent, idleConns of them idle; the source never has more requests
// in flight than maxConns.
func newTransport(maxConns int, wrap func(net.Conn) net.Conn) *http.Transport {
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err == nil && wrap != nil {
				c = wrap(c)
			}
			return c, err
		},
		MaxConnsPerHost:       maxConns,
		MaxIdleConns:          min(maxConns, idleConns),
		MaxIdleConnsPerHost:   min(maxConns, idleConns),
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		ForceAttemptHTTP2:     true,
	}
}

// signal asks the coordinator to flush soon. Never blocks.
func (s *Source) signal() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// coordinate flushes state changes, at most once per coalescing window:
// it reports errors and publishes the full set when it changed. It returns when ctx is
// done.
func (s *Source) coordinate(ctx context.Context, sink sources.Sink) {
	var (
		published bool
		failed    bool // Fail was called since the last publish
		pol       policyPublisher
		lastFlush time.Time
		// lastDropped is the dropped instances last reported.
		lastDropped []sources.Dropped
		// lastSnap is the services last published.
		lastSnap []sources.Service
	)
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.changed:
		}
		// Leading edge: once the services were published, a change after
		// a quiet coalescing window is flushed at once, and changes within
		// the window of the last flush wait for its end and go together
		// (one flush per window). Until then (the initial reads), and for
		// config entries, each signal waits the whole window, for the
		// reads of one change to come in together; entries read during a
		// shorter wait extend it to their whole window.
		wait := s.set.coalesce
		if published && s.entriesAt.Load() == 0 {
			wait -= time.Since(lastFlush)
		}
		for wait > 0 {
			if sleep(ctx, wait) != nil {
				return
			}
			// Entries read meanwhile wait the whole window from when they
			// were read (at most one window more: entriesAt is the first).
			wait = 0
			if at := s.entriesAt.Load(); at != 0 {
				wait = time.Until(time.Unix(0, at).Add(s.set.coalesce))
			}
		}
		s.entriesAt.Store(0)
		lastFlush = time.Now()
		errs, ready, failing, snap, changed, dropped := s.takeFlush()
		if errs != nil {
			sink.Fail(ctx, s.name, errs)
			failed = true
		}
		if s.ce != nil && pol.flush(ctx, s, sink) != nil {
			return
		}
		if !ready {
			continue
		}
		if !reflect.DeepEqual(dropped, lastDropped) {
			sources.ReportDropped(ctx, sink, s.name, slices.Clone(dropped))
			lastDropped = dropped
		}
		recovered := failed && !failing
		if published && !recovered && !changed {
			continue
		}
		s.mu.Lock()
		delta := s.deltaLocked(lastSnap, snap)
		s.mu.Unlock()
		if err := sink.Publish(ctx, sources.Update{Source: s.name, Services: snap, Incomplete: failing, Delta: delta}); err != nil {
			return
		}
		s.metrics.publishes.Inc()
		published, failed, lastSnap = true, failing, snap
		s.mu.Lock()
		s.published = time.Now()
		s.mu.Unlock()
	}
}

// takeFlush takes the pending errors and, once the initial reads are all
// done, a snapshot of every service, whether it changed, and the instances
// dropped.
func (s *Source) takeFlush() (errs error, ready, failing bool, snap []sources.Service, changed bool, dropped []sources.Dropped) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pendingErrs) > 0 {
		msg := strings.Join(s.pendingErrs, "; ")
		if s.errsDropped > 0 {
			msg += fmt.Sprintf("; and %d more", s.errsDropped)
		}
		errs = errors.New(msg)
		s.pendingErrs, s.errsDropped = nil, 0
	}
	ready = s.readyLocked()
	failing = s.failingLocked()
	if ready {
		snap, changed = s.snapshotLocked()
		dropped = s.droppedLocked()
	}
	return errs, ready, failing, snap, changed, dropped
}

// readyLocked: every datacenter's list was read and every selected service's
// first health read completed. Once the services were published, a service
// newly listed whose first read failed is left out until it reads, and
// holds back no other change (README, Fail static); one whose first read is
// under way still does (a service listed again is published with its new
// state, not left out meanwhile).
func (s *Source) readyLocked() bool {
	for _, dc := range s.dcs {
		if !dc.listSeen {
			return false
		}
		if dc.notReady > 0 && (s.published.IsZero() || !unreadFailing(dc)) {
			return false
		}
	}
	return true
}

// unreadFailing reports whether every state of dc whose first health read
// has not completed is failing (walked only while one has not).
func unreadFailing(dc *dcState) bool {
	for _, st := range dc.services {
		if !st.ready && !st.info.failing {
			return false
		}
	}
	return true
}

// failingLocked reports whether a watch is failing. A watch starts
// failing only in recordError, which sets staleSince, and staleSince is
// cleared only once none is: without it, nothing is walked.
func (s *Source) failingLocked() bool {
	if s.staleSince.IsZero() {
		return false
	}
	if s.ce != nil {
		for _, w := range s.ce.watches {
			if w.failing {
				return true
			}
		}
	}
	for _, dc := range s.dcs {
		if dc.list.failing || dc.feed[0].failing || dc.feed[1].failing || dc.sweep.failing {
			return true
		}
		for _, st := range dc.services {
			if st.info.failing {
				return true
			}
		}
	}
	return false
}

// clusterCache is one cluster of the last snapshot and the service states
// it was built from.
type clusterCache struct {
	members []clusterMember
	svc     sources.Service
	// why explains the health of each host: its Consul checks.
	why map[sources.HostKey]string
}

// clusterMember is one service state of a cluster at one generation: the
// state of service name in datacenter dc (its index in Source.dcs).
type clusterMember struct {
	dc   int
	name string
	st   *svcState
	gen  uint64
}

// stateKey names one service state: a service in a datacenter.
type stateKey struct {
	dc   *dcState
	name string
}

// touchLocked notes that the state of service name in dc changed (a new
// generation, added or removed): the next snapshot builds its cluster
// again.
func (s *Source) touchLocked(dc *dcState, name string) {
	if s.touched == nil {
		s.touched = map[stateKey]bool{}
	}
	s.touched[stateKey{dc, name}] = true
}

// sameMembers reports whether a and b hold the same states at the same
// generations, in any order.
func sameMembers(a, b []clusterMember) bool {
	if len(a) != len(b) {
		return false
	}
	for _, m := range a {
		found := false
		for _, n := range b {
			if m == n {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// snapshotLocked builds the full set of services from the last good state:
// instances grouped by cluster name, each service's endpoints in normal
// form (sources.Normalize; of a host in two datacenters, the lower
// priority's is kept), services sorted by name. It reports whether the set
// differs from the previous snapshot's.
//
// Only the clusters of the states touched since the last snapshot
// (touchLocked) are built again, and only when their members' generations
// changed; the others are the previous snapshot's values, Endpoints slices
// included, and the names are sorted again only when a cluster comes or
// goes. So a change costs the clusters it touches plus one copy of the
// list (the update carries every service), and the bridge's comparison
// of an unchanged service is a pointer comparison. Neither the source nor
// the bridge modifies a published slice. The first snapshot, and one
// after a datacenter's name changed (touchAll), walk every state.
func (s *Source) snapshotLocked() ([]sources.Service, bool) {
	var byName map[string][]clusterMember
	if s.clusters == nil || s.touchAll {
		byName = make(map[string][]clusterMember, len(s.clusters))
		for i, dc := range s.dcs {
			for name, st := range dc.services {
				if !st.ready || !st.published {
					continue
				}
				cn := clusterName(s.set.mapping.clusterName, name, dc.actual)
				byName[cn] = append(byName[cn], clusterMember{dc: i, name: name, st: st, gen: st.gen})
			}
		}
	} else {
		byName = s.touchedMembersLocked()
	}
	full := s.clusters == nil || s.touchAll
	s.touched, s.touchAll = nil, false
	if full {
		s.sinceAll = true
	} else {
		if s.sincePub == nil {
			s.sincePub = make(map[string]bool, len(byName))
		}
		for cn := range byName {
			s.sincePub[cn] = true
		}
	}
	changed, setChanged := false, false
	var rebuilt []string // clusters whose service changed
	next := s.clusters
	if full {
		setChanged = len(byName) != len(s.clusters)
		next = make(map[string]*clusterCache, len(byName))
	}
	for cn, ms := range byName {
		old := s.clusters[cn]
		if len(ms) == 0 { // every member gone (only when not full)
			if old != nil {
				delete(next, cn)
				setChanged = true
			}
			continue
		}
		if old != nil && sameMembers(old.members, ms) {
			next[cn] = old
			continue
		}
		setChanged = setChanged || old == nil
		c := &clusterCache{members: ms}
		next[cn] = c
		// Names are published as they are: the merge loop refuses, with a
		// diagnostic and a count, those sources.ValidateServiceName
		// refuses (a Consul service may be registered as "greeter/v1",
		// the name of greeter's subset cluster).
		// Local datacenter first, then failover order (the members are in
		// datacenter order): the first of a host listed twice is the one
		// of the lower priority.
		eps := []sources.Endpoint{}
		c.why = map[sources.HostKey]string{}
		for _, m := range ms {
			for _, in := range m.st.instances {
				eps = append(eps, in.endpoint.Clone())
				if k := normalKey(in.endpoint); c.why[k] == "" {
					c.why[k] = in.why // the first: local datacenter first, as Normalize keeps
				}
			}
		}
		c.svc = sources.Service{Name: cn, Endpoints: sources.Normalize(eps)}
		if old != nil && reflect.DeepEqual(old.svc, c.svc) {
			c.svc = old.svc
		} else {
			changed = true
			rebuilt = append(rebuilt, cn)
		}
	}
	s.clusters = next
	if setChanged || s.clusterNames == nil {
		changed = true
		s.clusterNames = make([]string, 0, len(next))
		for cn := range next {
			s.clusterNames = append(s.clusterNames, cn)
		}
		sort.Strings(s.clusterNames)
		s.snap = make([]sources.Service, len(s.clusterNames))
		for i, cn := range s.clusterNames {
			s.snap[i] = next[cn].svc
		}
		return s.snap, changed
	}
	// The same names: the last list (the receiver owns it) copied, with
	// the rebuilt clusters put in place.
	s.snap = slices.Clone(s.snap)
	for _, cn := range rebuilt {
		if i, ok := slices.BinarySearch(s.clusterNames, cn); ok {
			s.snap[i] = next[cn].svc
		}
	}
	return s.snap, changed
}

// deltaLocked is the delta of snap, about to be published, from base,
// the list published last (sources.Delta): the clusters the snapshots
// since built again, added or removed (sincePub), found in snap by
// binary search (it is sorted by name). It is nil for the first publish
// and after a snapshot that walked every state. It starts the next
// delta.
func (s *Source) deltaLocked(base, snap []sources.Service) *sources.Delta {
	since, all := s.sincePub, s.sinceAll
	s.sincePub, s.sinceAll = nil, false
	if all || len(base) == 0 {
		return nil
	}
	d := &sources.Delta{Base: base}
	for cn := range since {
		if i, ok := slices.BinarySearchFunc(snap, cn, func(x sources.Service, name string) int { return strings.Compare(x.Name, name) }); ok {
			d.Changed = append(d.Changed, snap[i])
		} else {
			d.Removed = append(d.Removed, cn)
		}
	}
	return d
}

// touchedMembersLocked is the members of each cluster a touched state
// belongs to: the previous snapshot's, less the touched states, plus
// those of them now ready and published; in datacenter order. A cluster
// left with no member has an empty list.
func (s *Source) touchedMembersLocked() map[string][]clusterMember {
	byName := map[string][]clusterMember{}
	for k := range s.touched {
		cn := clusterName(s.set.mapping.clusterName, k.name, k.dc.actual)
		if _, ok := byName[cn]; ok {
			continue
		}
		var ms []clusterMember
		if old := s.clusters[cn]; old != nil {
			for _, m := range old.members {
				if !s.touched[stateKey{s.dcs[m.dc], m.name}] {
					ms = append(ms, m)
				}
			}
		}
		byName[cn] = ms
	}
	for k := range s.touched {
		st := k.dc.services[k.name]
		if st == nil || !st.ready || !st.published {
			continue
		}
		i := slices.Index(s.dcs, k.dc)
		cn := clusterName(s.set.mapping.clusterName, k.name, k.dc.actual)
		byName[cn] = append(byName[cn], clusterMember{dc: i, name: k.name, st: st, gen: st.gen})
	}
	for _, ms := range byName {
		sort.Slice(ms, func(i, j int) bool { return ms[i].dc < ms[j].dc })
	}
	return byName
}

// normalKey is an endpoint's host as Normalize spells it.
func normalKey(e sources.Endpoint) sources.HostKey {
	k := e.Key()
	if a, err := netip.ParseAddr(k.Address); err == nil {
		k.Address = a.Unmap().String()
	}
	return k
}

// ExplainHost implements sources.HostExplainer: the Consul checks that
// decided a published host's health.
func (s *Source) ExplainHost(service string, host sources.HostKey) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.clusters[service]; c != nil {
		return c.why[host]
	}
	return ""
}

// droppedLocked lists the instances every datacenter's services drop,
// each under its cluster's name and with its datacenter's, as they are
// now (a state keeps its service's name: a datacenter's name may change
// after its states were read). The list is built again only when a
// state's dropped instances changed, a state that dropped some was
// removed, or a datacenter's name changed; otherwise it is the same
// slice (which the caller does not modify).
func (s *Source) droppedLocked() []sources.Dropped {
	if s.droppedFresh {
		return s.dropped
	}
	s.droppedFresh = true
	var out []sources.Dropped
	for _, dc := range s.dcs {
		for name, st := range dc.services {
			for _, d := range st.dropped {
				d.Service = clusterName(s.set.mapping.clusterName, name, dc.actual)
				d.Instance += " (" + dc.actual + ")"
				out = append(out, d)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Service != out[j].Service {
			return out[i].Service < out[j].Service
		}
		return out[i].Instance < out[j].Instance
	})
	s.dropped = out
	return out
}

// forgetLocked accounts for the removal of st from dc's services: its
// readiness and its dropped instances.
func (s *Source) forgetLocked(dc *dcState, st *svcState) {
	if !st.ready {
		dc.notReady--
	}
	if len(st.dropped) > 0 {
		s.droppedFresh = false
	}
}

// recordError notes a failed read for DebugInfo and queues it for
// sink.Fail. Callers hold no lock.
func (s *Source) recordError(info *watchInfo, what string, err error) {
	s.mu.Lock()
	info.failing = true
	info.state = "backoff"
	info.lastError = err.Error()
	info.lastErrorAt = time.Now()
	if s.staleSince.IsZero() {
		s.staleSince = info.lastErrorAt
		s.log.Info("consul source "+s.name+" is stale: reading Consul failed; retrying, the last good state stays served", "watch", what, "error", err)
	}
	if len(s.pendingErrs) < 5 {
		s.pendingErrs = append(s.pendingErrs, what+": "+err.Error())
	} else {
		s.errsDropped++
	}
	s.mu.Unlock()
	s.signal()
}

// noteRecoveredLocked logs the end of an outage once no watch is failing
// any more. Callers hold s.mu.
func (s *Source) noteRecoveredLocked() {
	if s.staleSince.IsZero() || s.failingLocked() {
		return
	}
	outage := time.Since(s.staleSince)
	s.staleSince = time.Time{}
	s.log.Info("consul source "+s.name+" recovered: every watch reads Consul again", "outage", outage.Round(time.Millisecond).String())
}

// tlsLogEvery is how often the same TLS problem is logged again at ERROR
// while it lasts (every watch hits it on every retry).
const tlsLogEvery = time.Minute

// agentURL is the agent's address as requests go to it.
func (s *Source) agentURL() string {
	ac := s.set.apiConfig
	if strings.Contains(ac.Address, "://") {
		return ac.Address
	}
	scheme := ac.Scheme
	if scheme == "" {
		scheme = "http"
	}
	return scheme + "://" + ac.Address
}

// explainTLS turns a request error that is a TLS failure against the
// agent (untrusted agent certificate, refused client certificate, no TLS)
// into one naming the agent and the field to check, and logs it at ERROR:
// once when it starts or changes, then at most every tlsLogEvery. Other
// errors are returned as they are. The watch keeps retrying either way.
func (s *Source) explainTLS(err error) error {
	p := s.set.tls.diagnose(err)
	if p == nil {
		return err
	}
	addr := s.agentURL()
	msg := fmt.Sprintf("TLS with the Consul agent at %s failed: %s (check %s)", addr, p.hint, p.field)
	now := time.Now()
	s.mu.Lock()
	logIt := msg != s.tlsLogged || now.Sub(s.tlsLoggedAt) >= tlsLogEvery
	if logIt {
		s.tlsLogged, s.tlsLoggedAt = msg, now
	}
	s.mu.Unlock()
	if logIt {
		s.log.Error("consul source "+s.name+": "+msg+"; retrying, the last good state stays served", "address", addr, "check", p.field, "error", err)
	}
	return fmt.Errorf("%s: %w", msg, err)
}
