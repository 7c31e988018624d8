package e2e

import (
	"fmt"
	"io"
	"math"
	"math/rand"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/hashicorp/consul/api"
	"google.golang.org/protobuf/proto"

	"github.com/xdsbridge/xdsbridge/sources/consul/consultest"
	"github.com/xdsbridge/xdsbridge/xds"
	"github.com/xdsbridge/xdsbridge/xds/store"
)

// TestSoak churns every source and the active checks while delta and SotW
// clients stay connected (and two more reconnect every ~10 s), and at each
// checkpoint pauses the churn, waits for the bridge to be quiet and checks
// that every client holds exactly what the bridge publishes, then samples
// goroutines, open files, heap and RSS, which must stay flat.
//
// XDSBRIDGE_SOAK: duration (default 60s, the CI version); XDSBRIDGE_SOAK_CHECK:
// checkpoint interval (default 15s for a run of at most 2m, else 1m);
// XDSBRIDGE_SOAK_SEED: the churn's seed (logged), to replay one.
func TestSoak(t *testing.T) {
	dur, every := 60*time.Second, 15*time.Second
	if v := os.Getenv("XDSBRIDGE_SOAK"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("XDSBRIDGE_SOAK=%q: not a positive Go duration", v)
		}
		dur = d
		if dur > 2*time.Minute {
			every = time.Minute
		}
	}
	if v := os.Getenv("XDSBRIDGE_SOAK_CHECK"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("XDSBRIDGE_SOAK_CHECK=%q: not a positive Go duration", v)
		}
		every = d
	}
	seed := time.Now().UnixNano()
	if v := os.Getenv("XDSBRIDGE_SOAK_SEED"); v != "" {
		s, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("XDSBRIDGE_SOAK_SEED=%q: %v", v, err)
		}
		seed = s
	}
	t.Logf("soak: duration %s, checkpoints every %s, seed %d (XDSBRIDGE_SOAK_SEED=%d to replay the churn)", dur, every, seed, seed)
	s := newSoak(t, seed)
	s.run(dur, every)
}

const (
	soakFileServices = 10 // f00..f09: f00,f01 TCP-checked, f02,f03 HTTP-checked (pool hosts)
	soakPool         = 6  // real backends, toggled
	soakDNSIPs       = 8
)

var soakConsulIDs = map[string][]string{
	"c0": {"c0-1", "c0-2", "c0-3", "c0-4"}, // TTL checks only
	"c1": {"c1-1", "c1-2", "c1-3"},         // TTL checks and an active TCP check, on pool backends
}

type soak struct {
	t      *testing.T
	seed   int64
	rng    *rand.Rand // used by the churn goroutines under rngMu
	rngMu  sync.Mutex
	br     *bridge
	agent  *consultest.Agent
	dns    *dnsServer
	pool   []*poolBackend
	gate   sync.RWMutex // churn holds it read-locked while mutating; checkpoints lock it
	stop   chan struct{}
	wg     sync.WaitGroup
	errs   atomic.Int64 // churn operations that failed (logged)
	failed atomic.Bool

	fileWrites, dnsChanges, consulOps, toggles, reconnects atomic.Int64

	// file state: service → endpoint key → weight (absent: service not in the file)
	files map[string]map[string]int
	// consul state: registered instance ids
	consulUp map[string]bool

	clients []*soakClient // permanent
	churned []*soakClient // reconnecting
}

func (s *soak) intn(n int) int {
	s.rngMu.Lock()
	defer s.rngMu.Unlock()
	return s.rng.Intn(n)
}

func (s *soak) sleep(min, max time.Duration) bool {
	d := min + time.Duration(s.intn(int(max-min)+1))
	select {
	case <-s.stop:
		return false
	case <-time.After(d):
		return true
	}
}

func (s *soak) logErr(format string, args ...any) {
	s.errs.Add(1)
	s.t.Logf("churn: "+format, args...)
}

// poolBackend is a real HTTP server on a fixed address that the churn
// closes and reopens (TCP checks) or makes answer 503 (HTTP checks).
type poolBackend struct {
	addr      string
	port      int
	mu        sync.Mutex
	srv       *http.Server
	unhealthy atomic.Bool
}

func (p *poolBackend) open() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.srv != nil {
		return nil
	}
	lis, err := net.Listen("tcp", p.addr)
	if err != nil {
		return err
	}
	if p.addr == "127.0.0.1:0" {
		p.addr = lis.Addr().String()
		p.port = lis.Addr().(*net.TCPAddr).Port
	}
	p.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p.unhealthy.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok")
	}), ReadHeaderTimeout: 5 * time.Second}
	go p.srv.Serve(lis)
	return nil
}

func (p *poolBackend) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.srv != nil {
		p.srv.Close()
		p.srv = nil
	}
}

func (p *poolBackend) up() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.srv != nil
}

func newSoak(t *testing.T, seed int64) *soak {
	s := &soak{t: t, seed: seed, rng: rand.New(rand.NewSource(seed)), stop: make(chan struct{}),
		files: map[string]map[string]int{}, consulUp: map[string]bool{}}
	for i := 0; i < soakPool; i++ {
		p := &poolBackend{addr: "127.0.0.1:0"}
		if err := p.open(); err != nil {
			t.Fatal(err)
		}
		s.pool = append(s.pool, p)
		t.Cleanup(p.close)
	}

	// DNS: two strict services (one of two names) and one logical.
	s.dns = startDNS(t)
	for _, n := range soakDNSNames {
		s.dns.set(n, s.dnsIPs(1+s.intn(3))...)
	}

	// Consul: every instance registered, passing.
	s.agent = consultest.StartAgent(t, "dc1")
	for _, svc := range []string{"c0", "c1"} {
		for _, id := range soakConsulIDs[svc] {
			if err := s.consulRegister(id, api.HealthPassing); err != nil {
				t.Fatal(err)
			}
		}
	}

	// File: every service present with a few endpoints.
	for i := 0; i < soakFileServices; i++ {
		name := fmt.Sprintf("f%02d", i)
		s.files[name] = map[string]int{}
		for j := 0; j < 2; j++ {
			s.files[name][s.fileEndpoint(name)] = 1 + s.intn(5)
		}
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "services.yaml"), []byte(s.servicesYAML()), 0o644); err != nil {
		t.Fatal(err)
	}
	// Probes fail at once (refused, 503); a 1 s timeout keeps a loaded
	// machine's slow answers from flipping verdicts while churn is paused.
	check := "interval: 100ms, timeout: 1s, jitter: 0s, healthy_threshold: 1, unhealthy_threshold: 2"
	cfg := fmt.Sprintf(`
sources:
  - name: static
    file: {path: services.yaml, settle: 10ms}
  - name: legacy
    dns:
      resolvers: [%q]
      timeout: 1s
      services:
        - name: d-strict-0
          type: STRICT_DNS
          hosts: [{name: %s, port: 8080}, {name: %s, port: 8080}]
          dns_refresh_rate: 100ms
          dns_lookup_family: V4_ONLY
        - name: d-strict-1
          type: STRICT_DNS
          hosts: [{name: %s, port: 9090}]
          dns_refresh_rate: 150ms
          dns_lookup_family: V4_ONLY
        - name: d-logical
          type: LOGICAL_DNS
          hosts: [{name: %s, port: 7070}]
          dns_refresh_rate: 100ms
          dns_lookup_family: V4_ONLY
  - name: consul
    consul:
      address: %q
      services: {include: [c0, c1]}
      wait_time: 2s
      coalesce: 10ms
health_checks:
  services:
    f00: {type: tcp, %s}
    f01: {type: tcp, %s}
    f02: {type: http, %s, http: {path: /healthz}}
    f03: {type: http, %s, http: {path: /healthz}}
    c1: {type: tcp, %s}
`, s.dns.addr, soakDNSNames[0], soakDNSNames[1], soakDNSNames[2], soakDNSNames[3], s.agent.Addr(), check, check, check, check, check)
	s.br = startBridgeConfig(t, dir, cfg, nil)

	addr := s.br.app.XDSAddr()
	for i := 0; i < 3; i++ {
		for _, delta := range []bool{true, false} {
			c := newSoakClient(addr, fmt.Sprintf("soak-%s-%d", map[bool]string{true: "delta", false: "sotw"}[delta], i), delta)
			if err := c.connect(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.disconnect)
			s.clients = append(s.clients, c)
		}
	}
	for _, delta := range []bool{true, false} {
		c := newSoakClient(addr, fmt.Sprintf("soak-%s-reconnecting", map[bool]string{true: "delta", false: "sotw"}[delta]), delta)
		if err := c.connect(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.disconnect)
		s.churned = append(s.churned, c)
	}
	return s
}

var soakDNSNames = []string{"s0a.soak.test", "s0b.soak.test", "s1.soak.test", "l0.soak.test"}

func (s *soak) dnsIPs(n int) []string {
	perm := func() []int {
		s.rngMu.Lock()
		defer s.rngMu.Unlock()
		return s.rng.Perm(soakDNSIPs)
	}()
	var out []string
	for _, i := range perm[:n] {
		out = append(out, fmt.Sprintf("127.0.3.%d", i+1))
	}
	return out
}

// fileEndpoint picks an endpoint for a file service: a pool backend for the
// checked services, else one of a few unreachable addresses.
func (s *soak) fileEndpoint(name string) string {
	var i int
	fmt.Sscanf(name, "f%02d", &i)
	if i < 4 {
		return s.pool[s.intn(soakPool)].addr
	}
	return fmt.Sprintf("127.0.1.%d:%d", 1+s.intn(6), 8000+s.intn(3))
}

func (s *soak) servicesYAML() string {
	var sb strings.Builder
	sb.WriteString("services:\n")
	for _, name := range sortedNames(s.files) {
		eps := s.files[name]
		if len(eps) == 0 {
			fmt.Fprintf(&sb, "  %s: {}\n", name)
			continue
		}
		fmt.Fprintf(&sb, "  %s:\n    endpoints:\n", name)
		for _, key := range sortedNames(eps) {
			host, port, _ := net.SplitHostPort(key)
			w := eps[key]
			// The weight also picks a zone, so localities change too.
			fmt.Fprintf(&sb, "      - {address: %s, port: %s, weight: %d, locality: {zone: z%d}}\n", host, port, w, w%2)
		}
	}
	return sb.String()
}

func (s *soak) consulRegister(id, status string) error {
	svc, _, _ := strings.Cut(id, "-")
	var i int
	fmt.Sscanf(id, svc+"-%d", &i)
	port := 20000 + i
	if svc == "c1" {
		port = s.pool[i-1].port
	}
	err := s.agent.Client.Agent().ServiceRegister(&api.AgentServiceRegistration{
		ID: id, Name: svc, Address: "127.0.0.1", Port: port,
		Weights: &api.AgentWeights{Passing: 1 + s.intn(5), Warning: 1},
		Check:   &api.AgentServiceCheck{CheckID: id + "-ttl", TTL: "10m", Status: status},
	})
	if err == nil {
		s.consulUp[id] = true
	}
	return err
}

// churn runs op every [min, max] until stopped, holding the gate while it
// mutates.
func (s *soak) churn(min, max time.Duration, op func()) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for s.sleep(min, max) {
			s.gate.RLock()
			op()
			s.gate.RUnlock()
		}
	}()
}

func (s *soak) startChurn() {
	// File: 1-3 mutations per write.
	s.churn(150*time.Millisecond, 400*time.Millisecond, func() {
		for k := 1 + s.intn(3); k > 0; k-- {
			name := fmt.Sprintf("f%02d", s.intn(soakFileServices))
			eps, present := s.files[name]
			switch op := s.intn(10); {
			case !present:
				s.files[name] = map[string]int{s.fileEndpoint(name): 1 + s.intn(5)}
			case op == 0 && name >= "f06": // services f06.. come and go
				delete(s.files, name)
			case op < 4 && len(eps) < 5:
				eps[s.fileEndpoint(name)] = 1 + s.intn(5)
			case op < 7 && len(eps) > 0:
				delete(eps, sortedNames(eps)[s.intn(len(eps))])
			case len(eps) > 0:
				eps[sortedNames(eps)[s.intn(len(eps))]] = 1 + s.intn(5)
			}
		}
		tmp := s.br.services + ".tmp"
		if err := os.WriteFile(tmp, []byte(s.servicesYAML()), 0o644); err != nil {
			s.logErr("write: %v", err)
			return
		}
		if err := os.Rename(tmp, s.br.services); err != nil {
			s.logErr("rename: %v", err)
			return
		}
		s.fileWrites.Add(1)
	})
	// DNS: one name gets 1-3 addresses.
	s.churn(200*time.Millisecond, 600*time.Millisecond, func() {
		s.dns.set(soakDNSNames[s.intn(len(soakDNSNames))], s.dnsIPs(1+s.intn(3))...)
		s.dnsChanges.Add(1)
	})
	// Consul: register (new weight, a status), deregister, or flip a TTL.
	s.churn(200*time.Millisecond, 500*time.Millisecond, func() {
		svc := []string{"c0", "c1"}[s.intn(2)]
		ids := soakConsulIDs[svc]
		id := ids[s.intn(len(ids))]
		statuses := []string{api.HealthPassing, api.HealthWarning, api.HealthCritical}
		var err error
		switch op := s.intn(10); {
		case !s.consulUp[id] || op < 3:
			err = s.consulRegister(id, statuses[s.intn(3)])
		case op < 5:
			if err = s.agent.Client.Agent().ServiceDeregister(id); err == nil {
				delete(s.consulUp, id)
			}
		default:
			err = s.agent.Client.Agent().UpdateTTL(id+"-ttl", "soak", statuses[s.intn(3)])
		}
		if err != nil {
			s.logErr("consul %s: %v", id, err)
			return
		}
		s.consulOps.Add(1)
	})
	// Backends: close/reopen one (TCP and HTTP checks), or flip its /healthz.
	s.churn(200*time.Millisecond, 600*time.Millisecond, func() {
		p := s.pool[s.intn(soakPool)]
		switch {
		case s.intn(3) == 0:
			p.unhealthy.Store(!p.unhealthy.Load())
		case p.up():
			p.close()
		default:
			if err := p.open(); err != nil {
				s.logErr("reopen %s: %v", p.addr, err)
				return
			}
		}
		s.toggles.Add(1)
	})
	// Reconnecting clients: each disconnects and reconnects every ~10 s.
	for _, c := range s.churned {
		s.churn(8*time.Second, 12*time.Second, func() {
			c.disconnect()
			s.sleep(0, 300*time.Millisecond)
			if err := c.connect(); err != nil {
				s.logErr("reconnect %s: %v", c.node, err)
				return
			}
			c.reconnects.Add(1)
			s.reconnects.Add(1)
		})
	}
}

type soakSample struct {
	elapsed                    time.Duration
	file, dns, consul, toggles int64
	reconnects, pushes         int64
	acks, nacks                int64
	goroutines, fds            int
	heapAlloc, heapInuse, rss  uint64
	diffs                      int
	names                      int
}

// published is the bridge's view: per cluster name its cluster and
// assignment, with versions.
type published struct {
	clusters, clas map[string]store.ResourceInfo
}

func (s *soak) published() published {
	p := published{clusters: map[string]store.ResourceInfo{}, clas: map[string]store.ResourceInfo{}}
	for _, r := range s.br.app.Cache.List(xds.ClusterType) {
		p.clusters[r.Name] = r
	}
	for _, r := range s.br.app.Cache.List(xds.EndpointType) {
		p.clas[r.Name] = r
	}
	return p
}

func (p published) key() string {
	var sb strings.Builder
	for _, n := range sortedNames(p.clusters) {
		fmt.Fprintf(&sb, "c %s %s\n", n, p.clusters[n].Version)
	}
	for _, n := range sortedNames(p.clas) {
		fmt.Fprintf(&sb, "e %s %s\n", n, p.clas[n].Version)
	}
	return sb.String()
}

// diffs lists how one client's holdings differ from the bridge's.
func (p published) diffs(c *soakClient) []string {
	clusters, clas := c.snapshot()
	var out []string
	add := func(format string, args ...any) {
		out = append(out, fmt.Sprintf("%s %s: ", c.kind(), c.node)+fmt.Sprintf(format, args...))
	}
	for _, n := range sortedNames(p.clusters) {
		want := p.clusters[n]
		got, ok := clusters[n]
		switch {
		case !ok:
			add("cluster %s missing", n)
		case !proto.Equal(got.msg, want.Msg):
			add("cluster %s differs", n)
		case c.delta && got.version != want.Version:
			add("cluster %s at version %s, bridge %s", n, got.version, want.Version)
		}
		wantCLA, _ := p.clas[n].Msg.(*endpoint.ClusterLoadAssignment)
		gotCLA, ok := clas[n]
		switch {
		case wantCLA == nil:
			add("bridge has no assignment for cluster %s", n)
		case !ok:
			add("assignment %s missing (bridge: %s)", n, endpointSet(wantCLA))
		case endpointSet(gotCLA.msg.(*endpoint.ClusterLoadAssignment)) != endpointSet(wantCLA):
			add("endpoints of %s: client %s, bridge %s", n, endpointSet(gotCLA.msg.(*endpoint.ClusterLoadAssignment)), endpointSet(wantCLA))
		case !proto.Equal(gotCLA.msg, wantCLA):
			add("assignment %s differs beyond its endpoint set", n)
		case c.delta && gotCLA.version != p.clas[n].Version:
			add("assignment %s at version %s, bridge %s", n, gotCLA.version, p.clas[n].Version)
		}
	}
	for n := range clusters {
		if _, ok := p.clusters[n]; !ok {
			add("holds cluster %s the bridge does not serve", n)
		}
	}
	for n := range clas {
		if _, ok := p.clusters[n]; !ok {
			add("holds assignment %s of no served cluster", n)
		}
	}
	return out
}

func (s *soak) allClients() []*soakClient {
	return append(append([]*soakClient{}, s.clients...), s.churned...)
}

// compare waits for the bridge to be quiet and every client to hold what
// it publishes, and returns the differences left.
func (s *soak) compare() (diffs []string, names int) {
	t := s.t
	// Quiet: the published versions unchanged for 1.5 s.
	deadline := time.Now().Add(30 * time.Second)
	last, since := s.published().key(), time.Now()
	var changed []string // what changed last
	for time.Since(since) < 1500*time.Millisecond {
		if time.Now().After(deadline) {
			t.Errorf("the bridge's published versions kept changing for 30s with the churn paused; last change: %v", changed)
			break
		}
		time.Sleep(100 * time.Millisecond)
		if k := s.published().key(); k != last {
			changed = lineDiff(last, k)
			last, since = k, time.Now()
		}
	}
	// Converged: every client holds it (it ACKs what it applies), within 10 s.
	var p published
	conv := time.Now().Add(10 * time.Second)
	for {
		p = s.published()
		diffs = nil
		for _, c := range s.allClients() {
			diffs = append(diffs, p.diffs(c)...)
		}
		if len(diffs) == 0 || time.Now().After(conv) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Delta and SotW clients side by side: the same endpoint sets per name.
	sets := func(c *soakClient) string {
		_, clas := c.snapshot()
		var sb strings.Builder
		for _, n := range sortedNames(clas) {
			fmt.Fprintf(&sb, "%s=%s\n", n, endpointSet(clas[n].msg.(*endpoint.ClusterLoadAssignment)))
		}
		return sb.String()
	}
	ref := sets(s.clients[0])
	for _, c := range s.allClients()[1:] {
		if got := sets(c); got != ref {
			a, b := strings.Split(got, "\n"), strings.Split(ref, "\n")
			i := 0
			for i < len(a) && i < len(b) && a[i] == b[i] {
				i++
			}
			first := func(l []string) string {
				if i < len(l) {
					return l[i]
				}
				return "<end>"
			}
			diffs = append(diffs, fmt.Sprintf("%s %s endpoint sets differ from %s's, first at %q vs %q", c.kind(), c.node, s.clients[0].node, first(a), first(b)))
		}
	}
	return diffs, len(p.clusters)
}

// lineDiff lists the lines of a not in b (-) and of b not in a (+).
func lineDiff(a, b string) []string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	ma, mb := in(a), in(b)
	var out []string
	for l := range ma {
		if !mb[l] {
			out = append(out, "-"+l)
		}
	}
	for l := range mb {
		if !ma[l] {
			out = append(out, "+"+l)
		}
	}
	return out
}

func (s *soak) sample(start time.Time) soakSample {
	var acks, nacks int64
	for _, c := range s.allClients() {
		acks += c.acks.Load()
		nacks += c.nacks.Load()
	}
	smp := soakSample{elapsed: time.Since(start).Round(time.Second),
		file: s.fileWrites.Load(), dns: s.dnsChanges.Load(), consul: s.consulOps.Load(), toggles: s.toggles.Load(),
		reconnects: s.reconnects.Load(), pushes: int64(metricSum(s.t, s.br, "xdsbridge_xds_pushes_total")),
		acks: acks, nacks: nacks}
	time.Sleep(500 * time.Millisecond) // let short-lived goroutines (probes, handlers) end
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	smp.heapAlloc, smp.heapInuse = ms.HeapAlloc, ms.HeapInuse
	smp.goroutines = runtime.NumGoroutine()
	if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
		smp.fds = len(ents)
	}
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
				kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				smp.rss = kb << 10
			}
		}
	}
	return smp
}

func mib(b uint64) string { return fmt.Sprintf("%.1fMiB", float64(b)/(1<<20)) }

func (s *soak) logSample(i int, smp soakSample) {
	if i == 0 {
		s.t.Logf("%-4s %-7s %-6s %-5s %-6s %-7s %-5s %-7s %-7s %-5s %-4s %-4s %-10s %-10s %-10s %-5s",
			"cp", "elapsed", "file", "dns", "consul", "toggles", "recon", "pushes", "acks", "nacks", "gor", "fds", "heapAlloc", "heapInuse", "rss", "diffs")
	}
	s.t.Logf("%-4d %-7s %-6d %-5d %-6d %-7d %-5d %-7d %-7d %-5d %-4d %-4d %-10s %-10s %-10s %-5d",
		i, smp.elapsed, smp.file, smp.dns, smp.consul, smp.toggles, smp.reconnects, smp.pushes, smp.acks, smp.nacks,
		smp.goroutines, smp.fds, mib(smp.heapAlloc), mib(smp.heapInuse), mib(smp.rss), smp.diffs)
}

// checkpoint pauses the churn, compares and samples.
func (s *soak) checkpoint(start time.Time) ([]string, int, soakSample) {
	s.gate.Lock()
	defer s.gate.Unlock()
	diffs, names := s.compare()
	for _, c := range s.allClients() {
		if err := c.err(); err != nil {
			diffs = append(diffs, fmt.Sprintf("%s %s: stream ended: %v", c.kind(), c.node, err))
		}
	}
	return diffs, names, s.sample(start)
}

func (s *soak) run(dur, every time.Duration) {
	t := s.t
	start := time.Now()
	s.startChurn()
	stopChurn := func() {
		select {
		case <-s.stop:
		default:
			close(s.stop)
		}
		s.wg.Wait()
	}
	t.Cleanup(stopChurn)

	var samples []soakSample
	totalDiffs := 0
	for i := 1; ; i++ {
		at := start.Add(time.Duration(i) * every)
		final := !at.Before(start.Add(dur))
		if final {
			at = start.Add(dur)
		}
		time.Sleep(time.Until(at))
		if final {
			stopChurn()
		}
		diffs, names, smp := s.checkpoint(start)
		smp.diffs, smp.names = len(diffs), names
		totalDiffs += len(diffs)
		samples = append(samples, smp)
		s.logSample(len(samples)-1, smp)
		for j, d := range diffs {
			if j == 5 {
				t.Errorf("... and %d more differences", len(diffs)-5)
				break
			}
			t.Errorf("checkpoint %d: %s", len(samples)-1, d)
		}
		if smp.nacks != 0 {
			t.Errorf("checkpoint %d: the clients sent %d NACKs", len(samples)-1, smp.nacks)
		}
		if t.Failed() || final {
			break
		}
	}

	first, last := samples[0], samples[len(samples)-1]
	changes := last.file + last.dns + last.consul + last.toggles
	t.Logf("soak summary: %s, seed %d, %d changes applied (file writes %d, DNS changes %d, Consul ops %d, backend toggles %d), %d reconnects, %d pushes, %d ACKs, %d NACKs, %d differences at %d checkpoints, %d clusters at the end; goroutines %d→%d, fds %d→%d, heap %s→%s, RSS %s→%s (first checkpoint → last); %d churn errors",
		last.elapsed, s.seed, changes, last.file, last.dns, last.consul, last.toggles, last.reconnects, last.pushes,
		last.acks, last.nacks, totalDiffs, len(samples), last.names,
		first.goroutines, last.goroutines, first.fds, last.fds, mib(first.heapInuse), mib(last.heapInuse), mib(first.rss), mib(last.rss), s.errs.Load())
	if t.Failed() {
		return
	}
	if changes == 0 || last.pushes == 0 {
		t.Errorf("no churn happened: %d changes, %d pushes", changes, last.pushes)
	}
	if last.reconnects == 0 {
		t.Errorf("no client reconnected")
	}
	if len(samples) >= 2 {
		s.flat(samples)
	}
}

// Flat-line tolerances: over the first checkpoint (the baseline, after the
// warm-up). The CI run applies ~600 changes and pushes ~4,000 responses, so
// a goroutine or a file leaked per change or per hundred pushes exceeds
// them there; one per client reconnect (~10 in CI) only a long run: 30
// minutes make ~350 reconnects, ~18,000 changes and ~125,000 pushes, where
// a heap leak of ~150 bytes per push shows, and the trend a steady one.
const (
	tolGoroutines = 20
	tolFDs        = 10
	tolHeap       = 16 << 20
)

func heapTol(base uint64) float64 { return math.Max(float64(base)/2, tolHeap) }

// flat checks the last checkpoint against the first and, with 5 or more,
// the trend over them all.
func (s *soak) flat(samples []soakSample) {
	t := s.t
	first, last := samples[0], samples[len(samples)-1]
	if d := last.goroutines - first.goroutines; d > tolGoroutines {
		t.Errorf("goroutines grew by %d (%d → %d), more than %d", d, first.goroutines, last.goroutines, tolGoroutines)
	}
	if d := last.fds - first.fds; d > tolFDs {
		t.Errorf("open files grew by %d (%d → %d), more than %d", d, first.fds, last.fds, tolFDs)
	}
	if d := float64(last.heapInuse) - float64(first.heapInuse); d > heapTol(first.heapInuse) {
		t.Errorf("heap in use grew by %s (%s → %s), more than %s", mib(uint64(d)), mib(first.heapInuse), mib(last.heapInuse), mib(uint64(heapTol(first.heapInuse))))
	}
	if len(samples) < 5 {
		return
	}
	// Steady growth: the least-squares slope over every checkpoint,
	// projected over the run, must stay within the same tolerances.
	trend := func(f func(soakSample) float64) float64 {
		var sx, sy, sxx, sxy float64
		n := float64(len(samples))
		for _, smp := range samples {
			x, y := smp.elapsed.Seconds(), f(smp)
			sx, sy, sxx, sxy = sx+x, sy+y, sxx+x*x, sxy+x*y
		}
		slope := (n*sxy - sx*sy) / (n*sxx - sx*sx)
		return slope * (last.elapsed - first.elapsed).Seconds()
	}
	g := trend(func(x soakSample) float64 { return float64(x.goroutines) })
	f := trend(func(x soakSample) float64 { return float64(x.fds) })
	h := trend(func(x soakSample) float64 { return float64(x.heapInuse) })
	r := trend(func(x soakSample) float64 { return float64(x.rss) })
	t.Logf("trend over the run (least squares): goroutines %+.1f, fds %+.1f, heap %+.2fMiB, RSS %+.2fMiB", g, f, h/(1<<20), r/(1<<20))
	if g > tolGoroutines {
		t.Errorf("goroutines grow steadily: %+.1f over the run", g)
	}
	if f > tolFDs {
		t.Errorf("open files grow steadily: %+.1f over the run", f)
	}
	if h > heapTol(first.heapInuse) {
		t.Errorf("heap grows steadily: %+.2fMiB over the run", h/(1<<20))
	}
}
