package consul

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/xdsbridge/xdsbridge/sources"
	"github.com/xdsbridge/xdsbridge/sources/sourcestest"
)

// countingRT counts requests by URL path kind.
type countingRT struct {
	next http.RoundTripper
	mu   sync.Mutex
	byEP map[string]int
}

func (c *countingRT) RoundTrip(r *http.Request) (*http.Response, error) {
	c.count(r)
	return c.next.RoundTrip(r)
}

func (c *countingRT) count(r *http.Request) {
	ep := r.URL.Path
	for _, p := range []string{"/v1/health/service/", "/v1/catalog/node-services/"} {
		if len(ep) > len(p) && strings.HasPrefix(ep, p) {
			ep = p + ":name"
		}
	}
	c.mu.Lock()
	c.byEP[ep]++
	c.mu.Unlock()
}

func (c *countingRT) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.byEP
	c.byEP = map[string]int{}
	return out
}

// connCounter counts dialed and closed connections.
type connCounter struct{ dials, closes atomic.Int64 }

type countedConn struct {
	net.Conn
	c    *connCounter
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.c.closes.Add(1) })
	return c.Conn.Close()
}

func envInt(t testing.TB, name string, def int) int {
	if v := os.Getenv(name); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return n
	}
	return def
}

// TestBenchmarkIdleAndFlips is the benchmark, gated by
// XDSBRIDGE_CONSUL_BENCH=1. It registers XDSBRIDGE_CONSUL_BENCH_SERVICES
// (default 1000) services, each with a TTL check, and reports:
//   - over XDSBRIDGE_CONSUL_BENCH_IDLE (default 15s; 60s for the real
//     figure) with nothing changing: requests sent to Consul by endpoint,
//     connections dialed, closed and open;
//   - for 100 check flips: time from the UpdateTTL API call to the
//     source's Publish reaching the sink (not an xDS client), p50/p99/max.
//
// XDSBRIDGE_CONSUL_BENCH_MAX_QUERIES sets max_concurrent_queries (default
// 64): with 1000 services that is hinted mode; 150 services or fewer and
// 150 give blocking mode.
func TestBenchmarkIdleAndFlips(t *testing.T) {
	if os.Getenv("XDSBRIDGE_CONSUL_BENCH") != "1" {
		t.Skip("set XDSBRIDGE_CONSUL_BENCH=1 to run the benchmark")
	}
	n := envInt(t, "XDSBRIDGE_CONSUL_BENCH_SERVICES", 1000)
	idle := time.Duration(envInt(t, "XDSBRIDGE_CONSUL_BENCH_IDLE", 15)) * time.Second
	maxQ := envInt(t, "XDSBRIDGE_CONSUL_BENCH_MAX_QUERIES", 64)
	a := startAgent(t, "dc1")
	registerMany(t, a, n)

	rt := &countingRT{byEP: map[string]int{}}
	conns := &connCounter{}
	cfg := fmt.Sprintf(`{"address": %q, "max_concurrent_queries": %d, "services": {"exclude": ["consul"]}}`, a.Addr(), maxQ)
	start := time.Now()
	s, sink := startSourceWith(t, cfg, func(s *Source) {
		s.wrapRoundTripper = func(next http.RoundTripper) http.RoundTripper { rt.next = next; return rt }
		s.wrapConn = func(c net.Conn) net.Conn { conns.dials.Add(1); return &countedConn{Conn: c, c: conns} }
	})
	sink.WaitFor(t, 2*time.Minute, "first publish", func(us []sources.Update, _ []error) bool { return len(us) > 0 })
	u, _ := sink.Last()
	if len(u.Services) != n {
		t.Fatalf("first publish has %d services, want %d", len(u.Services), n)
	}
	t.Logf("services=%d max_concurrent_queries=%d hinted=%v: first publish after %s, %v requests, %d connections",
		n, maxQ, s.DebugInfo().(Debug).Datacenters[0].Feed != nil, time.Since(start).Round(time.Millisecond), rt.take(), conns.dials.Load())

	time.Sleep(2 * time.Second) // let the start-up reads settle
	rt.take()
	d0, c0 := conns.dials.Load(), conns.closes.Load()
	time.Sleep(idle)
	idleReqs := rt.take()
	total := 0
	for _, v := range idleReqs {
		total += v
	}
	t.Logf("idle %s: %d requests %v; connections dialed %d, closed %d during idle; open at end %d",
		idle, total, idleReqs, conns.dials.Load()-d0, conns.closes.Load()-c0, conns.dials.Load()-conns.closes.Load())

	var lat []time.Duration
	for i := 0; i < 100; i++ {
		svc := fmt.Sprintf("svc-%04d", (i*37)%n)
		status, wantHealth := api.HealthCritical, sources.HealthUnhealthy
		if hasFlipped(sink, svc) {
			status, wantHealth = api.HealthPassing, sources.HealthHealthy
		}
		t0 := time.Now()
		a.TTL(svc+"-1-ttl", status)
		sink.WaitFor(t, 30*time.Second, "flip of "+svc, func(us []sources.Update, _ []error) bool {
			sv, ok := sourcestest.Service(us[len(us)-1], svc)
			return ok && len(sv.Endpoints) == 1 && sv.Endpoints[0].Health == wantHealth
		})
		lat = append(lat, time.Since(t0))
		time.Sleep(50 * time.Millisecond)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	flipReqs := rt.take()
	t.Logf("100 flips, UpdateTTL call → Publish at the sink: p50 %s, p99 %s, max %s; requests during flips %v; open connections %d",
		lat[49].Round(time.Microsecond), lat[98].Round(time.Microsecond), lat[99].Round(time.Microsecond), flipReqs, conns.dials.Load()-conns.closes.Load())
}

func hasFlipped(sink *sourcestest.Sink, svc string) bool {
	u, _ := sink.Last()
	sv, ok := sourcestest.Service(u, svc)
	return ok && len(sv.Endpoints) == 1 && sv.Endpoints[0].Health == sources.HealthUnhealthy
}

// registerMany registers svc-0000... with one instance and a passing TTL
// check each, a few at a time.
func registerMany(t testing.TB, a *agent, n int) {
	var wg sync.WaitGroup
	errs := make(chan error, n)
	work := make(chan int)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				r := ttlService(fmt.Sprintf("svc-%04d-1", i), fmt.Sprintf("svc-%04d", i), "127.0.5.1", 10000+i, []string{"bench"}, nil, api.HealthPassing)
				if err := a.Client.Agent().ServiceRegister(r); err != nil {
					errs <- err
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
