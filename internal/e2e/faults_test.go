package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	bridgepkg "github.com/xdsbridge/xdsbridge/bridge"
	"github.com/xdsbridge/xdsbridge/sources/consul/consultest"
)

// Faults under steady traffic through a real Envoy (delta ADS): a source
// that cannot refresh keeps its last good state served (fail static), so
// no request fails, Envoy's hosts do not change and the bridge sends
// nothing; the fault shows in /readyz, /debug/sources and the metrics;
// and once the source works again a change reaches Envoy.

// readyz is what /readyz answers.
type readyz struct {
	code    int
	Ready   bool                     `json:"ready"`
	Sources []bridgepkg.SourceStatus `json:"sources"`
}

func (b *bridge) readyz(t *testing.T) readyz {
	t.Helper()
	resp, err := http.Get("http://" + b.app.AdminAddr() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := readyz{code: resp.StatusCode}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatal(err)
	}
	return r
}

// source returns the status of the source named in /readyz.
func (r readyz) source(name string) bridgepkg.SourceStatus {
	for _, s := range r.Sources {
		if s.Name == name {
			return s
		}
	}
	return bridgepkg.SourceStatus{}
}

// debugSource returns a source's entry in /debug/sources: its status as
// the bridge sees it and, decoded into debug, its own debug info.
func (b *bridge) debugSource(t *testing.T, name string, debug any) bridgepkg.SourceStatus {
	t.Helper()
	var out struct {
		Sources []struct {
			Name   string                 `json:"name"`
			Status bridgepkg.SourceStatus `json:"status"`
			Debug  json.RawMessage        `json:"debug"`
		} `json:"sources"`
	}
	b.debugJSON(t, "/debug/sources", &out)
	for _, s := range out.Sources {
		if s.Name != name {
			continue
		}
		if debug != nil {
			if err := json.Unmarshal(s.Debug, debug); err != nil {
				t.Fatalf("/debug/sources %s: %v", name, err)
			}
		}
		return s.Status
	}
	t.Fatalf("/debug/sources has no source %q", name)
	return bridgepkg.SourceStatus{}
}

// waitStale waits until /readyz and xdsbridge_source_stale show source
// stale (or not), the bridge staying ready (200) all along, and returns
// the source's status in /readyz.
func (b *bridge) waitStale(t *testing.T, source string, stale bool) bridgepkg.SourceStatus {
	t.Helper()
	var st bridgepkg.SourceStatus
	waitFor(t, 15*time.Second, fmt.Sprintf("/readyz to show %s stale=%v", source, stale), func() error {
		r := b.readyz(t)
		if r.code != http.StatusOK || !r.Ready {
			t.Fatalf("/readyz answered %d ready=%v: a source that cannot refresh must not make the bridge unready", r.code, r.Ready)
		}
		st = r.source(source)
		if st.Stale != stale {
			return fmt.Errorf("%+v", st)
		}
		want := 0.0
		if stale {
			want = 1
		}
		if g := metricSumWith(t, b, "xdsbridge_source_stale", `source="`+source+`"`); g != want {
			return fmt.Errorf("/readyz shows %s stale=%v, xdsbridge_source_stale is %v", source, stale, g)
		}
		return nil
	})
	return st
}

// healthyHosts lists the hosts of a cluster Envoy's admin /clusters shows
// as healthy (health_flags "healthy").
func (e *envoy) healthyHosts(t *testing.T, cluster string) []string {
	t.Helper()
	body, err := e.Get("/clusters")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(body, "\n") {
		rest, ok := strings.CutPrefix(line, cluster+"::")
		if !ok {
			continue
		}
		if parts := strings.Split(rest, "::"); len(parts) == 3 && parts[1] == "health_flags" && parts[2] == "healthy" {
			out = append(out, parts[0])
		}
	}
	sort.Strings(out)
	return out
}

// edsApplied is Envoy's record of the EDS updates it applied to clusters:
// each cluster's update_success (responses carrying its assignment) and
// membership_change (changes of its hosts), as one string to compare.
func (e *envoy) edsApplied(t *testing.T, clusters ...string) string {
	t.Helper()
	var out []string
	for _, c := range clusters {
		for _, stat := range []string{"update_success", "membership_change"} {
			name := "cluster." + c + "." + stat
			v, ok := e.Stats(t, "^"+strings.ReplaceAll(name, ".", `\.`)+"$")[name]
			if !ok {
				t.Fatalf("envoy has no stat %s", name)
			}
			out = append(out, fmt.Sprintf("%s=%d", name, v))
		}
	}
	return strings.Join(out, " ")
}

// waitHosts polls hosts every 10 ms until it returns want and returns
// when it first did.
// On a timeout it calls dump, if not nil, to log what may explain it.
func waitHosts(t *testing.T, timeout time.Duration, what string, hosts func() []string, want []string, dump func()) time.Time {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got := hosts()
		if strings.Join(got, ",") == strings.Join(want, ",") {
			return time.Now()
		}
		if time.Now().After(deadline) {
			if dump != nil {
				dump()
			}
			t.Fatalf("timed out after %s waiting for %s: hosts %v, want %v", timeout, what, got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// assertHosts fails the test unless hosts are want.
func assertHosts(t *testing.T, what string, got, want []string) {
	t.Helper()
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("%s: envoy's hosts are %v; want %v", what, got, want)
	}
}

// assertTraffic fails the test if a request of tr failed, or if the
// requests since the last snapshot reached other backends than want.
func assertTraffic(t *testing.T, what string, tr *traffic, want ...string) {
	t.Helper()
	sent, failed, reached := tr.snapshot()
	if failed != 0 {
		t.Errorf("%s: %d of %d requests failed: %v", what, failed, sent, tr.failures())
	}
	var names []string
	for n := range reached {
		names = append(names, n)
	}
	sort.Strings(names)
	sort.Strings(want)
	if strings.Join(names, ",") != strings.Join(want, ",") {
		t.Errorf("%s: traffic reached %v; want %v", what, reached, want)
	}
}

// failures returns the first failures of tr.
func (tr *traffic) failures() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]string(nil), tr.errs...)
}

// hostMonitor records every distinct state of a cluster's hosts in Envoy
// (host=health_flags, sorted), polling /clusters every 20 ms.
type hostMonitor struct {
	stopc chan struct{}
	done  chan struct{}
	once  sync.Once

	mu   sync.Mutex
	seen []string // each a state, "host=flags" joined by ","
}

func monitorHosts(ev *envoy, cluster string) *hostMonitor {
	m := &hostMonitor{stopc: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(m.done)
		last := "none"
		for {
			select {
			case <-m.stopc:
				return
			case <-time.After(20 * time.Millisecond):
			}
			body, err := ev.Get("/clusters")
			if err != nil {
				continue
			}
			var hs []string
			for _, l := range strings.Split(body, "\n") {
				rest, ok := strings.CutPrefix(l, cluster+"::")
				if !ok {
					continue
				}
				if p := strings.Split(rest, "::"); len(p) == 3 && p[1] == "health_flags" {
					hs = append(hs, p[0]+"="+p[2])
				}
			}
			sort.Strings(hs)
			if cur := strings.Join(hs, ","); cur != last {
				m.mu.Lock()
				m.seen = append(m.seen, cur)
				m.mu.Unlock()
				last = cur
			}
		}
	}()
	return m
}

// stop stops the monitor; again, it does nothing.
func (m *hostMonitor) stop() {
	m.once.Do(func() { close(m.stopc) })
	<-m.done
}

// check stops the monitor and fails the test if a state seen is not
// allowed. A state is its hosts joined by " ", each followed by
// "(unhealthy)" if Envoy does not show it healthy.
func (m *hostMonitor) check(t *testing.T, allowed map[string]bool) {
	t.Helper()
	m.stop()
	var states []string
	for _, s := range m.seen {
		var hosts []string
		if s != "" {
			for _, h := range strings.Split(s, ",") {
				addr, flags, _ := strings.Cut(h, "=")
				if flags != "healthy" {
					addr += "(unhealthy)"
				}
				hosts = append(hosts, addr)
			}
		}
		k := strings.Join(hosts, " ")
		states = append(states, "["+k+"]")
		if !allowed[k] {
			t.Errorf("envoy's hosts were [%s] for a moment", k)
		}
	}
	t.Logf("envoy's hosts went through %d states: %s", len(states), strings.Join(states, " → "))
}

// waitLeaderAnswer polls the agent's /v1/status/leader every 10 ms until
// it names a leader and returns when it first did: when Consul serves again.
func waitLeaderAnswer(t *testing.T, a *consultest.Agent) time.Time {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if l, err := a.Client.Status().Leader(); err == nil && l != "" {
			return time.Now()
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("the restarted agent named no leader (%s); log:\n%s", a.State(), a.Log.String())
	return time.Time{}
}

// TestEnvoyConsulOutage kills the Consul agent (SIGKILL; a persistent
// single server, whose catalog survives) three times, for 1 s, 4 s and
// 8 s, under 40 requests a second through Envoy. While it is down: no
// request fails, Envoy's hosts are unchanged, the bridge sends nothing,
// and /readyz (still 200) and /debug/sources show the consul source stale
// with its error. When the restarted agent first names a leader, a change
// is made in Consul; Envoy must show it within 2 s of that moment, however
// long the outage was.
func TestEnvoyConsulOutage(t *testing.T) {
	a := consultest.StartPersistentAgent(t, "dc1")
	bs := startBackends(t, 3)
	b1, b2, b3 := bs[0], bs[1], bs[2]
	// A restarted agent restores a TTL check's status only if it was set
	// by a TTL update (which the agent persists): the status given at
	// registration is not, and comes back critical.
	register := func(id string, b *backend) {
		registerTTL(t, a, id, b, api.HealthPassing)
		a.TTL(id+"-ttl", api.HealthPassing)
	}
	register("web-1", b1)
	register("web-2", b2)
	br := startBridge(t, "services: {}\n", consulSource(a))
	ev := startEnvoy(t, "envoy-delta.yaml", br.app.XDSAddr())
	ev.waitTraffic(t, "b1", "b2")
	pushes := func() float64 { return metricSum(t, br, "xdsbridge_xds_pushes_total") }

	tr := startTraffic(ev, 25*time.Millisecond) // 40 requests a second
	defer tr.stop()
	// Envoy's web hosts and their health, every 20 ms, whatever happens: only
	// the states the changes lead to may be seen (a host removed for a
	// moment would be caught even if no request failed).
	mon := monitorHosts(ev, "web")
	defer mon.stop()

	// One change per outage, made as soon as Consul serves again, and
	// Envoy's healthy hosts and the backends reached after it.
	changes := []struct {
		what    string
		make    func()
		healthy []string
		reached []string
	}{
		{"web-3 registered", func() { register("web-3", b3) }, hostsOf(b1, b2, b3), []string{"b1", "b2", "b3"}},
		{"web-3's check critical", func() { a.TTL("web-3-ttl", api.HealthCritical) }, hostsOf(b1, b2), []string{"b1", "b2"}},
		{"web-3's check passing", func() { a.TTL("web-3-ttl", api.HealthPassing) }, hostsOf(b1, b2, b3), []string{"b1", "b2", "b3"}},
	}
	outages := []time.Duration{1 * time.Second, 4 * time.Second, 8 * time.Second}
	hosts, healthy, reached := hostsOf(b1, b2), hostsOf(b1, b2), []string{"b1", "b2"}
	var took []string
	for i, outage := range outages {
		run := fmt.Sprintf("outage %d (%v)", i+1, outage)
		// Settled: Envoy shows what it should, the bridge sends nothing more.
		time.Sleep(300 * time.Millisecond)
		assertHosts(t, run+", before", ev.clusterHosts(t, "web"), hosts)
		assertHosts(t, run+", before (healthy)", ev.healthyHosts(t, "web"), healthy)
		assertTraffic(t, run+", before", tr, reached...)
		p0, a0 := pushes(), ev.edsApplied(t, "web")

		a.Stop() // SIGKILL
		killed := time.Now()
		st := br.waitStale(t, "consul", true)
		if st.LastError == "" || !strings.Contains(st.LastError, a.Addr()) {
			t.Errorf("%s: /readyz shows the consul source's error as %q; want one naming %s", run, st.LastError, a.Addr())
		}
		var dbg struct {
			Stale bool `json:"stale"`
		}
		if st := br.debugSource(t, "consul", &dbg); !st.Stale || !dbg.Stale || st.LastError == "" {
			t.Errorf("%s: /debug/sources consul: status %+v, debug stale=%v; want stale with its error", run, st, dbg.Stale)
		}
		time.Sleep(time.Until(killed.Add(outage)))
		assertHosts(t, run+", agent down", ev.clusterHosts(t, "web"), hosts)
		assertHosts(t, run+", agent down (healthy)", ev.healthyHosts(t, "web"), healthy)
		if p := pushes(); p != p0 {
			t.Errorf("%s: the bridge sent %v responses while Consul was down:\n%s", run, p-p0, metricLines(t, br, "xdsbridge_xds_pushes_total"))
		}
		if now := ev.edsApplied(t, "web"); now != a0 {
			t.Errorf("%s: envoy applied EDS updates while Consul was down: %s, before %s", run, now, a0)
		}
		assertTraffic(t, run+", agent down", tr, reached...)

		dump := func() {
			b, _ := ev.Get("/clusters")
			t.Logf("envoy /clusters:\n%s", b)
			hs, _, _ := a.Client.Health().Service("web", "", false, nil)
			for _, h := range hs {
				for _, c := range h.Checks {
					t.Logf("consul %s %s %s", h.Service.ID, c.CheckID, c.Status)
				}
			}
		}
		a.Start()
		serving := waitLeaderAnswer(t, a)
		c := changes[i]
		c.make()
		made := time.Now()
		shown := waitHosts(t, 15*time.Second, c.what+" in envoy", func() []string { return ev.healthyHosts(t, "web") }, c.healthy, dump)
		d := shown.Sub(serving)
		took = append(took, d.Round(time.Millisecond).String())
		t.Logf("%s: agent down %v (kill to first leader answer); %s shown by envoy %v after the agent named a leader (%v after the change was made)",
			run, serving.Sub(killed).Round(time.Millisecond), c.what, d.Round(time.Millisecond), shown.Sub(made).Round(time.Millisecond))
		if d > 2*time.Second {
			t.Errorf("%s: %s reached envoy %v after Consul served again; want ≤ 2s", run, c.what, d)
		}
		hosts, healthy, reached = hostsOf(b1, b2, b3), c.healthy, c.reached
		br.waitStale(t, "consul", false)
		a.WaitLeader()
		// The change is one EDS response; the recovery itself sends nothing.
		time.Sleep(300 * time.Millisecond)
		if p := pushes(); p != p0+1 {
			t.Errorf("%s: the bridge sent %v responses from the kill to the change; want 1 (the change):\n%s", run, p-p0, metricLines(t, br, "xdsbridge_xds_pushes_total"))
		}
		tr.snapshot()
	}
	// Traffic follows the last change.
	time.Sleep(500 * time.Millisecond)
	assertTraffic(t, "after the last outage", tr, reached...)
	tr.stop()
	sent, failed, _ := tr.snapshot()
	// The states: b1 and b2; then b3 too, healthy or not.
	b3host := hostsOf(b3)[0]
	allowed := map[string]bool{strings.Join(hostsOf(b1, b2), " "): true, strings.Join(hostsOf(b1, b2, b3), " "): true}
	allowed[strings.Replace(strings.Join(hostsOf(b1, b2, b3), " "), b3host, b3host+"(unhealthy)", 1)] = true
	mon.check(t, allowed)
	t.Logf("recovery times (first leader answer → envoy shows the change): %s", strings.Join(took, ", "))
	t.Logf("reads redone in consistent mode for an index gone backwards: %v",
		metricSumWith(t, br, "xdsbridge_consul_requests_total", `result="backwards_retry"`))
	t.Logf("%d requests in all, %d failed", sent, failed)
	if failed != 0 {
		t.Errorf("%d of %d requests failed: %v", failed, sent, tr.failures())
	}
	ev.assertNoRejections(t)
}

// TestEnvoyDNSOutage: a STRICT_DNS service (web) and a LOGICAL_DNS service
// (api), names refreshed every 100 ms, under 40 and 20 requests a second
// through Envoy. Their DNS server answers SERVFAIL to everything for 2 s
// (20 refresh periods), answers again unchanged, then answers nothing at
// all for 3 s (the resolver times out after 300 ms), and answers again
// with changed addresses. During the outages no request fails, Envoy's
// hosts are unchanged and the bridge sends nothing; /readyz (still 200)
// and /debug/sources show the source stale with its error, the DNS
// metrics count the SERVFAILs and timeouts. When the server answers again
// unchanged the stale mark clears and nothing is sent; the changed
// answers reach Envoy and the traffic moves.
func TestEnvoyDNSOutage(t *testing.T) {
	port := freePort(t)
	for i, name := range []string{"b1", "b2", "b3", "a1", "a2"} {
		startBackendAt(t, name, fmt.Sprintf("127.0.0.%d:%d", 11+i, port))
	}
	hosts := func(last ...int) []string {
		var out []string
		for _, l := range last {
			out = append(out, fmt.Sprintf("127.0.0.%d:%d", l, port))
		}
		sort.Strings(out)
		return out
	}
	d := startDNS(t)
	d.set("web.faults.test", "127.0.0.11", "127.0.0.12")
	d.set("api.faults.test", "127.0.0.14")
	br := startBridge(t, "services: {}\n", fmt.Sprintf(`
  - name: legacy
    dns:
      resolvers: [%q]
      timeout: 300ms
      services:
        - name: web
          type: STRICT_DNS
          hosts: [{name: web.faults.test, port: %d}]
          dns_refresh_rate: 100ms
          dns_lookup_family: V4_ONLY
        - name: api
          type: LOGICAL_DNS
          hosts: [{name: api.faults.test, port: %d}]
          dns_refresh_rate: 100ms
          dns_lookup_family: V4_ONLY
`, d.addr, port, port))
	// Envoy's listener routes /api/ to the cluster api, the rest to web.
	ev := startEnvoyCerts(t, "envoy-delta.yaml", br.app.XDSAddr(), "",
		`                        - match: {prefix: "/"}`,
		`                        - match: {prefix: "/api/"}
                          route: {cluster: api}
                        - match: {prefix: "/"}`)
	ev.waitTraffic(t, "b1", "b2")
	waitHosts(t, 10*time.Second, "api's host in envoy", func() []string { return ev.clusterHosts(t, "api") }, hosts(14), nil)
	pushes := func() float64 { return metricSum(t, br, "xdsbridge_xds_pushes_total") }
	webHosts := func() []string { return ev.clusterHosts(t, "web") }
	apiHosts := func() []string { return ev.clusterHosts(t, "api") }
	type nameDebug struct {
		Name                string   `json:"name"`
		Answer              []string `json:"answer"`
		LastError           string   `json:"last_error"`
		ConsecutiveFailures int      `json:"consecutive_failures"`
	}
	var dbg struct {
		Names []nameDebug `json:"names"`
	}

	web := startTraffic(ev, 25*time.Millisecond)                // 40 requests a second
	apiTr := startTrafficPath(ev, 50*time.Millisecond, "/api/") // 20
	defer web.stop()
	defer apiTr.stop()
	webMon, apiMon := monitorHosts(ev, "web"), monitorHosts(ev, "api")
	defer webMon.stop()
	defer apiMon.stop()
	time.Sleep(300 * time.Millisecond)
	assertTraffic(t, "before", web, "b1", "b2")
	assertTraffic(t, "before", apiTr, "a1")
	p0, a0 := pushes(), ev.edsApplied(t, "web", "api")

	// An outage: the server fails in the given mode for the given time.
	outage := func(what string, mode int32, length time.Duration, result string) {
		t.Helper()
		counted := metricSumWith(t, br, "xdsbridge_dns_queries_total", `result="`+result+`"`)
		failures := metricSumWith(t, br, "xdsbridge_dns_resolutions_total", `result="failure"`)
		d.fault.Store(mode)
		start := time.Now()
		st := br.waitStale(t, "legacy", true)
		if !strings.Contains(st.LastError, ".faults.test") {
			t.Errorf("%s: /readyz shows the dns source's error as %q; want one naming the DNS name", what, st.LastError)
		}
		time.Sleep(time.Until(start.Add(length)))
		// Every name failing, its last answer kept.
		if st := br.debugSource(t, "legacy", &dbg); !st.Stale || st.LastError == "" {
			t.Errorf("%s: /debug/sources legacy status %+v: want stale with its error", what, st)
		}
		for _, n := range dbg.Names {
			if n.LastError == "" || n.ConsecutiveFailures < 2 || len(n.Answer) == 0 {
				t.Errorf("%s: /debug/sources legacy %+v: want its last answer, its error and its failures counted", what, n)
			}
			t.Logf("%s: %s failed %d times in a row: %s", what, n.Name, n.ConsecutiveFailures, n.LastError)
		}
		q := metricSumWith(t, br, "xdsbridge_dns_queries_total", `result="`+result+`"`) - counted
		f := metricSumWith(t, br, "xdsbridge_dns_resolutions_total", `result="failure"`) - failures
		t.Logf("%s for %v: %v queries answered %s, %v failed resolutions", what, length, q, result, f)
		if q < 4 || f < 4 {
			t.Errorf("%s: %v queries %s, %v failed resolutions counted; want some of each", what, q, result, f)
		}
		assertHosts(t, what+": web", webHosts(), hosts(11, 12))
		assertHosts(t, what+": api", apiHosts(), hosts(14))
		if p := pushes(); p != p0 {
			t.Errorf("%s: the bridge sent %v responses during the outage:\n%s", what, p-p0, metricLines(t, br, "xdsbridge_xds_pushes_total"))
		}
		if now := ev.edsApplied(t, "web", "api"); now != a0 {
			t.Errorf("%s: envoy applied EDS updates during the outage: %s, before %s", what, now, a0)
		}
		assertTraffic(t, what+": web", web, "b1", "b2")
		assertTraffic(t, what+": api", apiTr, "a1")
	}

	outage("SERVFAIL", dnsServFail, 2*time.Second, "SERVFAIL")
	// The same answers again: the stale mark clears, nothing is sent.
	d.fault.Store(dnsNormal)
	recovered := time.Now()
	br.waitStale(t, "legacy", false)
	t.Logf("answering again (unchanged): the source is not stale %v later", time.Since(recovered).Round(time.Millisecond))
	time.Sleep(300 * time.Millisecond)
	if p := pushes(); p != p0 {
		t.Errorf("the bridge sent %v responses after the DNS server answered the same again:\n%s", p-p0, metricLines(t, br, "xdsbridge_xds_pushes_total"))
	}

	outage("no answer", dnsDrop, 3*time.Second, "timeout")
	// Changed answers: web's moves from .12 to .13, api's address is gone
	// from its answer so it moves to .15.
	d.set("web.faults.test", "127.0.0.11", "127.0.0.13")
	d.set("api.faults.test", "127.0.0.15")
	d.fault.Store(dnsNormal)
	recovered = time.Now()
	webAt := waitHosts(t, 10*time.Second, "web's new hosts in envoy", webHosts, hosts(11, 13), nil)
	apiAt := waitHosts(t, 10*time.Second, "api's new host in envoy", apiHosts, hosts(15), nil)
	t.Logf("answering again (changed): envoy has web's new hosts %v later, api's %v later",
		webAt.Sub(recovered).Round(time.Millisecond), apiAt.Sub(recovered).Round(time.Millisecond))
	br.waitStale(t, "legacy", false)
	time.Sleep(300 * time.Millisecond)
	// web and api changed in one publish or two: one EDS response each, or
	// one for both.
	if p := pushes() - p0; p != 1 && p != 2 {
		t.Errorf("the bridge sent %v responses for the changed answers; want 1 or 2:\n%s", p, metricLines(t, br, "xdsbridge_xds_pushes_total"))
	}
	web.snapshot()
	apiTr.snapshot()
	time.Sleep(500 * time.Millisecond)
	assertTraffic(t, "after the change: web", web, "b1", "b3")
	assertTraffic(t, "after the change: api", apiTr, "a2")
	webMon.check(t, map[string]bool{strings.Join(hosts(11, 12), " "): true, strings.Join(hosts(11, 13), " "): true})
	apiMon.check(t, map[string]bool{strings.Join(hosts(14), " "): true, strings.Join(hosts(15), " "): true})
	for name, tr := range map[string]*traffic{"web": web, "api": apiTr} {
		tr.stop()
		sent, failed, _ := tr.snapshot()
		t.Logf("%s: %d requests in all, %d failed", name, sent, failed)
		if failed != 0 {
			t.Errorf("%s: %d of %d requests failed: %v", name, failed, sent, tr.failures())
		}
	}
	ev.assertNoRejections(t)
}

// TestEnvoyGarbageServicesFile replaces the services file (atomically, as
// a deploy tool would) with one bad file after another under 40 requests
// a second through Envoy: invalid YAML, valid YAML of the wrong shape,
// binary junk, a copy cut off mid-line, and empty documents (0 bytes,
// whitespace, comments only, null, {}), which the file source refuses by
// design: an editor that truncates then writes leaves exactly that for a
// moment, and "no services" takes an explicit `services: {}`. After each:
// no request failed, Envoy's hosts are unchanged, the bridge sent nothing,
// and the error names the file (and the field or line) in /readyz and
// /debug/sources, counted in xdsbridge_source_errors_total. Then the last
// good file again: the stale mark clears, nothing is sent. Then a valid
// file with a change: traffic moves.
func TestEnvoyGarbageServicesFile(t *testing.T) {
	bs := startBackends(t, 3)
	b1, b2, b3 := bs[0], bs[1], bs[2]
	good := servicesYAML("web", b1, b2)
	br := startBridge(t, good, "")
	ev := startEnvoy(t, "envoy-delta.yaml", br.app.XDSAddr())
	ev.waitTraffic(t, "b1", "b2")
	pushes := func() float64 { return metricSum(t, br, "xdsbridge_xds_pushes_total") }
	errorsCounted := func() float64 {
		return metricSumWith(t, br, "xdsbridge_source_errors_total", `source="static"`)
	}

	tr := startTraffic(ev, 25*time.Millisecond) // 40 requests a second
	defer tr.stop()
	mon := monitorHosts(ev, "web")
	defer mon.stop()
	time.Sleep(300 * time.Millisecond)
	assertTraffic(t, "before", tr, "b1", "b2")
	p0, a0 := pushes(), ev.edsApplied(t, "web")

	junk := make([]byte, 512)
	for i := range junk {
		junk[i] = byte(i * 7919 % 256)
	}
	cut := strings.LastIndex(good, "port:") // mid-line, in the last endpoint's flow mapping
	for _, g := range []struct {
		what, content string
		wantErr       string // in the error, besides the file's path
	}{
		{"invalid YAML", "services:\n  web:\n    endpoints: [\n", "yaml: line"},
		{"a list, not a mapping", "- web\n- api\n", "services"},
		{"an unknown field", "services:\n  web:\n    endpoints:\n      - {adress: 127.0.0.1, port: 80}\n", `unknown field "adress"`},
		{"a port of the wrong type", "services:\n  web:\n    endpoints:\n      - {address: 127.0.0.1, port: eighty}\n", "port"},
		{"endpoints of the wrong type", "services:\n  web:\n    endpoints: 42\n", "endpoints"},
		{"binary junk", string(junk), ""},
		{"a copy cut off mid-line", good[:cut+3], "yaml"},
		{"an empty file", "", "empty document"},
		{"whitespace", "\n   \n\n", "empty document"},
		{"comments only", "# services: none today\n", "empty document"},
		{"null", "null\n", "empty document"},
		{"{}", "{}\n", "empty document"},
	} {
		e0 := errorsCounted()
		br.writeServices(t, g.content)
		waitFor(t, 15*time.Second, g.what+" refused", func() error {
			if e := errorsCounted(); e == e0 {
				return fmt.Errorf("xdsbridge_source_errors_total{source=static} still %v", e)
			}
			return nil
		})
		st := br.waitStale(t, "static", true)
		if !strings.Contains(st.LastError, br.services) || !strings.Contains(st.LastError, g.wantErr) {
			t.Errorf("%s: /readyz shows the error %q; want one naming %s and %q", g.what, st.LastError, br.services, g.wantErr)
		}
		var dbg struct {
			Services  int    `json:"services"`
			LastError string `json:"last_error"`
		}
		if st := br.debugSource(t, "static", &dbg); !st.Stale || dbg.LastError != st.LastError || dbg.Services != 1 {
			t.Errorf("%s: /debug/sources static: status %+v, debug %+v; want stale, its error, the last good file's 1 service", g.what, st, dbg)
		}
		t.Logf("%s: %s", g.what, st.LastError)
		time.Sleep(200 * time.Millisecond) // for a reload or a push not due to come
		if e := errorsCounted(); e != e0+1 {
			t.Errorf("%s: %v errors counted; want 1", g.what, e-e0)
		}
		assertHosts(t, g.what, ev.clusterHosts(t, "web"), hostsOf(b1, b2))
		if p := pushes(); p != p0 {
			t.Errorf("%s: the bridge sent %v responses:\n%s", g.what, p-p0, metricLines(t, br, "xdsbridge_xds_pushes_total"))
		}
		if now := ev.edsApplied(t, "web"); now != a0 {
			t.Errorf("%s: envoy applied EDS updates: %s, before %s", g.what, now, a0)
		}
		assertTraffic(t, g.what, tr, "b1", "b2")
	}

	// The last good file again: published again (the stale mark clears),
	// nothing sent.
	br.writeServices(t, good)
	br.waitStale(t, "static", false)
	time.Sleep(300 * time.Millisecond)
	if p := pushes(); p != p0 {
		t.Errorf("the bridge sent %v responses for the last good file again:\n%s", p-p0, metricLines(t, br, "xdsbridge_xds_pushes_total"))
	}
	assertTraffic(t, "the last good file again", tr, "b1", "b2")

	// A valid file with a change: one EDS response, traffic moves.
	br.writeServices(t, servicesYAML("web", b1, b3))
	changed := time.Now()
	at := waitHosts(t, 15*time.Second, "the new file's hosts in envoy", func() []string { return ev.clusterHosts(t, "web") }, hostsOf(b1, b3), nil)
	t.Logf("a valid file again: envoy has its hosts %v later", at.Sub(changed).Round(time.Millisecond))
	br.waitStale(t, "static", false)
	time.Sleep(300 * time.Millisecond)
	if p := pushes(); p != p0+1 {
		t.Errorf("the bridge sent %v responses for the valid file; want 1:\n%s", p-p0, metricLines(t, br, "xdsbridge_xds_pushes_total"))
	}
	tr.snapshot()
	time.Sleep(500 * time.Millisecond)
	assertTraffic(t, "after the valid file", tr, "b1", "b3")
	mon.check(t, map[string]bool{strings.Join(hostsOf(b1, b2), " "): true, strings.Join(hostsOf(b1, b3), " "): true})
	tr.stop()
	sent, failed, _ := tr.snapshot()
	t.Logf("%d requests in all, %d failed", sent, failed)
	if failed != 0 {
		t.Errorf("%d of %d requests failed: %v", failed, sent, tr.failures())
	}
	ev.assertNoRejections(t)
}
