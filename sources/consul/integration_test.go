package consul

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/consul/api"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/xdsbridge/xdsbridge/sources"
	"github.com/xdsbridge/xdsbridge/sources/sourcestest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const waitLong = 20 * time.Second

// baseConfig is a source config for tests: quick retries, short waits.
func baseConfig(addr string, extra string) string {
	return fmt.Sprintf(`{"address": %q, "wait_time": "30s", "coalesce": "10ms", "retry_min": "100ms", "retry_max": "1s",
		"rate_limit": 50, "rate_burst": 50 %s}`, addr, extra)
}

// instanceWant describes an expected endpoint; node meta is read from the
// agent so the expectation follows what Consul reports.
type instanceWant struct {
	id, name, addr, hostname string
	port                     int
	tags                     []string
	meta                     map[string]string
	health                   sources.HealthStatus
	weight                   uint32
	priority                 uint32
	a                        *agent
}

func (w instanceWant) endpoint(t testing.TB) sources.Endpoint {
	t.Helper()
	node, _, err := w.a.Client.Catalog().Node(w.a.Node, nil)
	if err != nil {
		t.Fatal(err)
	}
	md := map[string]any{"datacenter": w.a.DC, "node": w.a.Node, "service_id": w.id, "service": w.name}
	tags := []any{}
	for _, tg := range w.tags {
		tags = append(tags, tg)
		md["tag."+tg] = true
	}
	md["tags"] = tags
	for k, v := range w.meta {
		md["meta."+k] = v
	}
	for k, v := range node.Node.Meta {
		md["node_meta."+k] = v
	}
	return sources.Endpoint{
		Address: w.addr, Port: uint32(w.port), Hostname: w.hostname, Weight: w.weight, Priority: w.priority,
		Locality: sources.Locality{Region: w.a.DC, Zone: "z-" + w.a.DC},
		Health:   w.health,
		Metadata: sources.Metadata{"consul": md},
	}
}

func endpoints(t testing.TB, ws ...instanceWant) []sources.Endpoint {
	out := []sources.Endpoint{}
	for _, w := range ws {
		out = append(out, w.endpoint(t))
	}
	sources.SortEndpoints(out)
	return out
}

// waitService waits until the last update has service name with exactly
// want (nil: the service is absent).
func waitService(t testing.TB, sink *sourcestest.Sink, name string, want []sources.Endpoint) {
	t.Helper()
	var diff string
	// WaitFor fails with Fatal (runtime.Goexit), which still runs defers.
	defer func() {
		if t.Failed() {
			t.Logf("last diff for %s (-want +got):\n%s", name, diff)
		}
	}()
	sink.WaitFor(t, waitLong, "service "+name, func(us []sources.Update, _ []error) bool {
		if len(us) == 0 {
			diff = "no update"
			return false
		}
		svc, ok := sourcestest.Service(us[len(us)-1], name)
		switch {
		case want == nil && !ok:
			return true
		case want == nil:
			diff = "service still present"
			return false
		case !ok:
			diff = "service absent"
			return false
		}
		diff = cmp.Diff(want, svc.Endpoints)
		return diff == ""
	})
}

func serviceNames(u sources.Update) []string {
	var out []string
	for _, s := range u.Services {
		out = append(out, s.Name)
	}
	sort.Strings(out)
	return out
}

func TestAgentHealthMappingAndSelection(t *testing.T) {
	a := startAgent(t, "dc1")
	a.Register(ttlService("web-1", "web", "127.0.0.10", 8080, []string{"v1", "blue"}, map[string]string{"version": "1"}, api.HealthPassing))
	a.Register(ttlService("web-2", "web", "", 8081, []string{"v2"}, nil, api.HealthPassing))
	a.Register(ttlService("db-1", "db", "127.0.0.20", 5432, nil, nil, api.HealthPassing))
	a.Register(ttlService("named-1", "named", "localhost", 9000, nil, nil, api.HealthPassing))
	a.Register(&api.AgentServiceRegistration{ID: "web-proxy", Name: "web-sidecar-proxy", Kind: api.ServiceKindConnectProxy, Port: 21000,
		Proxy: &api.AgentServiceConnectProxyConfig{DestinationServiceName: "web", DestinationServiceID: "web-1"}})

	s, sink := startSource(t, baseConfig(a.Addr(), `, "services": {"exclude": ["consul", "/^db/"]}`))

	web1 := instanceWant{a: a, id: "web-1", name: "web", addr: "127.0.0.10", port: 8080, tags: []string{"v1", "blue"}, meta: map[string]string{"version": "1"}, health: sources.HealthHealthy, weight: 3}
	web2 := instanceWant{a: a, id: "web-2", name: "web", addr: "127.0.0.1", port: 8081, tags: []string{"v2"}, health: sources.HealthHealthy, weight: 3}
	named := instanceWant{a: a, id: "named-1", name: "named", addr: "127.0.0.1", hostname: "localhost", port: 9000, health: sources.HealthHealthy, weight: 3}
	waitService(t, sink, "web", endpoints(t, web1, web2))
	waitService(t, sink, "named", endpoints(t, named))
	first := sink.Updates()[0]
	if diff := cmp.Diff([]string{"named", "web"}, serviceNames(first)); diff != "" {
		t.Errorf("first update's services (-want +got):\n%s", diff)
	}

	steps := []struct {
		name   string
		act    func()
		web1   sources.HealthStatus
		weight uint32
		web2   sources.HealthStatus
	}{
		{"ttl warning", func() { a.TTL("web-1-ttl", api.HealthWarning) }, sources.HealthHealthy, 1, sources.HealthHealthy},
		{"ttl critical", func() { a.TTL("web-1-ttl", api.HealthCritical) }, sources.HealthUnhealthy, 3, sources.HealthHealthy},
		{"ttl passing", func() { a.TTL("web-1-ttl", api.HealthPassing) }, sources.HealthHealthy, 3, sources.HealthHealthy},
		{"service maintenance", func() { must(t, a.Client.Agent().EnableServiceMaintenance("web-2", "test")) }, sources.HealthHealthy, 3, sources.HealthDraining},
		{"service maintenance off", func() { must(t, a.Client.Agent().DisableServiceMaintenance("web-2")) }, sources.HealthHealthy, 3, sources.HealthHealthy},
		{"node maintenance", func() { must(t, a.Client.Agent().EnableNodeMaintenance("test")) }, sources.HealthDraining, 0, sources.HealthDraining},
		{"node maintenance off", func() { must(t, a.Client.Agent().DisableNodeMaintenance()) }, sources.HealthHealthy, 3, sources.HealthHealthy},
	}
	for _, st := range steps {
		st.act()
		w1, w2 := web1, web2
		w1.health, w1.weight = st.web1, st.weight
		w2.health = st.web2
		if st.web2 == sources.HealthDraining {
			w2.weight = 0
		}
		t.Logf("step %s", st.name)
		waitService(t, sink, "web", endpoints(t, w1, w2))
	}

	// Node maintenance changed every service of the node: named's update
	// may still be on its way; let the updates settle first.
	waitService(t, sink, "named", endpoints(t, named))
	settle(t, sink)

	// A read whose result maps to the same endpoints publishes nothing.
	before := len(sink.Updates())
	idx := serviceIndex(s, "web")
	must(t, a.Client.Agent().UpdateTTL("web-1-ttl", "new output, same status", api.HealthPassing))
	waitFor(t, "web watch to read the new index", func() bool { return serviceIndex(s, "web") > idx })
	time.Sleep(100 * time.Millisecond) // longer than the coalescing window
	if n := len(sink.Updates()); n != before {
		t.Errorf("an unchanged result published: %d updates, want %d", n, before)
	}

	a.Deregister("web-2")
	waitService(t, sink, "web", endpoints(t, web1))
	a.Deregister("web-1")
	waitService(t, sink, "web", nil)
	if errs := sink.Errors(); len(errs) != 0 {
		t.Errorf("unexpected errors: %v", errs)
	}
}

// settle waits until the sink has had no update for 300 ms (at most 10 s).
func settle(t *testing.T, sink interface{ Updates() []sources.Update }) {
	t.Helper()
	n, since := len(sink.Updates()), time.Now()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if m := len(sink.Updates()); m != n {
			n, since = m, time.Now()
		} else if time.Since(since) >= 300*time.Millisecond {
			return
		}
	}
	t.Fatal("updates did not settle in 10 s")
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLong)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// serviceIndex is the index of the local datacenter's watch of name.
func serviceIndex(s *Source, name string) uint64 {
	d := s.DebugInfo().(Debug)
	for _, svc := range d.Datacenters[0].Services {
		if svc.Name == name {
			return svc.Watch.Index
		}
	}
	return 0
}

func TestTwoDatacentersPriorities(t *testing.T) {
	a1 := startAgent(t, "dc1")
	a2 := startAgent(t, "dc2", fmt.Sprintf("-retry-join-wan=127.0.0.1:%d", a1.Ports["serf-wan"]))
	waitFor(t, "WAN federation", func() bool {
		dcs, err := a1.Client.Catalog().Datacenters()
		return err == nil && len(dcs) == 2
	})
	a1.Register(ttlService("web-a", "web", "127.0.1.1", 80, nil, nil, api.HealthPassing))
	a2.Register(ttlService("web-b", "web", "127.0.2.1", 80, nil, nil, api.HealthPassing))

	_, sink := startSource(t, baseConfig(a1.Addr(), `, "failover_datacenters": ["dc2"], "services": {"include": ["web"]}`))
	wa := instanceWant{a: a1, id: "web-a", name: "web", addr: "127.0.1.1", port: 80, health: sources.HealthHealthy, weight: 3}
	wb := instanceWant{a: a2, id: "web-b", name: "web", addr: "127.0.2.1", port: 80, health: sources.HealthHealthy, weight: 3, priority: 1}
	waitService(t, sink, "web", endpoints(t, wa, wb))

	// Per-datacenter clusters with the template.
	_, sink2 := startSource(t, baseConfig(a1.Addr(), `, "failover_datacenters": ["dc2"], "services": {"include": ["web"]}, "mapping": {"cluster_name": "{service}.{datacenter}"}`))
	waitService(t, sink2, "web.dc1", endpoints(t, wa))
	waitService(t, sink2, "web.dc2", endpoints(t, wb))

	// A health change in the failover datacenter reaches the merged cluster.
	a2.TTL("web-b-ttl", api.HealthCritical)
	wb.health = sources.HealthUnhealthy
	waitService(t, sink, "web", endpoints(t, wa, wb))

	// Staleness is labelled with the agent's real datacenter, not "local".
	reg := prometheus.NewRegistry()
	src, err := New("consul", json.RawMessage(baseConfig(a1.Addr(), `, "failover_datacenters": ["dc2"], "services": {"include": ["web"]}`)),
		sources.Env{Logger: testLogger(t), Metrics: reg})
	if err != nil {
		t.Fatal(err)
	}
	sink3 := sourcestest.Run(t, src, 10*time.Second)
	waitService(t, sink3, "web", endpoints(t, wa, wb))
	var dcs []string
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "xdsbridge_consul_staleness_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "datacenter" {
					dcs = append(dcs, l.GetValue())
				}
			}
		}
	}
	sort.Strings(dcs)
	if diff := cmp.Diff([]string{"dc1", "dc2"}, dcs); diff != "" {
		t.Errorf("xdsbridge_consul_staleness_seconds datacenter labels (-want +got):\n%s", diff)
	}
}

func TestRestartFailStaticAndIndexReset(t *testing.T) {
	a := startAgent(t, "dc1")
	a.Register(ttlService("web-1", "web", "127.0.0.10", 8080, nil, nil, api.HealthPassing))
	// Push the raft index up so the restarted agent's index is lower.
	for i := 0; i < 30; i++ {
		_, err := a.Client.KV().Put(&api.KVPair{Key: fmt.Sprintf("k%d", i), Value: []byte("v")}, nil)
		must(t, err)
	}
	a.TTL("web-1-ttl", api.HealthWarning) // raises web's own index past the restarted agent's
	g := &gate{}
	s, sink := startSourceWith(t, baseConfig(a.Addr(), `, "services": {"include": ["web"]}`), func(s *Source) {
		s.wrapRoundTripper = func(rt http.RoundTripper) http.RoundTripper { g.next = rt; return g }
	})
	web := instanceWant{a: a, id: "web-1", name: "web", addr: "127.0.0.10", port: 8080, health: sources.HealthHealthy, weight: 1}
	waitService(t, sink, "web", endpoints(t, web))
	published := len(sink.Updates())

	// Consul goes away. The gate keeps the source from seeing the restarted
	// agent before the services are registered again: a dev agent starts
	// empty, and an empty catalog is a real removal, not a failure.
	g.closed.Store(true)
	a.Stop()
	sink.WaitFor(t, waitLong, "a Fail call", func(_ []sources.Update, errs []error) bool { return len(errs) > 0 })
	time.Sleep(1500 * time.Millisecond) // several retries fail meanwhile
	if n := len(sink.Updates()); n != published {
		t.Fatalf("published %d updates while Consul was down, want none", n-published)
	}
	d := s.DebugInfo().(Debug)
	if !d.Stale || d.ConfirmedAge == "" {
		t.Errorf("DebugInfo while down: stale=%v confirmed_age=%q, want stale with an age", d.Stale, d.ConfirmedAge)
	}

	a.Restart()
	a.ReRegister()
	g.closed.Store(false)
	web.health, web.weight = sources.HealthHealthy, 3 // registered passing again
	waitService(t, sink, "web", endpoints(t, web))
	for i, u := range sink.Updates() {
		if _, ok := sourcestest.Service(u, "web"); !ok {
			t.Errorf("update %d has no web service (a shrunken set): %v", i, serviceNames(u))
		}
	}
	waitFor(t, "an index reset to show in DebugInfo", func() bool {
		for _, svc := range s.DebugInfo().(Debug).Datacenters[0].Services {
			if svc.Name == "web" && svc.Watch.IndexResets > 0 {
				return true
			}
		}
		return false
	})
	waitFor(t, "DebugInfo to stop showing stale data", func() bool { return !s.DebugInfo().(Debug).Stale })
	// The recovery republishes once so the bridge clears its stale mark.
	if u, ok := sink.Last(); !ok || len(sink.Updates()) < published+1 {
		t.Errorf("no publish after recovery (last %+v)", u)
	}
}

func TestHintedModeWithMoreServicesThanSlots(t *testing.T) {
	a := startAgent(t, "dc1")
	for i := 0; i < 6; i++ {
		a.Register(ttlService(fmt.Sprintf("s%d-1", i), fmt.Sprintf("s%d", i), "127.0.3.1", 1000+i, nil, nil, api.HealthPassing))
	}
	// 4 slots, 1 datacenter: 2 for service watches, fewer than 6 services.
	s, sink := startSource(t, baseConfig(a.Addr(), `, "max_concurrent_queries": 4, "services": {"exclude": ["consul"]}`))
	want := func(i int, h sources.HealthStatus, w uint32) []sources.Endpoint {
		return endpoints(t, instanceWant{a: a, id: fmt.Sprintf("s%d-1", i), name: fmt.Sprintf("s%d", i), addr: "127.0.3.1", port: 1000 + i, health: h, weight: w})
	}
	waitService(t, sink, "s5", want(5, sources.HealthHealthy, 3))
	if d := s.DebugInfo().(Debug); d.Datacenters[0].Feed == nil {
		t.Fatalf("no change feed running in hinted mode: %+v", d.Datacenters[0])
	}
	a.TTL("s3-1-ttl", api.HealthCritical)
	waitService(t, sink, "s3", want(3, sources.HealthUnhealthy, 3))
	// An instance without checks: only the service list's index shows it.
	a.Register(&api.AgentServiceRegistration{ID: "s2-2", Name: "s2", Address: "127.0.3.2", Port: 1002})
	s2 := want(2, sources.HealthHealthy, 3)
	extra := instanceWant{a: a, id: "s2-2", name: "s2", addr: "127.0.3.2", port: 1002, health: sources.HealthHealthy, weight: 1}.endpoint(t)
	s2 = append(s2, extra)
	sources.SortEndpoints(s2)
	waitService(t, sink, "s2", s2)
	// Back under the limit: blocking mode again, and changes still arrive.
	for i := 0; i < 5; i++ {
		a.Deregister(fmt.Sprintf("s%d-1", i))
	}
	a.Deregister("s2-2")
	waitService(t, sink, "s0", nil)
	a.TTL("s5-1-ttl", api.HealthWarning)
	waitService(t, sink, "s5", want(5, sources.HealthHealthy, 1))
	if os.Getenv("XDSBRIDGE_DEBUG_DUMP") != "" {
		t.Logf("%+v", s.DebugInfo())
	}
}
