package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	xdsgrpc "google.golang.org/grpc/xds"

	"github.com/xdsbridge/xdsbridge/internal/testbin"
	"github.com/xdsbridge/xdsbridge/sources/consul/consultest"
)

// Consul L7 config entries (README "Consul config entries") end to end: a
// real Consul 1.14 agent holds the entries and the registrations of real
// gRPC backends, the bridge's Consul source (config_entries: true) turns
// them into greeter's routes, and two real clients follow them: a grpc-go
// xDS client of xds:///greeter and a gRPC client through an Envoy taking
// the route configuration "greeter" by RDS over ADS.
//
// The backends: greeter g1, g2 (tag v1) and g3 (tag v2); greeter-next n1.
// Each answers the health service's Check under two service names,
// grpc.health.v1.Health and cr.Alt (two method prefixes for a router),
// and names itself in the response header cr-backend.
//
// Every call of both clients succeeds across every change. At a change
// that gives greeter's routes a cluster they did not name, the proxyless
// client used to fail a few calls (a window of milliseconds): grpc-go
// v1.85's own race between its new config selector and its cluster
// manager (crRaceErr). The bridge prevents it (xds/mbb.go: an interim
// route configuration names the added clusters in a route that never
// matches, the real one follows once the client could apply it), and
// crFinish allows no failed call.

const (
	crMethodCheck = "/grpc.health.v1.Health/Check"
	crMethodAlt   = "/cr.Alt/Check"
)

// crClient is one gRPC client of greeter (proxyless, or through Envoy),
// with a count of its calls and of those that failed.
type crClient struct {
	name   string
	conn   *grpc.ClientConn
	calls  atomic.Int64
	failed atomic.Int64
	mu     sync.Mutex
	phase  string         // the change last made (crSetup.crChange)
	errs   []crFailedCall // every failed call
}

// crFailedCall is a failed call: when, in which phase, and why.
type crFailedCall struct {
	at    time.Time
	phase string
	err   string
}

// crCall makes one unary call of method (with header x-tenant unless
// tenant is empty) and returns the backend that answered.
func (c *crClient) crCall(method, tenant string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if tenant != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "x-tenant", tenant)
	}
	var md metadata.MD
	err := c.conn.Invoke(ctx, method, &healthpb.HealthCheckRequest{}, &healthpb.HealthCheckResponse{}, grpc.Header(&md))
	c.calls.Add(1)
	if err == nil && len(md.Get("x-backend")) != 1 {
		err = fmt.Errorf("no x-backend header in %v", md)
	}
	if err != nil {
		c.failed.Add(1)
		c.mu.Lock()
		c.errs = append(c.errs, crFailedCall{at: time.Now(), phase: c.phase, err: fmt.Sprintf("%s x-tenant %q: %v", method, tenant, err)})
		c.mu.Unlock()
		return "", err
	}
	return md.Get("x-backend")[0], nil
}

// crTally makes n calls and counts them by backend; an error ends it.
func (c *crClient) crTally(n int, method, tenant string) (map[string]int, error) {
	got := map[string]int{}
	for range n {
		b, err := c.crCall(method, tenant)
		if err != nil {
			return got, err
		}
		got[b]++
	}
	return got, nil
}

// crExactly reports (as an error) unless got reached exactly the backends
// of want, each at least once.
func crExactly(got map[string]int, want ...string) error {
	names := make([]string, 0, len(got))
	for n := range got {
		names = append(names, n)
	}
	sort.Strings(names)
	sort.Strings(want)
	if strings.Join(names, ",") != strings.Join(want, ",") {
		return fmt.Errorf("reached %v, want exactly %v", got, want)
	}
	return nil
}

// crWaitExactly waits until a batch of calls reaches exactly want.
func (c *crClient) crWaitExactly(t *testing.T, br *bridge, what, method, tenant string, want ...string) {
	t.Helper()
	waitFor(t, 20*time.Second, fmt.Sprintf("%s: %s %s (x-tenant %q) to reach exactly %v", c.name, what, method, tenant, want), func() error {
		assertNoNACKs(t, br)
		got, err := c.crTally(15*len(want), method, tenant)
		if err != nil {
			return err
		}
		return crExactly(got, want...)
	})
}

// crLoad is background traffic on a client: one call of greeter's
// default (Check, no header) every 10ms until stopped. Its
// calls and failures count in the client's totals.
type crLoad struct {
	stop chan struct{}
	done chan struct{}
}

func crStartLoad(c *crClient) *crLoad {
	l := &crLoad{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-l.stop:
				return
			case <-tick.C:
			}
			c.crCall(crMethodCheck, "")
		}
	}()
	return l
}

func (l *crLoad) end() { close(l.stop); <-l.done }

// crSetup is the agent, the backends registered in it, the entries every
// test starts from, the bridge and the two clients.
type crSetup struct {
	a     *consultest.Agent
	br    *bridge
	ev    *envoy
	grpc  *crClient // proxyless
	envoy *crClient // through Envoy
	greet []string  // greeter's backends: g1, g2 (v1), g3 (v2)
	next  string    // greeter-next's: n1
}

func crStart(t *testing.T) *crSetup {
	t.Helper()
	testbin.Envoy(t)
	a := consultest.StartAgent(t, "dc1")
	s := &crSetup{a: a, greet: []string{"g1", "g2", "g3"}, next: "n1"}
	for _, b := range []struct{ name, service, tag string }{
		{"g1", "greeter", "v1"}, {"g2", "greeter", "v1"}, {"g3", "greeter", "v2"}, {"n1", "greeter-next", ""},
	} {
		be := startNamedBackend(t, b.name)
		r := &api.AgentServiceRegistration{ID: b.name, Name: b.service, Address: "127.0.0.1", Port: be.port,
			Check: &api.AgentServiceCheck{CheckID: b.name + "-ttl", TTL: "10m", Status: api.HealthPassing}}
		if b.tag != "" {
			r.Tags = []string{b.tag}
		}
		a.Register(r)
	}
	// Routers and splitters need an L7 protocol all along the chain
	// (Consul refuses them otherwise); the resolver defines the subsets.
	s.crSet(t, &api.ServiceConfigEntry{Kind: api.ServiceDefaults, Name: "greeter", Protocol: "grpc"})
	s.crSet(t, &api.ServiceConfigEntry{Kind: api.ServiceDefaults, Name: "greeter-next", Protocol: "grpc"})
	s.crSet(t, &api.ServiceResolverConfigEntry{Kind: api.ServiceResolver, Name: "greeter", Subsets: map[string]api.ServiceResolverSubset{
		"v1": {Filter: `"v1" in Service.Tags`},
		"v2": {Filter: `"v2" in Service.Tags`},
	}})

	dir := t.TempDir()
	s.br = startBridgeConfig(t, dir, fmt.Sprintf(`
sources:
  - name: consul
    consul:
      address: %q
      services: {include: [greeter, greeter-next]}
      wait_time: 2s
      coalesce: 10ms
      config_entries: true
`, a.Addr()), nil)
	s.ev = startEnvoyCerts(t, "envoy-sotw.yaml", s.br.app.XDSAddr(), "", envoyRDS...)

	bootstrap := fmt.Sprintf(`{
  "xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
  "node": {"id": "cr-grpc-client", "cluster": "e2e"}
}`, s.br.app.XDSAddr())
	builder, err := xdsgrpc.NewXDSResolverWithConfigForTesting([]byte(bootstrap))
	if err != nil {
		t.Fatal(err)
	}
	gconn, err := grpc.NewClient("xds:///greeter", grpc.WithResolvers(builder), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gconn.Close() })
	// Through Envoy: the authority names greeter's virtual host.
	econn, err := grpc.NewClient(s.ev.listener, grpc.WithAuthority("greeter"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { econn.Close() })
	s.grpc = &crClient{name: "grpc-go", conn: gconn}
	s.envoy = &crClient{name: "envoy", conn: econn}

	// The default: every call to all of greeter's hosts, whatever its
	// method or header.
	for _, c := range s.clients() {
		c.crWaitExactly(t, s.br, "default", crMethodCheck, "", s.greet...)
	}
	s.crCheckDefault(t, "before any router or splitter")
	return s
}

func (s *crSetup) clients() []*crClient { return []*crClient{s.grpc, s.envoy} }

func (s *crSetup) crSet(t *testing.T, e api.ConfigEntry) {
	t.Helper()
	if ok, _, err := s.a.Client.ConfigEntries().Set(e, nil); err != nil || !ok {
		t.Fatalf("writing %s/%s: ok=%v err=%v", e.GetKind(), e.GetName(), ok, err)
	}
}

func (s *crSetup) crDelete(t *testing.T, kind, name string) {
	t.Helper()
	if _, err := s.a.Client.ConfigEntries().Delete(kind, name, nil); err != nil {
		t.Fatalf("deleting %s/%s: %v", kind, name, err)
	}
}

// crEach runs f for both clients at once and fails the test with the
// first error.
func (s *crSetup) crEach(t *testing.T, f func(c *crClient) error) {
	t.Helper()
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, c := range s.clients() {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = f(c) }()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// crCheckDefault asserts greeter's default routing on both clients: 100
// calls of each kind (Check and cr.Alt, with and without x-tenant: test)
// reach exactly g1, g2 and g3, never greeter-next.
func (s *crSetup) crCheckDefault(t *testing.T, when string) {
	t.Helper()
	s.crEach(t, func(c *crClient) error {
		for _, k := range []struct{ method, tenant string }{{crMethodCheck, ""}, {crMethodCheck, "test"}, {crMethodAlt, ""}, {crMethodAlt, "test"}} {
			got, err := c.crTally(100, k.method, k.tenant)
			if err != nil {
				return fmt.Errorf("%s, %s: %s x-tenant %q: %v", when, c.name, k.method, k.tenant, err)
			}
			t.Logf("%s, %s: %s x-tenant %q, 100 calls: %v", when, c.name, k.method, k.tenant, got)
			if err := crExactly(got, s.greet...); err != nil {
				return fmt.Errorf("%s, %s: %s x-tenant %q: %v", when, c.name, k.method, k.tenant, err)
			}
		}
		return nil
	})
}

// crPhase logs and records the calls and failures of both clients so far.
func (s *crSetup) crPhase(t *testing.T, what string) {
	t.Helper()
	line := fmt.Sprintf("%s: grpc-go %d calls, %d failed; envoy %d calls, %d failed",
		what, s.grpc.calls.Load(), s.grpc.failed.Load(), s.envoy.calls.Load(), s.envoy.failed.Load())
	t.Log(line)
	s.crNoDiagnostics(t)
}

// crChange names the phase a change starts (failed calls are counted by
// phase) and makes the change with write.
func (s *crSetup) crChange(phase string, write func()) time.Time {
	for _, c := range s.clients() {
		c.mu.Lock()
		c.phase = phase
		c.mu.Unlock()
	}
	t0 := time.Now()
	write()
	return t0
}

// crRaceErr is how grpc-go v1.85 failed a call its new route sends to a
// cluster new to the channel while its cluster manager does not have that
// cluster yet: the ClientConn installs the resolver's new config selector
// (clientconn.go, applyServiceConfigAndBalancer) before it hands the new
// service config, which adds the cluster, to the balancer
// (balancerWrapper.updateClientConnState), and xds_cluster_manager's
// picker fails a pick for a cluster it does not know
// (internal/xds/balancer/clustermanager/picker.go). The bridge's make
// before break (xds/mbb.go) prevents it; the tests allow none.
const crRaceErr = "unknown cluster selected for RPC"

// crFinish asserts that no call through Envoy failed; that a call of the
// proxyless client failed only with crRaceErr, in a phase whose change
// gives greeter's routes a cluster they did not name before (raced, with
// its cluster; nil: no call may fail); and that no client rejected an
// update.
func (s *crSetup) crFinish(t *testing.T, raced map[string][]string) {
	t.Helper()
	for _, c := range s.clients() {
		c.mu.Lock()
		errs := append([]crFailedCall(nil), c.errs...)
		c.mu.Unlock()
		t.Logf("%s: %d calls, %d failed", c.name, c.calls.Load(), len(errs))
		byPhase := map[string][]crFailedCall{}
		for i, e := range errs {
			if i < 3 {
				t.Logf("%s: failed call at %s, phase %q: %s", c.name, e.at.Format(time.StampMicro), e.phase, e.err)
			}
			ok := false
			for _, cluster := range raced[e.phase] {
				ok = ok || strings.Contains(e.err, crRaceErr+`: "cluster:`+cluster+`"`)
			}
			if c != s.grpc || !ok {
				t.Errorf("%s: a call failed in phase %q: %s", c.name, e.phase, e.err)
				continue
			}
			byPhase[e.phase] = append(byPhase[e.phase], e)
		}
		for phase, fs := range byPhase {
			// A race: the failures end as the balancer catches up.
			span := fs[len(fs)-1].at.Sub(fs[0].at)
			t.Logf("%s: %d calls failed in phase %q with grpc-go's %q, within %v", c.name, len(fs), phase, crRaceErr, span)
			if span > time.Second {
				t.Errorf("%s: calls failed with %q over %v in phase %q; want a window under 1s", c.name, crRaceErr, span, phase)
			}
		}
	}
	s.ev.assertNoRejections(t)
	assertNoNACKs(t, s.br)
	s.crNoDiagnostics(t)
}

// crNoDiagnostics asserts that the Consul source converted every entry
// whole: /debug/sources lists no config-entry diagnostic.
func (s *crSetup) crNoDiagnostics(t *testing.T) {
	t.Helper()
	var diags struct {
		Sources []struct {
			Name  string `json:"name"`
			Debug struct {
				ConfigEntries struct {
					Diagnostics []json.RawMessage `json:"diagnostics"`
				} `json:"config_entries"`
			} `json:"debug"`
		} `json:"sources"`
	}
	s.br.debugJSON(t, "/debug/sources", &diags)
	for _, src := range diags.Sources {
		if d := src.Debug.ConfigEntries.Diagnostics; len(d) != 0 {
			t.Errorf("source %s: config entry diagnostics: %s", src.Name, d)
		}
	}
}

// crBinomialBounds is the range of k in binomial(n, p) within z standard
// deviations of the mean.
func crBinomialBounds(n int, p, z float64) (int, int) {
	sd := math.Sqrt(float64(n) * p * (1 - p))
	return int(math.Ceil(float64(n)*p - z*sd)), int(math.Floor(float64(n)*p + z*sd))
}

// crEnvoyWeights reads the weighted clusters of Envoy's route
// configuration greeter, as cluster=weight.
func crEnvoyWeights(t *testing.T, ev *envoy) (map[string]uint64, error) {
	t.Helper()
	body, err := ev.Get("/config_dump?resource=dynamic_route_configs")
	if err != nil {
		return nil, err
	}
	var dump struct {
		Configs []struct {
			RouteConfig struct {
				Name         string `json:"name"`
				VirtualHosts []struct {
					Routes []struct {
						Route struct {
							WeightedClusters struct {
								Clusters []struct {
									Name   string `json:"name"`
									Weight uint64 `json:"weight"`
								} `json:"clusters"`
							} `json:"weighted_clusters"`
						} `json:"route"`
					} `json:"routes"`
				} `json:"virtual_hosts"`
			} `json:"route_config"`
		} `json:"configs"`
	}
	if err := json.Unmarshal([]byte(body), &dump); err != nil {
		return nil, err
	}
	out := map[string]uint64{}
	for _, c := range dump.Configs {
		if c.RouteConfig.Name != "greeter" {
			continue
		}
		for _, vh := range c.RouteConfig.VirtualHosts {
			for _, r := range vh.Routes {
				for _, wc := range r.Route.WeightedClusters.Clusters {
					out[wc.Name] = wc.Weight
				}
			}
		}
	}
	return out, nil
}

// TestConsulEntriesSplitter: a service-splitter written in Consul sends
// 80% of greeter's calls to its subset v1 and 20% to greeter-next, on
// both clients, within 5 standard deviations over 1,000 calls each; a
// splitter with two-decimal weights (33.33/66.67) is served exactly;
// deleting the splitter restores the default. Background calls run
// through every change: none fails, through Envoy or through the
// proxyless client (grpc-go's race, crRaceErr, is prevented); no client
// NACKs.
func TestConsulEntriesSplitter(t *testing.T) {
	s := crStart(t)
	loads := []*crLoad{crStartLoad(s.grpc), crStartLoad(s.envoy)}
	s.crPhase(t, "default")

	// 80/20: v1 (g1, g2) and greeter-next (n1); g3 (v2) gets nothing.
	t0 := s.crChange("splitter 80/20", func() {
		s.crSet(t, &api.ServiceSplitterConfigEntry{Kind: api.ServiceSplitter, Name: "greeter", Splits: []api.ServiceSplit{
			{Weight: 80, ServiceSubset: "v1"},
			{Weight: 20, Service: "greeter-next"},
		}})
	})
	for _, c := range s.clients() {
		waitFor(t, 20*time.Second, c.name+": a call to greeter-next", func() error {
			// A failed call is counted (crFinish judges it); go on.
			if b, _ := c.crCall(crMethodCheck, ""); b != s.next {
				return fmt.Errorf("reached %q", b)
			}
			return nil
		})
		t.Logf("%s: a call reached greeter-next %v after the splitter was written", c.name, time.Since(t0).Round(time.Millisecond))
	}
	const n, p = 1000, 0.2
	lo, hi := crBinomialBounds(n, p, 5)
	s.crEach(t, func(c *crClient) error {
		got, err := c.crTally(n, crMethodCheck, "")
		if err != nil {
			return err
		}
		t.Logf("splitter 80/20, %s, %d calls: %v; greeter-next allowed %d..%d (5 sd)", c.name, n, got, lo, hi)
		if err := crExactly(got, "g1", "g2", s.next); err != nil {
			return fmt.Errorf("splitter 80/20, %s: %v", c.name, err)
		}
		if k := got[s.next]; k < lo || k > hi {
			return fmt.Errorf("splitter 80/20, %s: %d of %d calls to greeter-next; want %d..%d", c.name, k, n, lo, hi)
		}
		return nil
	})
	s.crPhase(t, "splitter 80/20")

	// Two decimals: 33.33 / 66.67 are served as 3333 / 6667.
	s.crChange("splitter 33.33/66.67", func() {
		s.crSet(t, &api.ServiceSplitterConfigEntry{Kind: api.ServiceSplitter, Name: "greeter", Splits: []api.ServiceSplit{
			{Weight: 33.33, ServiceSubset: "v1"},
			{Weight: 66.67, Service: "greeter-next"},
		}})
	})
	want := map[string]uint64{"greeter/v1": 3333, "greeter-next": 6667}
	var weights map[string]uint64
	waitFor(t, 20*time.Second, "Envoy's route greeter to weigh 33.33/66.67", func() error {
		var err error
		if weights, err = crEnvoyWeights(t, s.ev); err != nil {
			return err
		}
		if fmt.Sprint(weights) != fmt.Sprint(want) {
			return fmt.Errorf("weighted clusters %v, want %v", weights, want)
		}
		return nil
	})
	t.Logf("splitter 33.33/66.67: Envoy's route greeter has weighted clusters %v", weights)
	const n2, p2 = 600, 0.6667
	lo2, hi2 := crBinomialBounds(n2, p2, 5)
	s.crEach(t, func(c *crClient) error {
		// The proxyless client may lag Envoy: wait for a batch at the
		// new weights' side of the old bounds (80/20 gives at most 263
		// of 1,000), then count a fresh one.
		deadline := time.Now().Add(20 * time.Second)
		for {
			got, err := c.crTally(100, crMethodCheck, "")
			if err != nil {
				return err
			}
			if got[s.next] >= 45 {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s: greeter-next's share did not rise after the 33.33/66.67 splitter: %v", c.name, got)
			}
		}
		got, err := c.crTally(n2, crMethodCheck, "")
		if err != nil {
			return err
		}
		t.Logf("splitter 33.33/66.67, %s, %d calls: %v; greeter-next allowed %d..%d (5 sd)", c.name, n2, got, lo2, hi2)
		if err := crExactly(got, "g1", "g2", s.next); err != nil {
			return fmt.Errorf("splitter 33.33/66.67, %s: %v", c.name, err)
		}
		if k := got[s.next]; k < lo2 || k > hi2 {
			return fmt.Errorf("splitter 33.33/66.67, %s: %d of %d calls to greeter-next; want %d..%d", c.name, k, n2, lo2, hi2)
		}
		return nil
	})
	s.crPhase(t, "splitter 33.33/66.67")

	// Deleted: the default again.
	s.crChange("splitter deleted", func() { s.crDelete(t, api.ServiceSplitter, "greeter") })
	for _, c := range s.clients() {
		c.crWaitExactly(t, s.br, "splitter deleted", crMethodCheck, "", s.greet...)
	}
	s.crCheckDefault(t, "splitter deleted")
	s.crPhase(t, "splitter deleted")

	for _, l := range loads {
		l.end()
	}
	s.crPhase(t, "end")
	// The 80/20 splitter gives greeter's default route greeter/v1 and
	// greeter-next instead of greeter; deleting it, greeter again.
	// No failed call allowed (grpc-go's race is prevented).
	s.crFinish(t, nil)
}

// TestConsulEntriesRouter: a service-router written in Consul sends calls
// with x-tenant: test to greeter-next and calls of the cr.Alt service
// (path prefix /cr.Alt/) to greeter's subset v2, on both clients, each
// call exactly where its route says (the first route wins when both
// match); other calls keep the default; deleting the router restores the
// default for all. Then a service-resolver's DefaultSubset v2 sends every
// call to g3, and deleting the resolver restores the default. Background
// calls run through every change: none fails, through Envoy or through
// the proxyless client (grpc-go's race, crRaceErr, is prevented); no
// client NACKs.
func TestConsulEntriesRouter(t *testing.T) {
	s := crStart(t)
	loads := []*crLoad{crStartLoad(s.grpc), crStartLoad(s.envoy)}
	s.crPhase(t, "default")

	t0 := s.crChange("router", func() {
		s.crSet(t, &api.ServiceRouterConfigEntry{Kind: api.ServiceRouter, Name: "greeter", Routes: []api.ServiceRoute{
			{
				Match: &api.ServiceRouteMatch{HTTP: &api.ServiceRouteHTTPMatch{
					Header: []api.ServiceRouteHTTPMatchHeader{{Name: "x-tenant", Exact: "test"}},
				}},
				Destination: &api.ServiceRouteDestination{Service: "greeter-next"},
			},
			{
				Match:       &api.ServiceRouteMatch{HTTP: &api.ServiceRouteHTTPMatch{PathPrefix: "/cr.Alt/"}},
				Destination: &api.ServiceRouteDestination{ServiceSubset: "v2"},
			},
		}})
	})
	for _, c := range s.clients() {
		c.crWaitExactly(t, s.br, "router", crMethodCheck, "test", s.next)
		c.crWaitExactly(t, s.br, "router", crMethodAlt, "", "g3")
		t.Logf("%s: router in effect %v after it was written", c.name, time.Since(t0).Round(time.Millisecond))
	}
	s.crEach(t, func(c *crClient) error {
		for _, k := range []struct {
			method, tenant string
			want           []string
		}{
			{crMethodCheck, "", s.greet},     // the default route
			{crMethodCheck, "prod", s.greet}, // another tenant: the default
			{crMethodCheck, "test", []string{s.next}},
			{crMethodAlt, "", []string{"g3"}},
			{crMethodAlt, "prod", []string{"g3"}},
			{crMethodAlt, "test", []string{s.next}}, // the first route wins
		} {
			got, err := c.crTally(150, k.method, k.tenant)
			if err != nil {
				return fmt.Errorf("router, %s: %s x-tenant %q: %v", c.name, k.method, k.tenant, err)
			}
			t.Logf("router, %s: %s x-tenant %q, 150 calls: %v", c.name, k.method, k.tenant, got)
			if err := crExactly(got, k.want...); err != nil {
				return fmt.Errorf("router, %s: %s x-tenant %q: %v", c.name, k.method, k.tenant, err)
			}
		}
		return nil
	})
	s.crPhase(t, "router")

	// Deleted: the default again, for every kind of call.
	s.crChange("router deleted", func() { s.crDelete(t, api.ServiceRouter, "greeter") })
	for _, c := range s.clients() {
		c.crWaitExactly(t, s.br, "router deleted", crMethodCheck, "test", s.greet...)
		c.crWaitExactly(t, s.br, "router deleted", crMethodAlt, "", s.greet...)
	}
	s.crCheckDefault(t, "router deleted")
	s.crPhase(t, "router deleted")

	// The resolver's default subset v2: every call to g3. Then the
	// resolver deleted (nothing names its subsets any more): the default.
	s.crChange("resolver default subset", func() {
		s.crSet(t, &api.ServiceResolverConfigEntry{Kind: api.ServiceResolver, Name: "greeter", DefaultSubset: "v2",
			Subsets: map[string]api.ServiceResolverSubset{
				"v1": {Filter: `"v1" in Service.Tags`},
				"v2": {Filter: `"v2" in Service.Tags`},
			}})
	})
	for _, c := range s.clients() {
		c.crWaitExactly(t, s.br, "resolver default subset v2", crMethodCheck, "", "g3")
	}
	s.crEach(t, func(c *crClient) error {
		for _, k := range []struct{ method, tenant string }{{crMethodCheck, ""}, {crMethodCheck, "test"}, {crMethodAlt, ""}} {
			got, err := c.crTally(100, k.method, k.tenant)
			if err != nil {
				return err
			}
			t.Logf("resolver default subset v2, %s: %s x-tenant %q, 100 calls: %v", c.name, k.method, k.tenant, got)
			if err := crExactly(got, "g3"); err != nil {
				return fmt.Errorf("resolver default subset v2, %s: %s x-tenant %q: %v", c.name, k.method, k.tenant, err)
			}
		}
		return nil
	})
	s.crPhase(t, "resolver default subset")
	s.crChange("resolver deleted", func() { s.crDelete(t, api.ServiceResolver, "greeter") })
	for _, c := range s.clients() {
		c.crWaitExactly(t, s.br, "resolver deleted", crMethodCheck, "", s.greet...)
	}
	s.crCheckDefault(t, "resolver deleted")
	s.crPhase(t, "resolver deleted")

	for _, l := range loads {
		l.end()
	}
	s.crPhase(t, "end")
	// The router adds greeter-next and greeter/v2 to greeter's routes
	// (deleting it adds none), the default subset greeter/v2, and
	// deleting the resolver greeter again.
	// No failed call allowed (grpc-go's race is prevented).
	s.crFinish(t, nil)
}
