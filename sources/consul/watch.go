package consul

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/consul/api"
)

// heldPerDC is how many blocking queries each datacenter holds in hinted
// mode: the service list and the change feed's feedStates.
const heldPerDC = 1 + len(feedStates)

// Metric endpoint labels.
const (
	epServices     = "catalog_services"
	epHealth       = "health_service"
	epHealthState  = "health_state"
	epNodeServices = "catalog_node_services"
	epStatusLeader = "status_leader"
	epConfig       = "config_entries"
)

// runner is the state of one Run: the client, the query slots and the
// watch mode. Its methods are safe for concurrent use.
type runner struct {
	s      *Source
	client *api.Client
	slots  chan struct{} // one token per request in flight
	reads  chan struct{} // one token per request in flight that does not block

	// hinted is true when the selected services outnumber the slots left
	// for service watches: they then wait for change hints instead of
	// holding blocking queries.
	hinted   atomic.Bool
	modeMu   sync.Mutex
	modeChan chan struct{} // closed and replaced when hinted flips
	selected []atomic.Int64
	rec      *recovery
}

func newRunner(s *Source, client *api.Client) *runner {
	r := &runner{
		s:        s,
		client:   client,
		slots:    make(chan struct{}, s.set.maxQueries),
		reads:    make(chan struct{}, s.set.maxReads),
		modeChan: make(chan struct{}),
		selected: make([]atomic.Int64, len(s.dcs)),
	}
	r.rec = newRecovery(r)
	return r
}

// serviceSlots is how many service watches may hold blocking queries: the
// slots less, per datacenter, the list watch and the change feed's
// queries (heldPerDC), and the config-entry watches.
func (r *runner) serviceSlots() int64 {
	n := r.s.set.maxQueries - heldPerDC*len(r.s.dcs)
	if r.s.ce != nil {
		n -= len(entryKinds)
	}
	return int64(n)
}

// setSelected records datacenter i's number of selected services and
// flips the mode when the total crosses the slots.
func (r *runner) setSelected(i int, n int) {
	r.selected[i].Store(int64(n))
	var total int64
	for j := range r.selected {
		total += r.selected[j].Load()
	}
	hinted := total > r.serviceSlots()
	r.modeMu.Lock()
	defer r.modeMu.Unlock()
	if r.hinted.Load() != hinted {
		r.hinted.Store(hinted)
		close(r.modeChan)
		r.modeChan = make(chan struct{})
		r.s.log.Info("service watch mode changed", "hinted", hinted, "selected", total, "blocking_slots", r.serviceSlots())
	}
}

// modeChanged returns a channel closed at the next mode flip.
func (r *runner) modeChanged() <-chan struct{} {
	r.modeMu.Lock()
	defer r.modeMu.Unlock()
	return r.modeChan
}

// queryOptions builds the options of one read.
func (r *runner) queryOptions(dc *dcState, index uint64, consistent bool) *api.QueryOptions {
	set := r.s.set
	q := &api.QueryOptions{Datacenter: dc.query}
	switch {
	case consistent || set.consistency == "consistent":
		q.RequireConsistent = true
	case set.consistency == "stale":
		q.AllowStale = true
	}
	q.UseCache = set.useCache && !q.RequireConsistent
	if index > 0 {
		q.WaitIndex = index
		q.WaitTime = jitterDown(set.waitTime, 0.1)
	}
	return q
}

// fetchFunc performs one read with the given options.
type fetchFunc[T any] func(q *api.QueryOptions) (T, *api.QueryMeta, error)

// do runs one read in a query slot (and, a read that does not block, in
// one of the max_concurrent_reads), with a deadline past the wait time,
// and records its metrics.
func do[T any](ctx context.Context, r *runner, endpoint string, q *api.QueryOptions, fetch fetchFunc[T]) (T, *api.QueryMeta, error) {
	var zero T
	if q.WaitIndex == 0 {
		select {
		case r.reads <- struct{}{}:
		case <-ctx.Done():
			return zero, nil, ctx.Err()
		}
		defer func() { <-r.reads }()
	}
	select {
	case r.slots <- struct{}{}:
	case <-ctx.Done():
		return zero, nil, ctx.Err()
	}
	defer func() { <-r.slots }()
	timeout := q.WaitTime + q.WaitTime/16 + 15*time.Second
	qctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	res, meta, err := fetch(q.WithContext(qctx))
	m := r.s.metrics
	switch {
	case err != nil && ctx.Err() != nil:
		return zero, nil, ctx.Err()
	case err != nil:
		m.requests.WithLabelValues(endpoint, "error").Inc()
		return zero, nil, err
	case meta == nil:
		m.requests.WithLabelValues(endpoint, "error").Inc()
		return zero, nil, errors.New("no query metadata in response")
	}
	m.requests.WithLabelValues(endpoint, "ok").Inc()
	if q.WaitIndex > 0 {
		m.blocking.WithLabelValues(endpoint).Observe(time.Since(start).Seconds())
	}
	return res, meta, nil
}

// watch is one blocking-query loop's pacing and index. Owned by one
// goroutine; info is guarded by Source.mu.
type watch struct {
	r        *runner
	dc       *dcState
	endpoint string
	what     string // for error messages: "dc1: health web"
	info     *watchInfo
	bucket   *tokenBucket
	back     backoff
	index    uint64
	// consistent: every read is consistent (the check sweep and the node
	// reads; see checkSweep).
	consistent bool
	// failed is set after a failed read: the next read does not block,
	// since a restarted agent (or another server) may have lower indexes
	// and would hold a blocking query on the old index for the whole wait.
	failed bool
}

func (r *runner) newWatch(dc *dcState, endpoint, what string, info *watchInfo) *watch {
	set := r.s.set
	return &watch{
		r: r, dc: dc, endpoint: endpoint, what: what, info: info,
		bucket: newTokenBucket(set.rateLimit, set.rateBurst),
		back:   backoff{min: set.retryMin, max: set.retryMax},
	}
}

// read performs one rate-limited read: blocking on the current index when
// block is set. A stale result older than max_stale is read again in
// consistent mode, and so is a result whose index went backwards (see
// confirmConsistent). On error it records it, sleeps the backoff and
// returns it; the caller retries.
func read[T any](ctx context.Context, w *watch, block bool, fetch fetchFunc[T]) (T, error) {
	var zero T
	if err := w.bucket.wait(ctx); err != nil {
		return zero, err
	}
	index := uint64(0)
	if block && !w.failed {
		index = w.index
	}
	w.setState(index)
	res, meta, err := do(ctx, w.r, w.endpoint, w.r.queryOptions(w.dc, index, w.consistent), fetch)
	consistent := w.consistent || w.r.s.set.consistency == "consistent"
	if err == nil && w.r.s.set.consistency == "stale" && meta.LastContact > w.r.s.set.maxStale {
		w.r.s.metrics.requests.WithLabelValues(w.endpoint, "stale_retry").Inc()
		res, meta, err = do(ctx, w.r, w.endpoint, w.r.queryOptions(w.dc, 0, true), fetch)
		consistent = true
	}
	if _, backwards := nextIndex(w.index, indexOf(meta)); err == nil && backwards && !consistent {
		w.r.s.metrics.requests.WithLabelValues(w.endpoint, "backwards_retry").Inc()
		res, meta, err = confirmConsistent(ctx, w, fetch)
	}
	if err != nil {
		if ctx.Err() != nil {
			return zero, ctx.Err()
		}
		w.failed = true
		err = w.r.s.explainTLS(err)
		w.r.s.recordError(w.info, w.what, err)
		w.r.retryWait(ctx, w.back.next(), err)
		return zero, err
	}
	w.back.reset()
	if w.failed {
		w.r.rec.readOK() // a failed watch reads again: wake-ups are not held back
	}
	w.failed = false
	w.success(meta)
	return res, nil
}

// indexOf is the index a read returned (0 without metadata).
func indexOf(meta *api.QueryMeta) uint64 {
	if meta == nil {
		return 0
	}
	return meta.LastIndex
}

// Consistent reads wait for the leader to have applied its log: until
// then Consul answers this error.
const errNotReady = "Not ready to serve consistent reads"

// confirmConsistent reads again in consistent mode, for a result whose
// index went backwards. A restarted server answers stale and default
// reads from its last snapshot until its log is replayed, which comes
// after it is elected: an older catalog, empty without a snapshot (index
// 1, every service gone). Those reads must not be published. A consistent
// read is refused until the log is applied; it is retried meanwhile
// (25 ms, doubling, about 1.5 s in all), then its error is the read's.
// If the consistent read also returns the lower index, the catalog did
// go back (a dev agent restarted, a cluster rebuilt): it is the truth.
func confirmConsistent[T any](ctx context.Context, w *watch, fetch fetchFunc[T]) (T, *api.QueryMeta, error) {
	wait := 25 * time.Millisecond
	for {
		res, meta, err := do(ctx, w.r, w.endpoint, w.r.queryOptions(w.dc, 0, true), fetch)
		if err == nil || !strings.Contains(err.Error(), errNotReady) || wait > time.Second {
			return res, meta, err
		}
		if serr := sleep(ctx, wait); serr != nil {
			return res, meta, serr
		}
		wait *= 2
	}
}

func (w *watch) setState(index uint64) {
	state := "reading"
	if index > 0 {
		state = "blocking"
	}
	s := w.r.s
	s.mu.Lock()
	w.info.state = state
	s.mu.Unlock()
}

// success applies the index rules and records the read.
func (w *watch) success(meta *api.QueryMeta) {
	next, reset := nextIndex(w.index, meta.LastIndex)
	if reset {
		w.r.s.log.Info("Consul index went backwards; re-reading from scratch", "watch", w.what, "previous", w.index, "returned", meta.LastIndex)
	}
	w.index = next
	s := w.r.s
	s.mu.Lock()
	recovered := w.info.failing
	w.info.failing = false
	if recovered {
		s.tlsLogged = "" // a TLS problem coming back is logged again at once
	}
	w.info.index = next
	if reset {
		w.info.indexResets++
	}
	w.info.lastContact = meta.LastContact
	w.info.lastSuccess = time.Now()
	if lv := s.live.Load(); lv != nil {
		lv.answered(w.info.lastSuccess)
	}
	w.info.state = "idle"
	if recovered {
		s.noteRecoveredLocked()
	}
	s.mu.Unlock()
	if recovered {
		s.signal()
	}
}

// listResult is one read of the service list.
type listResult struct {
	services map[string][]string
	index    uint64
}

// runDC watches one datacenter until ctx is done: the service list, the
// change feed, and one watch per selected service. It owns the service
// watches and stops them all before returning.
func (r *runner) runDC(ctx context.Context, dc *dcState) {
	lists := make(chan listResult)
	hints := make(chan hint)
	sweep := make(chan struct{}, 1)
	nodeSweep := make(chan []string, 1)
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); r.watchList(ctx, dc, lists) }()
	go func() { defer wg.Done(); r.changeFeed(ctx, dc, hints) }()
	go func() { defer wg.Done(); r.checkSweep(ctx, dc, sweep, nodeSweep, hints) }()
	svcs := map[string]*serviceWatch{}
	defer func() {
		for _, sw := range svcs {
			sw.cancel()
		}
		wg.Wait()
	}()
	var prev listResult
	for {
		select {
		case <-ctx.Done():
			return
		case l := <-lists:
			r.reconcile(ctx, dc, l, svcs, &wg)
			if r.hinted.Load() && prev.index != 0 && l.index != prev.index && reflect.DeepEqual(l.services, prev.services) {
				// Something changed that the list does not show (an
				// instance registered again, added or removed): read
				// every check once to find which services to re-read.
				select {
				case sweep <- struct{}{}:
				default: // one is pending; it reads after this change
				}
			}
			prev = l
		case h := <-hints:
			if nodes := r.applyHint(ctx, dc, h, svcs); nodes != nil {
				select {
				case nodeSweep <- nodes:
				default: // one is pending
				}
			}
		case <-r.modeChanged():
			wakeAll(svcs)
		}
	}
}

// serviceWatch is the handle of one running service watch.
type serviceWatch struct {
	cancel context.CancelFunc
	wake   chan struct{} // capacity 1
}

func (sw *serviceWatch) poke() {
	select {
	case sw.wake <- struct{}{}:
	default:
	}
}

func wakeAll(svcs map[string]*serviceWatch) {
	for _, sw := range svcs {
		sw.poke()
	}
}

// watchList runs the blocking query on /v1/catalog/services and sends each
// changed result to out.
func (r *runner) watchList(ctx context.Context, dc *dcState, out chan<- listResult) {
	w := r.newWatch(dc, epServices, dc.label+": catalog services", &dc.list)
	w.bucket = newTokenBucket(r.s.set.feedRate, int(max(r.s.set.feedRate, 1)))
	fetch := func(q *api.QueryOptions) (map[string][]string, *api.QueryMeta, error) {
		return r.client.Catalog().Services(q)
	}
	for ctx.Err() == nil {
		services, err := read(ctx, w, true, fetch)
		if err != nil {
			continue
		}
		select {
		case out <- listResult{services: services, index: w.index}:
		case <-ctx.Done():
			return
		}
	}
}

// reconcile starts watches for newly selected services and stops those of
// services gone from the list (their state is dropped: that is a real
// removal, not a failed read).
func (r *runner) reconcile(ctx context.Context, dc *dcState, l listResult, svcs map[string]*serviceWatch, wg *sync.WaitGroup) {
	s := r.s
	want := map[string]bool{}
	for name, tags := range l.services {
		if s.set.sel.service(name, tags) {
			want[name] = true
		}
	}
	removed := false
	for name, sw := range svcs {
		if !want[name] {
			sw.cancel()
			delete(svcs, name)
			removed = true
		}
	}
	s.mu.Lock()
	for name, st := range dc.services {
		if !want[name] {
			s.forgetLocked(dc, st)
			delete(dc.services, name)
			s.touchLocked(dc, name)
		}
	}
	for name := range want {
		if _, ok := svcs[name]; ok {
			continue
		}
		st := &svcState{info: watchInfo{state: "starting"}}
		dc.services[name] = st
		dc.notReady++
		sctx, cancel := context.WithCancel(ctx)
		sw := &serviceWatch{cancel: cancel, wake: make(chan struct{}, 1)}
		svcs[name] = sw
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.watchService(sctx, dc, name, st, sw.wake)
		}()
	}
	dc.selected = len(want)
	s.noteRecoveredLocked() // a failing watch may have been dropped
	first := !dc.listSeen
	dc.listSeen = true // under the same lock as the new services' states
	s.mu.Unlock()
	r.setSelected(r.dcIndex(dc), len(want))
	if removed || first {
		s.signal()
	}
}

func (r *runner) dcIndex(dc *dcState) int {
	for i, d := range r.s.dcs {
		if d == dc {
			return i
		}
	}
	panic("consul: unknown datacenter state")
}

// watchService keeps one service's health result current until ctx is
// done. In blocking mode it holds a blocking query on
// /v1/health/service/:name; in hinted mode it reads when woken by the change
// feed (or every hinted_refresh).
func (r *runner) watchService(ctx context.Context, dc *dcState, name string, st *svcState, wake <-chan struct{}) {
	s := r.s
	s.metrics.watches.Inc()
	defer s.metrics.watches.Dec()
	w := r.newWatch(dc, epHealth, fmt.Sprintf("%s: health %s", dc.label, name), &st.info)
	fetch := func(q *api.QueryOptions) ([]*api.ServiceEntry, *api.QueryMeta, error) {
		return r.client.Health().Service(name, "", false, q)
	}
	needRead := true
	// The first refresh comes at a uniformly random time within
	// hinted_refresh, so that services (and replicas) started together
	// do not refresh together.
	refresh := jitterDown(s.set.hintedRefresh, 1)
	for ctx.Err() == nil {
		hinted := r.hinted.Load()
		if hinted && !needRead {
			if !r.waitForHint(ctx, st, wake, refresh) {
				return
			}
			refresh = jitterDown(s.set.hintedRefresh, 0.2)
		}
		entries, err := read(ctx, w, !hinted, fetch)
		if err != nil {
			needRead = true
			continue
		}
		needRead = false
		r.store(ctx, dc, name, st, entries)
	}
}

// waitForHint waits in hinted mode for a wake-up, the refresh timer (after
// refresh) or a mode flip. It reports false when ctx is done.
func (r *runner) waitForHint(ctx context.Context, st *svcState, wake <-chan struct{}, refresh time.Duration) bool {
	r.s.mu.Lock()
	st.info.state = "waiting"
	r.s.mu.Unlock()
	t := time.NewTimer(refresh)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-wake:
	case <-t.C:
	case <-r.modeChanged():
	}
	return true
}

// store maps a health result and keeps it when it differs from the last.
// The check changes applied from the change feed since the last read that
// the result does not have yet (a read answered by a server behind the
// feed's) are applied to it again (reapply), so a read never takes back
// what the feed already showed.
func (r *runner) store(ctx context.Context, dc *dcState, name string, st *svcState, entries []*api.ServiceEntry) {
	s := r.s
	for ctx.Err() == nil {
		s.mu.Lock()
		applied, version := st.applied, st.version
		s.mu.Unlock()
		es, keep := reapply(entries, applied)
		gone := false
		if r.commit(ctx, dc, name, st, es, func(st *svcState) bool {
			if st.version != version {
				return false // a change from the feed came in meanwhile
			}
			st.applied, st.feedIndex = keep, 0
			for _, c := range keep {
				st.feedIndex = max(st.feedIndex, c.idx)
			}
			return true
		}) {
			return
		}
		s.mu.Lock()
		gone = dc.services[name] != st
		s.mu.Unlock()
		if gone {
			return
		}
	}
}

// reapply applies to a fresh health result the changes applied from the
// change feed before it (applied) that it does not have, and returns it
// with those changes. Each check's ModifyIndex tells: a change is
// superseded when the result has the check at a ModifyIndex at or above
// the change's (for a check that left the feed: above the one it left
// at), or, a check that left the feed, does not have it (deleted), or
// does not have its instance.
func reapply(entries []*api.ServiceEntry, applied []checkChange) ([]*api.ServiceEntry, []checkChange) {
	var keep []checkChange
	for _, c := range applied {
		found, have := false, (*api.HealthCheck)(nil)
		for _, e := range entries {
			if !onInstance(e, c.check) {
				continue
			}
			found = true
			if i := slices.IndexFunc(e.Checks, func(x *api.HealthCheck) bool { return x != nil && x.CheckID == c.check.CheckID }); i >= 0 {
				have = e.Checks[i]
				break
			}
		}
		switch {
		case !found:
		case have == nil && c.left:
		case have != nil && !c.left && have.ModifyIndex >= c.check.ModifyIndex:
		case have != nil && c.left && have.ModifyIndex > c.check.ModifyIndex:
		default:
			keep = append(keep, c)
		}
	}
	if len(keep) == 0 {
		return entries, nil
	}
	out, _ := applyChanges(entries, keep)
	return out, keep
}

// onInstance reports whether check c belongs to the instance of entry e
// (a node check: to every instance on its node).
func onInstance(e *api.ServiceEntry, c *api.HealthCheck) bool {
	return e != nil && e.Node != nil && e.Service != nil && e.Node.Node == c.Node &&
		(c.ServiceID == "" || e.Service.ID == c.ServiceID)
}

// commit maps entries, the health result of service name, and keeps them
// as its state if accept (called under Source.mu) agrees; it signals the
// coordinator when the mapped state changed. It reports whether the
// entries were kept.
func (r *runner) commit(ctx context.Context, dc *dcState, name string, st *svcState, entries []*api.ServiceEntry, accept func(*svcState) bool) bool {
	kept, changed := r.keep(ctx, dc, name, st, entries, accept)
	if changed {
		r.s.signal()
	}
	return kept
}

// keep is commit without the signal: it reports whether the entries were
// kept and whether the mapped state changed (the caller signals).
func (r *runner) keep(ctx context.Context, dc *dcState, name string, st *svcState, entries []*api.ServiceEntry, accept func(*svcState) bool) (kept, changed bool) {
	s := r.s
	s.mu.Lock()
	info := dcInfo{name: dc.actual, priority: dc.priority}
	s.mu.Unlock()
	if len(entries) > 0 && entries[0].Node != nil && entries[0].Node.Datacenter != "" {
		info.name = entries[0].Node.Datacenter
	}
	instances, dropped, publish := s.mapper.mapEntries(ctx, name, info, entries)
	nodes, checks, checkless := checksOf(entries)
	s.mu.Lock()
	if dc.services[name] != st || !accept(st) { // removed from the list meanwhile, or superseded
		s.mu.Unlock()
		return false, false
	}
	// A datacenter renamed changes every cluster name of dc and every
	// dropped instance's (droppedLocked names them): a publish is due,
	// even if this service's state is the same.
	renamed := dc.actual != info.name
	if renamed {
		dc.actual = info.name
		s.touchAll = true
		s.droppedFresh = false
	}
	droppedChanged := !reflect.DeepEqual(st.dropped, dropped)
	changed = renamed || !st.ready || st.published != publish || !reflect.DeepEqual(st.instances, instances) || droppedChanged
	if !st.ready {
		dc.notReady--
	}
	if droppedChanged {
		s.droppedFresh = false
	}
	st.ready, st.published, st.instances, st.nodes, st.dropped = true, publish, instances, nodes, dropped
	st.checks, st.checkless, st.entries = checks, checkless, entries
	st.version++
	if changed {
		s.genSeq++
		st.gen = s.genSeq
		s.touchLocked(dc, name)
	}
	s.mu.Unlock()
	return true, changed
}

// checksOf returns the nodes of a health result, the status of its service
// checks (by node and check ID) and whether an instance has no service
// check.
func checksOf(entries []*api.ServiceEntry) (nodes map[string]bool, checks map[string]string, checkless bool) {
	nodes, checks = map[string]bool{}, map[string]string{}
	for _, e := range entries {
		if e == nil || e.Node == nil {
			continue
		}
		nodes[e.Node.Node] = true
		own := false
		for _, c := range e.Checks {
			if c != nil && c.ServiceID != "" {
				checks[e.Node.Node+"\x00"+c.CheckID] = c.Status
				own = true
			}
		}
		checkless = checkless || !own
	}
	return nodes, checks, checkless
}

// hint names what the change feed saw change: services whose checks were
// modified after the index of their last read, and nodes whose node-level
// checks were.
type hint struct {
	services map[string]uint64 // service name → highest check ModifyIndex
	nodes    map[string]uint64 // node name → highest node-check ModifyIndex
	// checks, when set, is the status of every service check of the
	// datacenter, by service name, then node and check ID: a service
	// whose checks are not those of its last read (one added, gone, or of
	// another status), or with an instance without checks, is woken too.
	checks map[string]map[string]string
	// orElse is what to do when the hint wakes no service (the change is
	// one it does not show): orElseNodes, read the services of every node
	// (nodeHint); orElseAll, wake every service.
	orElse int
	// byService and byNode are the change feed's check changes themselves,
	// by service name (service checks) and by node (node checks): what a
	// service's last result needs to be brought up to date without a read.
	byService map[string][]checkChange
	byNode    map[string][]checkChange
	// wake, when set, names the services to read (nodeHint).
	wake map[string]bool
}

// checkChange is one check the change feed saw change: it appeared in
// the feed or was modified (check is its new state), or it left the feed
// (left: it turned passing, or was deleted), at index idx.
type checkChange struct {
	check *api.HealthCheck
	left  bool
	idx   uint64
}

// What a hint that wakes no service asks for (hint.orElse).
const (
	orElseNothing = iota
	orElseNodes
	orElseAll
)

func newHint() hint {
	return hint{services: map[string]uint64{}, nodes: map[string]uint64{},
		byService: map[string][]checkChange{}, byNode: map[string][]checkChange{}}
}

// add notes a check modified (or, left, gone from the feed) at index idx.
func (h hint) add(c *api.HealthCheck, idx uint64, left bool) {
	m, key, by := h.services, c.ServiceName, h.byService
	if c.ServiceID == "" {
		m, key, by = h.nodes, c.Node, h.byNode
	}
	if idx > m[key] {
		m[key] = idx
	}
	by[key] = append(by[key], checkChange{check: c, left: left, idx: idx})
}

// feedStates are the check statuses the change feed watches, each with a
// blocking query on /v1/health/state/<status>: every status but passing.
// Consul reads a status's checks from its index on the status, so a read
// costs the checks of that status, not every check of the datacenter, and
// a check that changes while passing wakes neither query. A check that
// turns passing, or is deleted, leaves the results: the feed compares
// each union of the two with the previous one.
var feedStates = [2]string{api.HealthCritical, api.HealthWarning}

// feedCheck is what the change feed keeps of a check that is not passing.
type feedCheck struct {
	check  *api.HealthCheck
	modify uint64
}

// diffFeed compares a change-feed result with the previous one (nil: the
// first read) and returns the hint of the checks that appeared or were
// modified (at their ModifyIndex) and of those that left (at index, the
// result's index: they turned passing or were deleted at or before it).
func diffFeed(prev map[string]feedCheck, checks api.HealthChecks, index uint64) (hint, map[string]feedCheck) {
	h := newHint()
	next := make(map[string]feedCheck, len(checks))
	for _, c := range checks {
		if c == nil {
			continue
		}
		key := c.Node + "\x00" + c.CheckID
		next[key] = feedCheck{check: c, modify: c.ModifyIndex}
		if old, ok := prev[key]; !ok || old.modify != c.ModifyIndex {
			h.add(c, c.ModifyIndex, false)
		}
	}
	if index == 0 { // reset: every service that had a failing check is read
		index = ^uint64(0)
	}
	for key, old := range prev {
		if _, ok := next[key]; !ok {
			h.add(old.check, index, true)
		}
	}
	return h, next
}

// changeFeed runs, in hinted mode only, the change feed (feedStates)
// and sends what changed to out.
func (r *runner) changeFeed(ctx context.Context, dc *dcState, out chan<- hint) {
	for ctx.Err() == nil {
		if r.hinted.Load() {
			r.runFeed(ctx, dc, out)
			continue
		}
		r.s.mu.Lock()
		dc.feed = [2]watchInfo{{state: "off"}, {state: "off"}}
		r.s.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-r.modeChanged():
		}
	}
}

// feedResult is one read of one status of the change feed.
type feedResult struct {
	state  int // in feedStates
	checks api.HealthChecks
	index  uint64
}

// runFeed runs the change feed's blocking queries until ctx is done or
// the mode is no longer hinted. Each result is merged with the other
// status's last one (a check in both, moving between them: the higher
// ModifyIndex) and the union compared with the previous union (diffFeed).
// When a check left a status's result, the other status is first read
// again (not blocking): the check may have moved there, and its own
// blocking query may not have returned yet; without that read the check
// would be taken as passing for a moment.
func (r *runner) runFeed(ctx context.Context, dc *dcState, out chan<- hint) {
	fctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	rate, burst := r.s.set.feedRate, int(max(r.s.set.feedRate, 1))
	fetch := func(i int) fetchFunc[api.HealthChecks] {
		return func(q *api.QueryOptions) (api.HealthChecks, *api.QueryMeta, error) {
			return r.checksInState(feedStates[i], q)
		}
	}
	results := make(chan feedResult)
	var again [2]*watch // the reads of the other status, owned by this goroutine
	for i := range feedStates {
		what := fmt.Sprintf("%s: health state %s", dc.label, feedStates[i])
		again[i] = r.newWatch(dc, epHealthState, what, &dc.feed[i])
		again[i].bucket = newTokenBucket(rate, burst)
		w := r.newWatch(dc, epHealthState, what, &dc.feed[i])
		w.bucket = newTokenBucket(rate, burst)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for fctx.Err() == nil {
				checks, err := read(fctx, w, true, fetch(i))
				if err != nil {
					continue
				}
				select {
				case results <- feedResult{state: i, checks: checks, index: w.index}:
				case <-fctx.Done():
					return
				}
			}
		}()
	}
	var (
		latest [2]*feedResult
		got    int // the status of the last result
		prev   map[string]feedCheck
	)
	mode := r.modeChanged()
	for {
		select {
		case <-ctx.Done():
			return
		case <-mode:
			if !r.hinted.Load() {
				return
			}
			mode = r.modeChanged()
			continue
		case res := <-results:
			latest[res.state] = &res
			got = res.state
		}
		other := 1 - got
		if latest[other] == nil {
			continue // the first union waits for both statuses
		}
		if prev != nil && leftState(prev, feedStates[got], latest[got].checks) {
			if checks, err := read(ctx, again[other], false, fetch(other)); err == nil && again[other].index >= latest[other].index {
				latest[other] = &feedResult{state: other, checks: checks, index: again[other].index}
			} else if ctx.Err() != nil {
				return
			}
		}
		index := max(latest[0].index, latest[1].index)
		if latest[0].index == 0 || latest[1].index == 0 {
			index = 0 // an index reset
		}
		var h hint
		h, prev = diffFeed(prev, unionChecks(latest[0].checks, latest[1].checks), index)
		select {
		case out <- h:
		case <-ctx.Done():
			return
		}
	}
}

// stateCheck is what the change feed and the check sweep decode of each
// check of /v1/health/state: the fields the source reads (the mapping,
// the host explanations, the patches and the hints), not the check's
// definition, type, interval or tags, which it never reads. A response
// carries every check of a status (or of the datacenter), so decoding
// less of each is most of a read's cost in the bridge.
type stateCheck struct {
	Node, CheckID, Name, Status, Notes, Output, ServiceID, ServiceName string
	Namespace, Partition                                               string
	CreateIndex, ModifyIndex                                           uint64
}

// checksInState reads /v1/health/state/<state> as the API's
// Health().State does, decoding each check as a stateCheck.
func (r *runner) checksInState(state string, q *api.QueryOptions) (api.HealthChecks, *api.QueryMeta, error) {
	var in []*stateCheck
	meta, err := r.client.Raw().Query("/v1/health/state/"+state, &in, q)
	if err != nil {
		return nil, nil, err
	}
	out := make(api.HealthChecks, len(in))
	for i, c := range in {
		if c == nil {
			continue
		}
		out[i] = &api.HealthCheck{Node: c.Node, CheckID: c.CheckID, Name: c.Name, Status: c.Status, Notes: c.Notes, Output: c.Output,
			ServiceID: c.ServiceID, ServiceName: c.ServiceName, Namespace: c.Namespace, Partition: c.Partition,
			CreateIndex: c.CreateIndex, ModifyIndex: c.ModifyIndex}
	}
	return out, meta, nil
}

// leftState reports whether a check of status state in prev is not in
// checks, a new result of that status.
func leftState(prev map[string]feedCheck, state string, checks api.HealthChecks) bool {
	in := make(map[string]bool, len(checks))
	for _, c := range checks {
		if c != nil {
			in[c.Node+"\x00"+c.CheckID] = true
		}
	}
	for key, fc := range prev {
		if fc.check.Status == state && !in[key] {
			return true
		}
	}
	return false
}

// unionChecks merges the results of two statuses: a check in both (it
// moved between them while they were read) is taken at its higher
// ModifyIndex.
func unionChecks(a, b api.HealthChecks) api.HealthChecks {
	out := make(api.HealthChecks, 0, len(a)+len(b))
	at := make(map[string]int, len(a))
	for _, c := range a {
		if c != nil {
			at[c.Node+"\x00"+c.CheckID] = len(out)
			out = append(out, c)
		}
	}
	for _, c := range b {
		if c == nil {
			continue
		}
		if i, ok := at[c.Node+"\x00"+c.CheckID]; ok {
			if c.ModifyIndex > out[i].ModifyIndex {
				out[i] = c
			}
			continue
		}
		out = append(out, c)
	}
	return out
}

// checkSweep reads, on each request on want (in hinted mode), every check
// of the datacenter once, not blocking, and sends to out the hint of what
// the service list's index moved for: services whose service checks are
// not those of their last read (one added, gone, or of another status) and
// services with an instance without checks. One read of the checks
// replaces a read of every service; a check whose output alone changed
// wakes nothing. When it wakes nothing, runDC asks on wantNodes for the
// services of the named nodes (nodeHint).
func (r *runner) checkSweep(ctx context.Context, dc *dcState, want <-chan struct{}, wantNodes <-chan []string, out chan<- hint) {
	// The sweep and the node reads are consistent reads: their results
	// are compared with every service's state, and a server that has just
	// restarted answers other reads from an older snapshot (every check
	// missing at first), which would wake every service. They come only
	// after an unexplained service-list change.
	w := r.newWatch(dc, epHealthState, dc.label+": health state (all checks)", &dc.sweep)
	w.bucket = newTokenBucket(r.s.set.feedRate, int(max(r.s.set.feedRate, 1)))
	w.consistent = true
	fetch := func(q *api.QueryOptions) (api.HealthChecks, *api.QueryMeta, error) {
		return r.checksInState(api.HealthAny, q)
	}
	for {
		var h hint
		select {
		case <-ctx.Done():
			return
		case <-want:
			var checks api.HealthChecks
			for {
				var err error
				if checks, err = read(ctx, w, false, fetch); err == nil {
					break
				}
				if ctx.Err() != nil {
					return
				}
			}
			h = sweepHint(checks)
		case nodes := <-wantNodes:
			lists := make(map[string]*api.CatalogNodeServiceList, len(nodes))
			for _, node := range nodes {
				// A watch of its own: each node's index is its own, and a
				// lower one than another node's is not an index going back.
				nw := r.newWatch(dc, epNodeServices, dc.label+": services of node "+node, &dc.sweep)
				nw.bucket, nw.consistent = w.bucket, true
				fetch := func(q *api.QueryOptions) (*api.CatalogNodeServiceList, *api.QueryMeta, error) {
					return r.client.Catalog().NodeServiceList(node, q)
				}
				for {
					l, err := read(ctx, nw, false, fetch)
					if err == nil {
						lists[node] = l
						break
					}
					if ctx.Err() != nil {
						return
					}
				}
			}
			h = r.nodeHint(dc, lists)
		}
		select {
		case out <- h:
		case <-ctx.Done():
			return
		}
	}
}

// nodeHint is the hint of a read of the services of nodes (lists, by node
// name; nil: the node is gone): the services with an instance on one of
// the nodes that their last read does not have (new), that the node no
// longer has (removed), or that was modified after that read (in place:
// address, port, tags, meta), and the services on a node modified after
// their last read. None found means the list's change was already read
// (another sweep, a refresh, a hint came first), or is a new instance
// without checks on a node none of the services is on: that is read at
// the service's next hinted_refresh, rather than every service now (with
// list changes faster than sweeps, most sweeps would find nothing and
// every service would be read again and again).
func (r *runner) nodeHint(dc *dcState, lists map[string]*api.CatalogNodeServiceList) hint {
	h := hint{wake: map[string]bool{}, orElse: orElseNothing}
	s := r.s
	s.mu.Lock()
	defer s.mu.Unlock()
	// The instances on the nodes read, by service.
	onNodes := map[string]map[string]uint64{} // service → node "\x00" ID → ModifyIndex
	for node, l := range lists {
		if l == nil {
			continue
		}
		for _, sv := range l.Services {
			if sv == nil || dc.services[sv.Service] == nil {
				continue
			}
			m := onNodes[sv.Service]
			if m == nil {
				m = map[string]uint64{}
				onNodes[sv.Service] = m
			}
			idx := sv.ModifyIndex
			if l.Node != nil {
				idx = max(idx, l.Node.ModifyIndex)
			}
			m[node+"\x00"+sv.ID] = idx
		}
	}
	for name, st := range dc.services {
		if !st.ready {
			continue
		}
		// The read's own index: changes applied from the change feed
		// since carry no registration change.
		seen, have, on := st.info.index, 0, onNodes[name]
		for _, e := range st.entries {
			if e == nil || e.Node == nil || e.Service == nil {
				continue
			}
			if _, read := lists[e.Node.Node]; !read {
				continue
			}
			have++
			if idx, ok := on[e.Node.Node+"\x00"+e.Service.ID]; !ok || idx > seen {
				h.wake[name] = true // removed, or modified since
			}
		}
		if len(on) != have {
			h.wake[name] = true // a new instance
		}
	}
	return h
}

// sweepHint is the hint of a read of every check (checkSweep).
func sweepHint(checks api.HealthChecks) hint {
	h := hint{checks: map[string]map[string]string{}, orElse: orElseNodes}
	for _, c := range checks {
		if c == nil || c.ServiceID == "" {
			continue // node checks: the change feed has their status
		}
		m := h.checks[c.ServiceName]
		if m == nil {
			m = map[string]string{}
			h.checks[c.ServiceName] = m
		}
		m[c.Node+"\x00"+c.CheckID] = c.Status
	}
	return h
}

// applyHint brings up to date the services whose last read is older than
// a check modification the change feed saw. A service whose changed checks
// all belong to instances it already has is patched from the feed itself
// (patchEntries) and mapped again, without a read; the others, and every
// service a check sweep names, are woken to read.
func (r *runner) applyHint(ctx context.Context, dc *dcState, h hint, svcs map[string]*serviceWatch) (nodes []string) {
	s := r.s
	s.mu.Lock()
	var wake []string
	var patches []patch
	for name, st := range hintCandidates(dc, h) {
		if !st.ready || !(h.wake[name] || hintWakes(h, name, st)) {
			continue
		}
		if h.checks == nil && h.wake == nil {
			if p, ok := patchEntries(name, st, h); ok {
				patches = append(patches, p)
				continue
			}
		}
		wake = append(wake, name)
	}
	if len(wake) == 0 && len(patches) == 0 && h.orElse == orElseNodes {
		nodes = nodesToRead(dc)
	}
	s.mu.Unlock()
	// The coordinator is signalled once every patch is kept: the changes
	// one read of the feed brought are published together, not the first
	// at once and the others a coalescing window later.
	patched := false
	for _, p := range patches {
		kept, changed := r.storePatch(ctx, dc, p)
		if kept {
			s.metrics.feedPatches.Inc()
		} else {
			wake = append(wake, p.name)
		}
		patched = patched || changed
	}
	if patched {
		s.signal()
	}
	if len(wake) == 0 && len(patches) == 0 && nodes == nil && h.orElse != orElseNothing {
		wakeAll(svcs)
		return nil
	}
	for _, name := range wake {
		if sw := svcs[name]; sw != nil {
			sw.poke()
		}
	}
	return nodes
}

// hintCandidates is the services h may wake: those it names, or every
// service for a hint of node checks or of a check sweep. Callers hold
// Source.mu.
func hintCandidates(dc *dcState, h hint) iter.Seq2[string, *svcState] {
	if h.checks != nil || len(h.nodes) > 0 {
		return maps.All(dc.services)
	}
	names := h.services
	if h.wake != nil {
		names = map[string]uint64{}
		for name := range h.wake {
			names[name] = 0
		}
	}
	return func(yield func(string, *svcState) bool) {
		for name := range names {
			if st := dc.services[name]; st != nil && !yield(name, st) {
				return
			}
		}
	}
}

// nodesToRead is the nodes of the datacenter's selected services, sorted,
// when they are fewer than the services (a read of each node's services
// then costs fewer requests than a read of each service); nil otherwise.
// Callers hold Source.mu.
func nodesToRead(dc *dcState) []string {
	set := map[string]bool{}
	for _, st := range dc.services {
		for n := range st.nodes {
			set[n] = true
			if len(set) >= len(dc.services) {
				return nil
			}
		}
	}
	if len(set) == 0 {
		return nil
	}
	return slices.Sorted(maps.Keys(set))
}

// patch is a service's last health result with the change feed's check
// changes applied.
type patch struct {
	name    string
	st      *svcState
	version uint64 // st.version it was built from
	entries []*api.ServiceEntry
	changes []checkChange // applied
	index   uint64        // the highest index of the changes applied
}

// patchEntries applies to service name's last health result the check
// changes of h newer than that result. It reports false when a change
// cannot be applied so, and the service must be read: a service check of
// an instance the result does not have, a node check on a node it does
// not have, or a check that left the feed after an index reset. Applied:
// a check that appeared or was modified replaces the instance's check of
// that ID (or is added to it); a check that left the feed turned passing
// (its output is not known: it is left empty) or, a maintenance check, was
// deleted. A deleted check that is not a maintenance check is kept as
// passing, which maps to the same health; the next read of the service
// drops it. The result's entries are copied, never modified. Callers hold
// Source.mu.
func patchEntries(name string, st *svcState, h hint) (patch, bool) {
	seen := st.seen()
	var changes []checkChange
	for _, c := range h.byService[name] {
		if c.idx > seen {
			changes = append(changes, c)
		}
	}
	for node := range st.nodes {
		for _, c := range h.byNode[node] {
			if c.idx > seen {
				changes = append(changes, c)
			}
		}
	}
	if len(changes) == 0 || st.entries == nil {
		return patch{}, false
	}
	for _, c := range changes {
		if c.idx == ^uint64(0) { // left the feed at an index reset
			return patch{}, false
		}
	}
	entries, ok := applyChanges(st.entries, changes)
	if !ok {
		return patch{}, false
	}
	p := patch{name: name, st: st, version: st.version, entries: entries, changes: changes}
	for _, c := range changes {
		p.index = max(p.index, c.idx)
	}
	return p, true
}

// applyChanges returns entries with the check changes applied (applyCheck),
// the entries changed copied, never modified; false when a change's
// instance is not in entries.
func applyChanges(entries []*api.ServiceEntry, changes []checkChange) ([]*api.ServiceEntry, bool) {
	out := slices.Clone(entries)
	copied := make([]bool, len(out))
	for _, c := range changes {
		found := false
		for i, e := range out {
			if !onInstance(e, c.check) {
				continue
			}
			found = true
			if !copied[i] {
				ce := *e
				ce.Checks = slices.Clone(e.Checks)
				out[i], copied[i] = &ce, true
			}
			out[i].Checks = applyCheck(out[i].Checks, c)
		}
		if !found {
			return nil, false
		}
	}
	return out, true
}

// applyCheck applies one check change to an instance's checks (a slice
// the caller owns).
func applyCheck(checks api.HealthChecks, c checkChange) api.HealthChecks {
	i := slices.IndexFunc(checks, func(x *api.HealthCheck) bool { return x != nil && x.CheckID == c.check.CheckID })
	switch {
	case !c.left && i >= 0:
		checks[i] = c.check
	case !c.left:
		checks = append(checks, c.check)
	case i < 0: // gone already
	case isMaintenance(c.check.CheckID):
		checks = slices.Delete(checks, i, i+1)
	default:
		passing := *checks[i]
		passing.Status, passing.Output = api.HealthPassing, ""
		checks[i] = &passing
	}
	return checks
}

func isMaintenance(checkID string) bool {
	return checkID == nodeMaintCheckID || strings.HasPrefix(checkID, serviceMaintPrefix)
}

// storePatch maps a patched result and keeps it, unless the service was
// read (or patched) again or removed meanwhile: then it reports false. It
// reports whether the mapped state changed, without signalling (keep).
func (r *runner) storePatch(ctx context.Context, dc *dcState, p patch) (kept, changed bool) {
	return r.keep(ctx, dc, p.name, p.st, p.entries, func(st *svcState) bool {
		if st.version != p.version {
			return false
		}
		st.feedIndex = max(st.feedIndex, p.index)
		// The latest change of each check is enough to apply again.
		st.applied = slices.DeleteFunc(slices.Clone(st.applied), func(old checkChange) bool {
			return slices.ContainsFunc(p.changes, func(c checkChange) bool {
				return c.check.Node == old.check.Node && c.check.CheckID == old.check.CheckID
			})
		})
		st.applied = append(st.applied, p.changes...)
		return true
	})
}

// hintWakes reports whether h calls for a new read of service name.
func hintWakes(h hint, name string, st *svcState) bool {
	seen := st.seen()
	if idx, ok := h.services[name]; ok && idx > seen {
		return true
	}
	for node := range st.nodes {
		if idx, ok := h.nodes[node]; ok && idx > seen {
			return true
		}
	}
	if h.checks == nil {
		return false
	}
	return st.checkless || !maps.Equal(st.checks, h.checks[name])
}
