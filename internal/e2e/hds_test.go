package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	xbridge "github.com/xdsbridge/xdsbridge/bridge"
	"github.com/xdsbridge/xdsbridge/hds"
	"github.com/xdsbridge/xdsbridge/healthcheck"
	"github.com/xdsbridge/xdsbridge/internal/testbin"
)

// peers names the process at the other end of a loopback connection: the
// checker Envoy whose socket has the connection's local port, found in
// /proc (the Envoys' fds and /proc/net/tcp).
type peers struct {
	mu    sync.Mutex
	pids  map[int]string // checker Envoy pid → node
	ports map[int]string // local port → node, as found
}

func (p *peers) add(pid int, node string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pids[pid] = node
}

// node returns the checker whose socket has local port port ("" if none
// of them).
func (p *peers) node(port int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n, ok := p.ports[port]; ok {
		return n
	}
	inodes := map[string]string{}
	for pid, node := range p.pids {
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		for _, fd := range fds {
			l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
			if ino, ok := strings.CutPrefix(l, "socket:["); ok {
				inodes[strings.TrimSuffix(ino, "]")] = node
			}
		}
	}
	b, _ := os.ReadFile("/proc/net/tcp")
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 10 {
			continue
		}
		_, hexPort, _ := strings.Cut(f[1], ":")
		lp, err := strconv.ParseInt(hexPort, 16, 32)
		if err != nil || int(lp) != port {
			continue
		}
		if n, ok := inodes[f[9]]; ok {
			p.ports[port] = n
			return n
		}
	}
	return ""
}

// hdsBackend is an HTTP backend that records which checker Envoy sent
// each health-check probe it answers (Envoy's User-Agent is Envoy/HC),
// and how many the bridge's own checker sent. Probes from the cut checker
// get their connection closed unanswered.
type hdsBackend struct {
	*backend
	mu     sync.Mutex
	probes map[string]int // checker node → Envoy/HC probes
	local  int            // probes by the bridge's own checker
}

func startHDSBackend(t *testing.T, name string, who *peers, cut string) *hdsBackend {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &hdsBackend{backend: &backend{name: name, port: uint32(lis.Addr().(*net.TCPAddr).Port)}, probes: map[string]int{}}
	b.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			switch ua := r.UserAgent(); {
			case ua == "Envoy/HC":
				_, port, _ := net.SplitHostPort(r.RemoteAddr)
				pn, _ := strconv.Atoi(port)
				node := who.node(pn)
				if node == cut {
					if c, _, err := w.(http.Hijacker).Hijack(); err == nil {
						c.Close()
					}
					return
				}
				b.mu.Lock()
				b.probes[node]++
				b.mu.Unlock()
			case strings.HasPrefix(ua, "xdsbridge"):
				b.mu.Lock()
				b.local++
				b.mu.Unlock()
			}
		}
		io.WriteString(w, b.name)
	}), ReadHeaderTimeout: 5 * time.Second}
	go b.srv.Serve(lis)
	t.Cleanup(func() { b.srv.Close() })
	return b
}

// reset returns the probes counted so far and starts counting afresh.
func (b *hdsBackend) reset() (map[string]int, int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p, l := b.probes, b.local
	b.probes, b.local = map[string]int{}, 0
	return p, l
}

func writeBootstrap(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "envoy.yaml")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// routingBootstrap is examples/envoy-delta.yaml on free ports, its route
// retrying a failed connection on another host (a killed backend is
// routed to until its checkers report it).
func routingBootstrap(t *testing.T, xdsPort string, lisPort int) string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(repoRoot(t), "examples", "envoy-delta.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := strings.NewReplacer(
		"port_value: 18000", "port_value: "+xdsPort,
		"port_value: 10000", fmt.Sprintf("port_value: %d", lisPort),
		"port_value: 9901", "port_value: 0",
		"route: {cluster: web}", `route: {cluster: web, retry_policy: {retry_on: "connect-failure,reset", num_retries: 5, retry_host_predicate: [{name: envoy.retry_host_predicates.previous_hosts, typed_config: {"@type": type.googleapis.com/envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate}}], host_selection_retry_max_attempts: 5}}`,
	).Replace(string(src))
	return writeBootstrap(t, cfg)
}

// hdsStates returns each host's HDS state from /debug/hosts' data (nil
// entries for hosts checked locally).
func hdsStates(br *bridge) map[string]*hds.TargetState {
	out := map[string]*hds.TargetState{}
	for _, h := range br.app.Loop.Hosts("web")["web"] {
		out[h.Host] = nil
		if d, ok := h.CheckState.(healthcheck.RemoteDetail); ok {
			if st, ok := d.State().(hds.TargetState); ok {
				out[h.Host] = &st
			}
		}
	}
	return out
}

// The bridge serves HDS to checker Envoys in two zones and routes a real
// Envoy by their verdicts: every backend is probed by exactly k of them
// (counted at the backends, by source address) in both zones, and no
// longer by the bridge; a killed backend is UNHEALTHY at the routing Envoy
// within interval × threshold + report interval; a killed checker's
// backends go to the others at once, with no verdict changing; a checker
// that reaches no backend (it reports every one unhealthy) takes none away
// under the majority rule; and no request through the routing Envoy fails
// throughout.
func TestHDSCheckersRouteEnvoy(t *testing.T) {
	bin := testbin.Envoy(t)
	const (
		interval  = 200 * time.Millisecond
		threshold = 2
		report    = 200 * time.Millisecond
		k         = 2
		cut       = "checker-cut" // reaches no backend
	)
	who := &peers{pids: map[int]string{}, ports: map[int]string{}}
	var bs []*hdsBackend
	var all []*backend
	for i := range 6 {
		b := startHDSBackend(t, fmt.Sprintf("b%d", i+1), who, cut)
		bs = append(bs, b)
		all = append(all, b.backend)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "services.yaml"), []byte(servicesYAML("web", all...)), 0o644); err != nil {
		t.Fatal(err)
	}
	br := startBridgeConfig(t, dir, fmt.Sprintf(`
sources:
  - name: static
    file: {path: services.yaml, settle: 10ms}
health_checks:
  services:
    web: {type: http, interval: %s, timeout: 2s, jitter: 0s, healthy_threshold: 1, unhealthy_threshold: %d, http: {path: /healthz}}
  hds: {enabled: true, k: %d, rule: majority, report_interval: %s, silence: 1s}
`, interval, threshold, k, report), nil)
	_, xdsPort, _ := net.SplitHostPort(br.app.XDSAddr())
	lisPort := freePort(t)
	router := testbin.StartEnvoy(t, bin, routingBootstrap(t, xdsPort, lisPort))
	router.WaitReady(t, 20*time.Second)
	ev := &envoy{EnvoyProcess: router, listener: fmt.Sprintf("127.0.0.1:%d", lisPort)}
	names := func(bs []*hdsBackend) []string {
		var out []string
		for _, b := range bs {
			out = append(out, b.name)
		}
		return out
	}
	// Before any checker connects, the bridge checks everything itself
	// (fallback: local).
	ev.waitTraffic(t, names(bs)...)

	// Requests through the routing Envoy, all along.
	traffic := startFileTraffic(t, ev)

	// Four checkers in two zones, each probing from its own address.
	zoneOf := map[string]string{}
	type checkerEnvoy struct {
		node string
		p    *testbin.EnvoyProcess
	}
	startChecker := func(node, zone string) checkerEnvoy {
		zoneOf[node] = zone
		p := testbin.StartEnvoy(t, bin, writeBootstrap(t, testbin.HDSCheckerBootstrap(node, zone, xdsPort)))
		who.add(p.Cmd.Process.Pid, node)
		return checkerEnvoy{node, p}
	}
	var checkers []checkerEnvoy
	for i := range 4 {
		checkers = append(checkers, startChecker(fmt.Sprintf("checker-%d", i), []string{"zone-a", "zone-b"}[i%2]))
	}
	// assignedOK: every host of want is assigned to k checkers, all alive
	// (not dead), in both zones, whose reports count and say healthy.
	assignedOK := func(want []*hdsBackend, dead string) error {
		sts := hdsStates(br)
		for _, b := range want {
			h := fmt.Sprintf("127.0.0.1:%d", b.port)
			st := sts[h]
			if st == nil {
				return fmt.Errorf("%s: not checked through HDS", h)
			}
			zones := map[string]bool{}
			for _, c := range st.Checkers {
				if c.Node == dead || !c.Counted || c.Verdict != healthcheck.Healthy {
					return fmt.Errorf("%s: %+v", h, st.Checkers)
				}
				zones[zoneOf[c.Node]] = true
			}
			if len(st.Checkers) != k || len(zones) != 2 {
				return fmt.Errorf("%s: %d checkers in %d zones: %+v", h, len(st.Checkers), len(zones), st.Checkers)
			}
		}
		return nil
	}
	// All four connected first: the checkers start together, and one that
	// connects after the others' reports count takes hosts over with no
	// report of its own yet.
	waitFor(t, 20*time.Second, "the four checkers connected", func() error {
		if m := br.adminPage(t, "/metrics"); !strings.Contains(m, "\nxdsbridge_hds_checkers 4\n") {
			return fmt.Errorf("xdsbridge_hds_checkers is not 4")
		}
		return nil
	})
	waitFor(t, 20*time.Second, "every backend assigned to 2 checkers in 2 zones, healthy", func() error { return assignedOK(bs, "") })

	// Which checker said what: in /debug/hosts, on the status page, and
	// HDS's metrics.
	var dh map[string][]map[string]any
	br.debugJSON(t, "/debug/hosts?service=web", &dh)
	for _, h := range dh["web"] {
		cs, _ := h["check_state"].(map[string]any)
		sum, _ := cs["summary"].(string)
		if crs, _ := cs["checkers"].([]any); len(crs) != k || strings.Count(sum, "checker-") != k || strings.Count(sum, " healthy") != k {
			t.Errorf("/debug/hosts %v: check_state %v", h["host"], cs)
		}
	}
	if n := strings.Count(br.adminPage(t, "/?service=web"), "HDS: checker-"); n != len(bs) {
		t.Errorf("the status page shows %d hosts' HDS checkers, want %d", n, len(bs))
	}
	metrics := br.adminPage(t, "/metrics")
	for _, m := range []string{"xdsbridge_hds_checkers 4", fmt.Sprintf("xdsbridge_hds_assigned_pairs %d", k*len(bs)), "xdsbridge_hds_reports_total", "xdsbridge_hds_assignments_total"} {
		if !strings.Contains(metrics, "\n"+m) {
			t.Errorf("no %q in /metrics", m)
		}
	}

	// Counted at the backends: over a few intervals, each backend is
	// probed by exactly the 2 checkers the bridge names, and not by the
	// bridge itself.
	probedByAssigned := func(want []*hdsBackend) error {
		for _, b := range want {
			b.reset()
		}
		time.Sleep(5 * interval)
		sts := hdsStates(br)
		for _, b := range want {
			probes, local := b.reset()
			st := sts[fmt.Sprintf("127.0.0.1:%d", b.port)]
			var want, got []string
			for _, c := range st.Checkers {
				want = append(want, c.Node)
			}
			for n := range probes {
				got = append(got, n)
			}
			sort.Strings(want)
			sort.Strings(got)
			if !slices.Equal(got, want) || local > 0 {
				return fmt.Errorf("%s probed by %v (%d local probes), assigned to %v", b.name, probes, local, want)
			}
		}
		return nil
	}
	waitFor(t, 10*time.Second, "each backend probed by exactly its 2 checkers", func() error { return probedByAssigned(bs) })

	// Follow the verdicts of the live backends from now on: none may change.
	live := bs[:5]
	var flaps sync.Map
	sampling := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() {
		for {
			select {
			case <-sampling:
				return
			case <-time.After(20 * time.Millisecond):
			}
			hosts := map[string]xbridge.HostInfo{}
			for _, h := range br.app.Loop.Hosts("web")["web"] {
				hosts[h.Host] = h
			}
			for _, b := range live {
				h := hosts[fmt.Sprintf("127.0.0.1:%d", b.port)]
				if h.Check != healthcheck.Healthy {
					flaps.Store(fmt.Sprintf("%s %s (%s)", b.name, h.Check, h.Rule), true)
				}
			}
		}
	})
	defer func() {
		close(sampling)
		sampler.Wait()
		flaps.Range(func(k, _ any) bool { t.Errorf("a live backend's verdict changed: %v", k); return true })
	}()

	// A backend is killed: UNHEALTHY at the routing Envoy within the bound.
	dead := bs[5]
	deadHost := fmt.Sprintf("127.0.0.1:%d", dead.port)
	start := time.Now()
	dead.srv.Close()
	waitFor(t, 20*time.Second, "the killed backend unhealthy at the routing Envoy", func() error {
		body, err := ev.Get("/clusters")
		if err != nil {
			return err
		}
		if !containsLine(body, "web::"+deadHost+"::health_flags::/failed_eds_health") {
			return fmt.Errorf("not marked /failed_eds_health")
		}
		return nil
	})
	d, bound := time.Since(start), threshold*interval+report
	t.Logf("killed backend UNHEALTHY at the routing Envoy after %v (bound %v)", d.Round(time.Millisecond), bound)
	// The margin is for a loaded host: CI runs every package's tests at
	// once on 2 cores.
	if d > bound+3*time.Second {
		t.Errorf("killed backend unhealthy after %v, bound %v", d, bound)
	}

	// A checker is killed: its backends go to the others at once. The one
	// killed holds the most live backends.
	held := map[string]int{}
	for _, b := range live {
		for _, c := range hdsStates(br)[fmt.Sprintf("127.0.0.1:%d", b.port)].Checkers {
			held[c.Node]++
		}
	}
	gone := checkers[0]
	for _, c := range checkers {
		if held[c.node] > held[gone.node] {
			gone = c
		}
	}
	if held[gone.node] == 0 {
		t.Fatalf("no checker holds a live backend: %v", held)
	}
	t.Logf("killing %s, which checks %d of the %d live backends", gone.node, held[gone.node], len(live))
	start = time.Now()
	gone.p.Cmd.Process.Kill()
	waitFor(t, 10*time.Second, "the killed checker's backends reassigned", func() error { return assignedOK(live, gone.node) })
	t.Logf("killed checker's backends reassigned and counted after %v (its stream's end: at once; a new checker's reports count after a healthy one)", time.Since(start).Round(time.Millisecond))
	waitFor(t, 10*time.Second, "each backend probed by exactly its 2 checkers", func() error { return probedByAssigned(live) })

	// A checker that reaches no backend: it reports every one unhealthy,
	// and under majority takes none away. Which backends it is assigned
	// depends on its connection's id and the backends' ports, so a cut
	// checker assigned none of the live backends is replaced (its
	// reconnection draws another id) until one is.
	cutNode := ""
	for attempt := 1; cutNode == ""; attempt++ {
		c := startChecker(cut, "zone-a")
		waitFor(t, 10*time.Second, "the cut checker connected", func() error {
			if m := br.adminPage(t, "/metrics"); !strings.Contains(m, "\nxdsbridge_hds_checkers 4\n") {
				return fmt.Errorf("xdsbridge_hds_checkers is not 4")
			}
			return nil
		})
		sts := hdsStates(br)
		for _, b := range live {
			for _, ch := range sts[fmt.Sprintf("127.0.0.1:%d", b.port)].Checkers {
				if ch.Node == c.node {
					cutNode = c.node
				}
			}
		}
		if cutNode != "" {
			break
		}
		if attempt == 10 {
			t.Fatalf("the cut checker was assigned no live backend in %d connections", attempt)
		}
		t.Logf("the cut checker was assigned no live backend; reconnecting it")
		c.p.Cmd.Process.Kill()
		waitFor(t, 10*time.Second, "the cut checker gone", func() error {
			if m := br.adminPage(t, "/metrics"); !strings.Contains(m, "\nxdsbridge_hds_checkers 3\n") {
				return fmt.Errorf("xdsbridge_hds_checkers is not 3")
			}
			return nil
		})
	}
	waitFor(t, 20*time.Second, "the cut checker's unhealthy reports counted", func() error {
		// Of the live backends it was assigned.
		sts := hdsStates(br)
		n := 0
		for _, b := range live {
			st := sts[fmt.Sprintf("127.0.0.1:%d", b.port)]
			if st == nil {
				return fmt.Errorf("%s: not checked through HDS", b.name)
			}
			for _, c := range st.Checkers {
				if c.Node == cutNode && c.Counted && c.Verdict == healthcheck.Unhealthy {
					n++
				}
			}
		}
		if n == 0 {
			return fmt.Errorf("no counted unhealthy report of %s", cutNode)
		}
		return nil
	})
	time.Sleep(5 * report)
	ev.waitTraffic(t, names(live)...)
	traffic.check(t, "through the routing Envoy")
}
