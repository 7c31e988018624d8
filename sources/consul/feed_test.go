package consul

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/xdsbridge/xdsbridge/sources"
	"github.com/xdsbridge/xdsbridge/sources/sourcestest"
)

func feedCheckOf(node, id, svc string, status string, modify uint64) *api.HealthCheck {
	c := &api.HealthCheck{Node: node, CheckID: id, ServiceName: svc, Status: status}
	if svc != "" {
		c.ServiceID = svc + "-1"
	}
	c.ModifyIndex = modify
	return c
}

// The narrowed change feed holds only checks that are not passing: a
// check turning passing (or deleted) leaves the result, and the diff must
// name its service at the result's index; unchanged checks name nothing.
func TestChangeFeedDiffSeesChecksLeaving(t *testing.T) {
	h, prev := diffFeed(nil, api.HealthChecks{
		feedCheckOf("n1", "a-chk", "a", api.HealthCritical, 10),
		feedCheckOf("n1", "serfHealth", "", api.HealthCritical, 11),
	}, 12)
	if h.services["a"] != 10 || h.nodes["n1"] != 11 || len(h.services) != 1 {
		t.Fatalf("first read: hint %+v", h)
	}
	h, prev = diffFeed(prev, api.HealthChecks{
		feedCheckOf("n1", "a-chk", "a", api.HealthCritical, 10),
		feedCheckOf("n2", "b-chk", "b", api.HealthWarning, 14),
	}, 15)
	if len(h.services) != 1 || h.services["b"] != 14 || h.nodes["n1"] != 15 || len(h.nodes) != 1 {
		t.Fatalf("b warning, n1 passing: hint %+v", h)
	}
	h, prev = diffFeed(prev, api.HealthChecks{
		feedCheckOf("n1", "a-chk", "a", api.HealthWarning, 16),
	}, 17)
	if h.services["a"] != 16 || h.services["b"] != 17 || len(h.nodes) != 0 {
		t.Fatalf("a warning, b passing: hint %+v", h)
	}
	h, _ = diffFeed(prev, api.HealthChecks{feedCheckOf("n1", "a-chk", "a", api.HealthWarning, 16)}, 0)
	if len(h.services) != 0 || len(h.nodes) != 0 {
		t.Fatalf("nothing changed: hint %+v", h)
	}
	h, _ = diffFeed(prev, nil, 0)
	if h.services["a"] != ^uint64(0) {
		t.Fatalf("index reset: a check that left must wake its service: hint %+v", h)
	}
}

// A read of every check (after the service list's index moved) wakes the
// services whose checks are not those of their last read: one added, gone
// or of another status, or an instance without checks. A check whose
// output alone changed since (a higher ModifyIndex, the same status) wakes
// nothing.
func TestCheckSweepWakesOnlyChangedServices(t *testing.T) {
	read := func(checks map[string]string, checkless bool) *svcState {
		st := &svcState{ready: true, checks: checks, checkless: checkless}
		st.info.index = 5
		return st
	}
	h := sweepHint(api.HealthChecks{
		feedCheckOf("n1", "a-chk", "a", api.HealthPassing, 100),
		feedCheckOf("n1", "b-chk", "b", api.HealthPassing, 3),
		feedCheckOf("n2", "b-chk", "b", api.HealthPassing, 4),
		feedCheckOf("n1", "c-chk", "c", api.HealthCritical, 3),
		feedCheckOf("n1", "serfHealth", "", api.HealthCritical, 100),
	})
	for _, tc := range []struct {
		name string
		st   *svcState
		want bool
	}{
		{"a", read(map[string]string{"n1\x00a-chk": api.HealthPassing}, false), false},
		{"b", read(map[string]string{"n1\x00b-chk": api.HealthPassing}, false), true},
		{"c", read(map[string]string{"n1\x00c-chk": api.HealthPassing}, false), true},
		{"d", read(map[string]string{"n1\x00d-chk": api.HealthPassing}, false), true},
		{"a", read(map[string]string{"n1\x00a-chk": api.HealthPassing}, true), true},
	} {
		if got := hintWakes(h, tc.name, tc.st); got != tc.want {
			t.Errorf("%s (checks %q, checkless %v): wakes %v, want %v", tc.name, tc.st.checks, tc.st.checkless, got, tc.want)
		}
	}
}

// A snapshot rebuilds only the clusters whose service states changed:
// the others are the previous snapshot's values with the same Endpoints
// slices, and an unchanged state reports no change.
func TestSnapshotReusesUnchangedServices(t *testing.T) {
	set, err := parseConfig([]byte(`{}`), "")
	if err != nil {
		t.Fatal(err)
	}
	d := newDCState("dc1", 0)
	d.actual = "dc1"
	state := func(port uint32) *svcState {
		return &svcState{ready: true, published: true, instances: []instance{{endpoint: sources.Endpoint{Address: "10.0.0.1", Port: port}}}}
	}
	for i := 0; i < 3; i++ {
		d.services[fmt.Sprintf("s%d", i)] = state(uint32(80 + i))
	}
	s := &Source{set: set, log: slog.New(slog.NewTextHandler(io.Discard, nil)), dcs: []*dcState{d}}
	first, changed := s.snapshotLocked()
	if !changed || len(first) != 3 {
		t.Fatalf("first snapshot: changed %v, %+v", changed, first)
	}
	if _, changed := s.snapshotLocked(); changed {
		t.Fatal("a snapshot of unchanged states reports a change")
	}
	st := state(90)
	s.genSeq++
	st.gen = s.genSeq
	d.services["s1"] = st
	s.touchLocked(d, "s1")
	second, changed := s.snapshotLocked()
	if !changed || len(second) != 3 || second[1].Endpoints[0].Port != 90 {
		t.Fatalf("after s1 changed: changed %v, %+v", changed, second)
	}
	for _, i := range []int{0, 2} {
		if &second[i].Endpoints[0] != &first[i].Endpoints[0] {
			t.Errorf("%s unchanged but built again", second[i].Name)
		}
	}
	// A state is built again only at a new generation: s0's instances
	// replaced without one are not read, touched or not.
	d.services["s0"].instances = state(99).instances
	s.touchLocked(d, "s0")
	if again, _ := s.snapshotLocked(); again[0].Endpoints[0].Port != 80 {
		t.Errorf("s0 built again without a new generation: %+v", again[0])
	}
	// A new generation with the same endpoints is no change.
	s.genSeq++
	st.gen = s.genSeq
	s.touchLocked(d, "s1")
	if _, changed := s.snapshotLocked(); changed {
		t.Error("a rebuilt cluster with the same endpoints reports a change")
	}
	delete(d.services, "s2")
	s.touchLocked(d, "s2")
	third, changed := s.snapshotLocked()
	if !changed || len(third) != 2 {
		t.Fatalf("after s2 removed: changed %v, %+v", changed, third)
	}
}

// pathCounter counts requests by URL path.
type pathCounter struct {
	next http.RoundTripper
	mu   sync.Mutex
	n    map[string]int
}

// settle waits for the start-up reads to end: no read of a service's
// health or a node's services for 300ms (at most 10s, on a loaded
// machine), then drops the counts.
func (c *pathCounter) settle() {
	deadline := time.Now().Add(10 * time.Second)
	c.take()
	for time.Now().Before(deadline) {
		time.Sleep(300 * time.Millisecond)
		quiet := true
		for p := range c.take() {
			if strings.HasPrefix(p, "/v1/health/service/") || strings.HasPrefix(p, "/v1/catalog/node-services/") {
				quiet = false
			}
		}
		if quiet {
			return
		}
	}
}

func (c *pathCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.n[r.URL.Path]++
	c.mu.Unlock()
	return c.next.RoundTrip(r)
}

func (c *pathCounter) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.n
	c.n = map[string]int{}
	return out
}

// In hinted mode, an instance registered with a check into a service that
// is already listed moves the service list's index without changing the
// list: one read of every check finds the service, and only it is read
// again, not every service.
func TestHintedModeRegistrationReadsOnlyItsService(t *testing.T) {
	a := startAgent(t, "dc1")
	const n = 8
	registerTTLServices(a, n)
	s, sink, pc := startHintedSource(t, a)
	waitService(t, sink, fmt.Sprintf("s%d", n-1), endpoints(t, instanceWant{a: a, id: fmt.Sprintf("s%d-1", n-1), name: fmt.Sprintf("s%d", n-1), addr: "127.0.3.1", port: 1000 + n - 1, health: sources.HealthHealthy, weight: 3}))
	if d := s.DebugInfo().(Debug); d.Datacenters[0].Feed == nil {
		t.Fatalf("not in hinted mode: %+v", d.Datacenters[0])
	}
	pc.settle() // the start-up reads end
	a.Register(ttlService("s2-2", "s2", "127.0.3.2", 1002, nil, nil, api.HealthPassing))
	waitFor(t, "s2's second instance", func() bool {
		u, ok := sink.Last()
		if !ok {
			return false
		}
		sv, ok := findService(u, "s2")
		return ok && len(sv.Endpoints) == 2
	})
	time.Sleep(300 * time.Millisecond)
	var others []string
	for path, c := range pc.take() {
		if strings.HasPrefix(path, "/v1/health/service/") && path != "/v1/health/service/s2" {
			others = append(others, fmt.Sprintf("%s×%d", path, c))
		}
	}
	if len(others) > 0 {
		t.Errorf("a registration into s2 read other services: %v", others)
	}
}

// registerTTLServices registers s0..s<n-1> on the agent, one instance
// each (s<i>-1 at 127.0.3.1:1000+i) with a passing TTL check.
func registerTTLServices(a *agent, n int) {
	for i := 0; i < n; i++ {
		a.Register(ttlService(fmt.Sprintf("s%d-1", i), fmt.Sprintf("s%d", i), "127.0.3.1", 1000+i, nil, nil, api.HealthPassing))
	}
}

// startHintedSource runs a source on a with 4 query slots (hinted mode
// from 2 services on) and a counter of its requests by path. Its
// hinted_refresh is 24h: with the default (5m, first refresh uniformly
// within it) a service's refresh read would land in a test's window a
// few times in a hundred runs and be counted as a read the feed caused.
func startHintedSource(t *testing.T, a *agent) (*Source, *sourcestest.Sink, *pathCounter) {
	pc := &pathCounter{n: map[string]int{}}
	s, sink := startSourceWith(t, baseConfig(a.Addr(), `, "max_concurrent_queries": 4, "hinted_refresh": "24h", "services": {"exclude": ["consul"]}`), func(s *Source) {
		s.wrapRoundTripper = func(next http.RoundTripper) http.RoundTripper { pc.next = next; return pc }
	})
	return s, sink, pc
}

func findService(u sources.Update, name string) (sources.Service, bool) {
	for _, s := range u.Services {
		if s.Name == name {
			return s, true
		}
	}
	return sources.Service{}, false
}

// A hinted-mode source's start-up reads open at most max_concurrent_reads
// connections besides its held queries, and once they are done the
// connections beyond the held queries and idleConns idle ones are closed,
// not kept against the agent's per-client limit.
func TestHintedModeClosesBurstConnections(t *testing.T) {
	a := startAgent(t, "dc1")
	registerMany(t, a, 120)
	conns := &connCounter{}
	var peak atomic.Int64 // the most connections open at once
	_, sink := startSourceWith(t, baseConfig(a.Addr(), `, "services": {"exclude": ["consul"]}`), func(s *Source) {
		s.wrapConn = func(c net.Conn) net.Conn {
			open := conns.dials.Add(1) - conns.closes.Load()
			for p := peak.Load(); open > p && !peak.CompareAndSwap(p, open); p = peak.Load() {
			}
			return &countedConn{Conn: c, c: conns}
		}
	})
	sink.WaitFor(t, time.Minute, "first publish", func(us []sources.Update, _ []error) bool { return len(us) > 0 })
	open := func() int64 { return conns.dials.Load() - conns.closes.Load() }
	// The held queries (service list, change feed), idleConns idle, the
	// liveness probe's.
	const want = int64(heldPerDC + idleConns + 1)
	waitFor(t, fmt.Sprintf("at most %d open connections (dialed %d)", want, conns.dials.Load()), func() bool { return open() <= want })
	// The start-up reads (120 services) run at most max_concurrent_reads
	// (16) at once: besides the held queries and the probe, the burst has
	// no more connections in use than that, and the pool keeps at most
	// idleConns more open (a dial for a new request can race another
	// request's connection on its way back to the pool).
	if p, bound := peak.Load(), int64(heldPerDC+16+1+idleConns); p > bound {
		t.Errorf("%d connections open at once during the start-up reads, want at most %d", p, bound)
	}
	t.Logf("dialed %d, at most %d open at once, open %d", conns.dials.Load(), peak.Load(), open())
}

// The change feed's check changes are applied to a service's last result
// when every one concerns an instance it has: a check modified or added,
// a check that left the feed turned passing (a maintenance check: was
// deleted), a node check on each of the node's instances. A service check
// of an unknown instance, a node the service is not on, or a check that
// left at an index reset cannot be applied: the service is read. The last
// result is never modified.
func TestChangeFeedPatchesKnownInstances(t *testing.T) {
	entry := func(node, id string, checks ...*api.HealthCheck) *api.ServiceEntry {
		return &api.ServiceEntry{Node: &api.Node{Node: node}, Service: &api.AgentService{ID: id, Service: "a"}, Checks: checks}
	}
	chk := func(node, id, svcID, status string) *api.HealthCheck {
		c := &api.HealthCheck{Node: node, CheckID: id, Status: status, Output: "out " + status}
		if svcID != "" {
			c.ServiceID, c.ServiceName = svcID, "a"
		}
		return c
	}
	base := func() *svcState {
		st := &svcState{ready: true, nodes: map[string]bool{"n1": true, "n2": true}, entries: []*api.ServiceEntry{
			entry("n1", "a-1", chk("n1", "serfHealth", "", api.HealthPassing), chk("n1", "a-1-chk", "a-1", api.HealthPassing)),
			entry("n2", "a-2", chk("n2", "serfHealth", "", api.HealthPassing), chk("n2", "a-2-chk", "a-2", api.HealthCritical)),
		}}
		st.info.index = 10
		return st
	}
	status := func(es []*api.ServiceEntry, i int, id string) string {
		for _, c := range es[i].Checks {
			if c.CheckID == id {
				return c.Status
			}
		}
		return "absent"
	}
	hintOf := func(changes ...checkChange) hint {
		h := newHint()
		for _, c := range changes {
			h.add(c.check, c.idx, c.left)
		}
		return h
	}

	st := base()
	p, ok := patchEntries("a", st, hintOf(
		checkChange{check: chk("n1", "a-1-chk", "a-1", api.HealthCritical), idx: 11},
		checkChange{check: chk("n2", "a-2-chk", "a-2", api.HealthCritical), idx: 12, left: true},
		checkChange{check: chk("n1", "_service_maintenance:a-1", "a-1", api.HealthCritical), idx: 13},
		checkChange{check: chk("n2", "serfHealth", "", api.HealthCritical), idx: 14},
		checkChange{check: chk("n3", "serfHealth", "", api.HealthCritical), idx: 15},
	))
	if !ok || p.index != 14 {
		t.Fatalf("patch: ok %v, index %d", ok, p.index)
	}
	for _, c := range []struct {
		entry      int
		id, status string
	}{
		{0, "a-1-chk", api.HealthCritical},
		{0, "_service_maintenance:a-1", api.HealthCritical},
		{0, "serfHealth", api.HealthPassing},
		{1, "a-2-chk", api.HealthPassing},
		{1, "serfHealth", api.HealthCritical},
	} {
		if got := status(p.entries, c.entry, c.id); got != c.status {
			t.Errorf("%s of entry %d: %s, want %s", c.id, c.entry, got, c.status)
		}
	}
	if got := status(st.entries, 0, "a-1-chk"); got != api.HealthPassing || len(st.entries[0].Checks) != 2 || status(st.entries, 1, "a-2-chk") != api.HealthCritical {
		t.Errorf("the last result was modified: %+v", st.entries)
	}

	st.entries = p.entries
	st.feedIndex = p.index
	p, ok = patchEntries("a", st, hintOf(checkChange{check: chk("n1", "_service_maintenance:a-1", "a-1", api.HealthCritical), idx: 20, left: true}))
	if !ok || status(p.entries, 0, "_service_maintenance:a-1") != "absent" {
		t.Errorf("maintenance check leaving the feed: ok %v, checks %+v", ok, p.entries[0].Checks)
	}
	if _, ok := patchEntries("a", st, hintOf(checkChange{check: chk("n1", "a-1-chk", "a-1", api.HealthWarning), idx: 14})); ok {
		t.Error("a change at an index already applied patched again")
	}

	for what, c := range map[string]checkChange{
		"unknown instance":       {check: chk("n1", "a-9-chk", "a-9", api.HealthCritical), idx: 30},
		"unknown node":           {check: chk("n9", "a-1-chk", "a-1", api.HealthCritical), idx: 30},
		"left at an index reset": {check: chk("n1", "a-1-chk", "a-1", api.HealthCritical), idx: ^uint64(0), left: true},
	} {
		if _, ok := patchEntries("a", base(), hintOf(c)); ok {
			t.Errorf("%s: patched, want a read", what)
		}
	}
}

// In hinted mode a check flip of a known instance (critical, passing,
// warning), and service maintenance turned on and off, reach the sink from
// the change feed alone: no read of the service.
func TestHintedModeFlipsWithoutServiceRead(t *testing.T) {
	a := startAgent(t, "dc1")
	const n = 8
	registerTTLServices(a, n)
	s, sink, pc := startHintedSource(t, a)
	want := func(health sources.HealthStatus) []sources.Endpoint {
		weight := uint32(3)
		if health == sources.HealthDraining {
			weight = 0
		}
		return endpoints(t, instanceWant{a: a, id: "s3-1", name: "s3", addr: "127.0.3.1", port: 1003, health: health, weight: weight})
	}
	waitService(t, sink, "s3", want(sources.HealthHealthy))
	if d := s.DebugInfo().(Debug); d.Datacenters[0].Feed == nil {
		t.Fatalf("not in hinted mode: %+v", d.Datacenters[0])
	}
	pc.settle() // the start-up reads end
	a.TTL("s3-1-ttl", api.HealthCritical)
	waitService(t, sink, "s3", want(sources.HealthUnhealthy))
	a.TTL("s3-1-ttl", api.HealthPassing)
	waitService(t, sink, "s3", want(sources.HealthHealthy))
	if err := a.Client.Agent().EnableServiceMaintenance("s3-1", "test"); err != nil {
		t.Fatal(err)
	}
	waitService(t, sink, "s3", want(sources.HealthDraining))
	if err := a.Client.Agent().DisableServiceMaintenance("s3-1"); err != nil {
		t.Fatal(err)
	}
	waitService(t, sink, "s3", want(sources.HealthHealthy))
	time.Sleep(300 * time.Millisecond)
	for path, c := range pc.take() {
		if strings.HasPrefix(path, "/v1/health/service/") {
			t.Errorf("read %s ×%d; the change feed carries every change", path, c)
		}
	}
}

// In hinted mode, an instance changed in place (its meta) with its checks
// untouched moves the service list's index, and a read of every check
// does not show it: the services of the nodes are read (fewer nodes than
// services) and only the changed service is read again, not every one.
func TestHintedModeInPlaceChangeReadsOnlyItsService(t *testing.T) {
	a := startAgent(t, "dc1")
	const n = 8
	register := func(i int, meta map[string]string) {
		node := fmt.Sprintf("cat-node-%d", i%2)
		svc := fmt.Sprintf("s%d", i)
		if _, err := a.Client.Catalog().Register(&api.CatalogRegistration{
			Node: node, Address: "127.0.3.9", SkipNodeUpdate: true,
			Service: &api.AgentService{ID: svc + "-1", Service: svc, Port: 2000 + i, Meta: meta},
			Check:   &api.AgentCheck{Node: node, CheckID: svc + "-chk", Name: "c", Status: api.HealthPassing, ServiceID: svc + "-1"},
		}, nil); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < n; i++ {
		register(i, nil)
	}
	s, sink, pc := startHintedSource(t, a)
	metaOf := func(name string) any {
		u, ok := sink.Last()
		if !ok {
			return nil
		}
		sv, ok := findService(u, name)
		if !ok || len(sv.Endpoints) != 1 {
			return nil
		}
		return sv.Endpoints[0].Metadata["consul"]["meta.version"]
	}
	waitFor(t, "every service", func() bool {
		u, ok := sink.Last()
		return ok && len(u.Services) == n
	})
	if d := s.DebugInfo().(Debug); d.Datacenters[0].Feed == nil {
		t.Fatalf("not in hinted mode: %+v", d.Datacenters[0])
	}
	pc.settle()
	register(2, map[string]string{"version": "2"})
	waitFor(t, "s2's new meta", func() bool { return metaOf("s2") == "2" })
	time.Sleep(300 * time.Millisecond)
	var others []string
	reqs := pc.take()
	for path, c := range reqs {
		if strings.HasPrefix(path, "/v1/health/service/") && path != "/v1/health/service/s2" {
			others = append(others, fmt.Sprintf("%s×%d", path, c))
		}
	}
	if len(others) > 0 {
		t.Errorf("a change in place of s2 read other services: %v", others)
	}
	if reqs["/v1/catalog/node-services/cat-node-0"] != 1 || reqs["/v1/catalog/node-services/cat-node-1"] != 1 {
		t.Errorf("node services not read once each: %v", reqs)
	}
}

// A read of a service keeps the changes applied from the change feed
// before it that it does not have (a server behind the feed's), and drops
// those it has, by each check's ModifyIndex: a read never takes back what
// the feed showed, and is never refused for it.
func TestReadKeepsNewerFeedChanges(t *testing.T) {
	entry := func(status string, modify uint64) []*api.ServiceEntry {
		return []*api.ServiceEntry{{Node: &api.Node{Node: "n1"}, Service: &api.AgentService{ID: "a-1", Service: "a"},
			Checks: api.HealthChecks{{Node: "n1", CheckID: "a-chk", ServiceID: "a-1", ServiceName: "a", Status: status, ModifyIndex: modify}}}}
	}
	critical := &api.HealthCheck{Node: "n1", CheckID: "a-chk", ServiceID: "a-1", ServiceName: "a", Status: api.HealthCritical, ModifyIndex: 20}
	statusOf := func(es []*api.ServiceEntry) string {
		if len(es[0].Checks) == 0 {
			return "absent"
		}
		return es[0].Checks[0].Status
	}
	for _, tc := range []struct {
		what    string
		read    []*api.ServiceEntry
		applied checkChange
		want    string
		kept    bool
	}{
		{"read before the check turned critical", entry(api.HealthPassing, 10), checkChange{check: critical, idx: 20}, api.HealthCritical, true},
		{"read with the critical check", entry(api.HealthCritical, 20), checkChange{check: critical, idx: 20}, api.HealthCritical, false},
		{"read after it turned passing again", entry(api.HealthPassing, 30), checkChange{check: critical, idx: 20}, api.HealthPassing, false},
		{"read before it turned passing", entry(api.HealthCritical, 20), checkChange{check: critical, idx: 25, left: true}, api.HealthPassing, true},
		{"read after it turned passing", entry(api.HealthPassing, 25), checkChange{check: critical, idx: 25, left: true}, api.HealthPassing, false},
		{"read after it was deleted", []*api.ServiceEntry{{Node: &api.Node{Node: "n1"}, Service: &api.AgentService{ID: "a-1", Service: "a"}}}, checkChange{check: critical, idx: 25, left: true}, "absent", false},
	} {
		got, keep := reapply(tc.read, []checkChange{tc.applied})
		if statusOf(got) != tc.want || (len(keep) > 0) != tc.kept {
			t.Errorf("%s: status %s, change kept %v; want %s, %v", tc.what, statusOf(got), len(keep) > 0, tc.want, tc.kept)
		}
		if tc.kept && statusOf(tc.read) == tc.want {
			t.Errorf("%s: the read was modified", tc.what)
		}
	}
}

// In hinted mode the first hinted_refresh of each service comes at a
// random time within the period, not all within its last fifth: services
// (and replicas) started together do not read again together.
func TestHintedRefreshSpreadFromStart(t *testing.T) {
	a := startAgent(t, "dc1")
	registerMany(t, a, 120)
	pc := &pathCounter{n: map[string]int{}}
	_, sink := startSourceWith(t, baseConfig(a.Addr(), `, "hinted_refresh": "10s", "services": {"exclude": ["consul"]}`), func(s *Source) {
		s.wrapRoundTripper = func(next http.RoundTripper) http.RoundTripper { pc.next = next; return pc }
	})
	sink.WaitFor(t, time.Minute, "first publish", func(us []sources.Update, _ []error) bool { return len(us) > 0 })
	pc.take()
	time.Sleep(3 * time.Second)
	reads := 0
	for path, c := range pc.take() {
		if strings.HasPrefix(path, "/v1/health/service/") {
			reads += c
		}
	}
	// Uniform over 10 s: about 36 of 120 in 3 s; none if every first
	// refresh came within the period's last fifth (8–10 s).
	if reads < 10 {
		t.Errorf("%d services refreshed in the first 3s of a 10s hinted_refresh, want about 36", reads)
	}
	t.Logf("%d refresh reads in 3s", reads)
}

// In hinted mode, the check changes one read of the change feed brings
// are published together: 60 services' checks turned critical in one
// transaction (one index, so one feed result) reach the sink in one
// publish, not the first alone and the others a coalescing window later.
func TestFeedReadPublishesItsChangesTogether(t *testing.T) {
	a := startAgent(t, "dc1")
	const n, flipped = 80, 60
	registerCatalog(t, a, n, scaleNodes)
	// No hinted_refresh read of a flipped service between the transaction
	// and the feed's response: it would publish that service alone.
	_, sink := startSourceWith(t, baseConfig(a.Addr(), `, "max_concurrent_queries": 4, "hinted_refresh": "24h", "services": {"exclude": ["consul"]}`), nil)
	unhealthy := func(u sources.Update) int {
		addr := scaleAddr(0)
		c := 0
		for i := range flipped {
			sv, _ := findService(u, scaleName(i))
			for _, e := range sv.Endpoints {
				if e.Address == addr && e.Health == sources.HealthUnhealthy {
					c++
				}
			}
		}
		return c
	}
	waitFor(t, "every service", func() bool {
		u, ok := sink.Last()
		return ok && len(u.Services) == n
	})
	time.Sleep(500 * time.Millisecond) // the start-up reads settle
	before := len(sink.Updates())
	var ops api.TxnOps
	for i := range flipped {
		node, _ := scaleNode(scaleNodes, i, 0)
		inst := scaleInstance(i, 0)
		ops = append(ops, &api.TxnOp{Check: &api.CheckTxnOp{Verb: api.CheckSet, Check: api.HealthCheck{
			Node: node, CheckID: inst.ID + "-chk", Name: "bench", Status: api.HealthCritical, ServiceID: inst.ID, ServiceName: inst.Service}}})
	}
	if ok, resp, _, err := a.Client.Txn().Txn(ops, nil); err != nil || !ok {
		t.Fatalf("transaction: %v %+v", err, resp)
	}
	waitFor(t, "the flipped checks", func() bool {
		u, ok := sink.Last()
		return ok && unhealthy(u) == flipped
	})
	for _, u := range sink.Updates()[before:] {
		if c := unhealthy(u); c > 0 && c < flipped {
			t.Fatalf("a publish shows %d of the %d checks one feed read brought", c, flipped)
		}
	}
}
