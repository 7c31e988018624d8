package dns

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	mdns "github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/xdsbridge/xdsbridge/sources"
	"github.com/xdsbridge/xdsbridge/sources/sourcestest"
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(benchServerEnv); spec != "" {
		runBenchServer(spec) // the benchmark's DNS server process; never returns
	}
	goleak.VerifyTestMain(m)
}

const (
	tA    = mdns.TypeA
	tAAAA = mdns.TypeAAAA
)

func strict(name string, hosts ...map[string]any) svcCfg {
	return svcCfg{"name": name, "type": "STRICT_DNS", "hosts": hosts,
		"dns_lookup_family": "V4_ONLY", "dns_refresh_rate": "20ms"}
}

func host(name string, port int) map[string]any { return map[string]any{"name": name, "port": port} }

// settle waits for n more queries of name/qtype, i.e. n more refresh rounds.
func settle(ts *testServer, name string, qtype uint16, n int) {
	ts.waitQueries(name, qtype, ts.count(name, qtype)+n, 10*time.Second)
}

func TestStrictFollowsAnswers(t *testing.T) {
	ts := newTestServer(t)
	ts.answer("web.test", tA, "web.test. 30 IN A 10.0.0.1", "web.test. 30 IN A 10.0.0.2", "web.test. 30 IN A 10.0.0.1")
	r := startSource(t, "dns", srcCfg(ts.addr, strict("web", host("web.test", 8080))), sources.Env{})

	r.waitEndpoints(t, "web", []sources.Endpoint{ep("10.0.0.1", 8080, "web.test"), ep("10.0.0.2", 8080, "web.test")})
	first, _ := r.sink.Last()
	want := sources.Update{Source: "dns", Services: []sources.Service{{Name: "web", Endpoints: []sources.Endpoint{
		ep("10.0.0.1", 8080, "web.test"), ep("10.0.0.2", 8080, "web.test")}}}}
	if diff := cmp.Diff(want, first); diff != "" {
		t.Fatalf("first update (-want +got):\n%s", diff)
	}

	// Same set in another order, other TTLs: no publish.
	ts.answer("web.test", tA, "web.test. 5 IN A 10.0.0.2", "web.test. 7 IN A 10.0.0.1")
	settle(ts, "web.test", tA, 5)
	if n := len(r.sink.Updates()); n != 1 {
		t.Fatalf("got %d updates for unchanged answers, want 1", n)
	}

	// A host disappears, another appears.
	ts.answer("web.test", tA, "web.test. 30 IN A 10.0.0.3", "web.test. 30 IN A 10.0.0.2")
	r.waitEndpoints(t, "web", []sources.Endpoint{ep("10.0.0.2", 8080, "web.test"), ep("10.0.0.3", 8080, "web.test")})

	// A successful answer with zero hosts empties the cluster.
	ts.answer("web.test", tA)
	r.waitEndpoints(t, "web", nil)
	if errs := r.sink.Errors(); len(errs) != 0 {
		t.Fatalf("NODATA reported errors: %v", errs)
	}
}

func TestStrictUnionOfNames(t *testing.T) {
	ts := newTestServer(t)
	ts.answer("a.test", tA, "a.test. 30 IN A 10.0.0.1", "a.test. 30 IN A 10.0.0.2")
	ts.answer("b.test", tA, "b.test. 30 IN A 10.0.0.2", "b.test. 30 IN A 10.0.0.3")
	ts.answer("c.test", tA, "c.test. 30 IN A 10.0.0.1")
	r := startSource(t, "dns", srcCfg(ts.addr, strict("u", host("a.test", 80), host("b.test", 80), host("c.test", 81))), sources.Env{})
	want := []sources.Endpoint{ep("10.0.0.1", 80, "a.test"), ep("10.0.0.1", 81, "c.test"), ep("10.0.0.2", 80, "a.test"), ep("10.0.0.3", 80, "b.test")}
	r.waitEndpoints(t, "u", want)
	last, _ := r.sink.Last()
	got, _ := sourcestest.Service(last, "u")
	if diff := cmp.Diff(want, got.Endpoints); diff != "" {
		t.Fatalf("union (-want +got):\n%s", diff)
	}
	if n := len(r.sink.Updates()); n != 1 {
		t.Fatalf("got %d updates, want 1 (the first round)", n)
	}
}

func TestNXDOMAINAndNODATAAreSuccessWithZeroHosts(t *testing.T) {
	ts := newTestServer(t)
	ts.answer("web.test", tA, "web.test. 30 IN A 10.0.0.1")
	r := startSource(t, "dns", srcCfg(ts.addr, strict("web", host("web.test", 80))), sources.Env{})
	r.waitEndpoints(t, "web", []sources.Endpoint{ep("10.0.0.1", 80, "web.test")})

	ts.set("web.test", tA, reply{rcode: mdns.RcodeNameError})
	r.waitEndpoints(t, "web", nil)

	ts.answer("web.test", tA, "web.test. 30 IN A 10.0.0.2")
	r.waitEndpoints(t, "web", []sources.Endpoint{ep("10.0.0.2", 80, "web.test")})

	ts.answer("web.test", tA) // NODATA: NOERROR, no records
	r.waitEndpoints(t, "web", nil)
	if errs := r.sink.Errors(); len(errs) != 0 {
		t.Fatalf("NXDOMAIN/NODATA reported errors: %v", errs)
	}
}

func TestFailuresKeepLastEndpoints(t *testing.T) {
	for _, tc := range []struct {
		name    string
		reply   reply
		wantErr string
	}{
		{"servfail", reply{rcode: mdns.RcodeServerFailure}, "rcode SERVFAIL"},
		{"refused", reply{rcode: mdns.RcodeRefused}, "rcode REFUSED"},
		{"timeout", reply{drop: true}, "timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := newTestServer(t)
			ts.answer("web.test", tA, "web.test. 30 IN A 10.0.0.1")
			svc := strict("web", host("web.test", 80))
			svc["dns_failure_refresh_rate"] = "10ms"
			cfg := srcCfg(ts.addr, svc)
			cfg["timeout"] = "100ms"
			r := startSource(t, "dns", cfg, sources.Env{})
			r.waitEndpoints(t, "web", []sources.Endpoint{ep("10.0.0.1", 80, "web.test")})

			ts.set("web.test", tA, tc.reply)
			r.sink.WaitFor(t, 10*time.Second, "two failures", func(_ []sources.Update, errs []error) bool { return len(errs) >= 2 })
			err := r.sink.Errors()[0]
			if !strings.Contains(err.Error(), "web.test") || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %q does not name web.test and %q", err, tc.wantErr)
			}
			if n := len(r.sink.Updates()); n != 1 {
				t.Fatalf("got %d updates during failures, want only the first", n)
			}
			d := r.src.DebugInfo().(Debug).Names[0]
			if d.ConsecutiveFailures < 2 || !strings.Contains(d.LastError, tc.wantErr) || d.LastErrorTime == nil ||
				!cmp.Equal(d.Answer, []string{"10.0.0.1"}) {
				t.Fatalf("debug info after failures: %+v", d)
			}

			ts.answer("web.test", tA, "web.test. 30 IN A 10.0.0.9")
			r.waitEndpoints(t, "web", []sources.Endpoint{ep("10.0.0.9", 80, "web.test")})
		})
	}
}

// TestRecoveryPublishesOnceUnchanged: when the last failing name answers
// again, the source publishes its unchanged set once, so the bridge clears
// its stale mark (it is set by Fail and cleared by Publish; an unchanged
// set sends clients nothing). Not before every name answers again, and
// only once.
func TestRecoveryPublishesOnceUnchanged(t *testing.T) {
	ts := newTestServer(t)
	ts.answer("a.test", tA, "a.test. 30 IN A 10.0.0.1")
	ts.answer("b.test", tA, "b.test. 30 IN A 10.0.0.2")
	cfg := srcCfg(ts.addr, strict("web", host("a.test", 80)), strict("api", host("b.test", 80)))
	r := startSource(t, "dns", cfg, sources.Env{})
	r.waitEndpoints(t, "web", []sources.Endpoint{ep("10.0.0.1", 80, "a.test")})
	first, _ := r.sink.Last()

	ts.set("a.test", tA, reply{rcode: mdns.RcodeServerFailure})
	ts.set("b.test", tA, reply{rcode: mdns.RcodeServerFailure})
	r.sink.WaitFor(t, 10*time.Second, "failures", func(_ []sources.Update, errs []error) bool { return len(errs) >= 4 })
	// One name answers again, the other still fails: nothing published.
	ts.answer("a.test", tA, "a.test. 30 IN A 10.0.0.1")
	settle(ts, "a.test", tA, 3)
	settle(ts, "b.test", tA, 3)
	if n := len(r.sink.Updates()); n != 1 {
		t.Fatalf("%d updates while b.test still fails; want only the first", n)
	}
	// Both answer again, unchanged: one publish of the same set.
	ts.answer("b.test", tA, "b.test. 30 IN A 10.0.0.2")
	r.sink.WaitFor(t, 10*time.Second, "a publish after the recovery", func(us []sources.Update, _ []error) bool { return len(us) == 2 })
	settle(ts, "a.test", tA, 5)
	settle(ts, "b.test", tA, 5)
	us := r.sink.Updates()
	if len(us) != 2 {
		t.Fatalf("%d updates after the recovery; want 2 (the first, the recovery)", len(us))
	}
	if diff := cmp.Diff(first, us[1]); diff != "" {
		t.Fatalf("recovery update differs from the first (-first +recovery):\n%s", diff)
	}
}

func TestFailureRefreshRate(t *testing.T) {
	ts := newTestServer(t)
	ts.set("web.test", tA, reply{rcode: mdns.RcodeServerFailure})
	svc := strict("web", host("web.test", 80))
	svc["dns_refresh_rate"] = "1h"
	svc["dns_failure_refresh_rate"] = "10ms"
	r := startSource(t, "dns", srcCfg(ts.addr, svc), sources.Env{})
	// Retries come at the failure rate, not the hour-long refresh rate.
	ts.waitQueries("web.test", tA, 5, 10*time.Second)
	// Once it succeeds, the next refresh is an hour away.
	ts.answer("web.test", tA, "web.test. 30 IN A 10.0.0.1")
	r.waitEndpoints(t, "web", []sources.Endpoint{ep("10.0.0.1", 80, "web.test")})
	d := r.src.DebugInfo().(Debug).Names[0]
	if d.NextRefresh == nil || time.Until(*d.NextRefresh) < 50*time.Minute || d.ConsecutiveFailures != 0 {
		t.Fatalf("after success: %+v", d)
	}
}

func TestFirstRoundFailureStillPublishes(t *testing.T) {
	ts := newTestServer(t)
	ts.answer("ok.test", tA, "ok.test. 30 IN A 10.0.0.1")
	ts.set("bad.test", tA, reply{rcode: mdns.RcodeServerFailure})
	r := startSource(t, "dns", srcCfg(ts.addr, strict("ok", host("ok.test", 80)), strict("bad", host("bad.test", 80))), sources.Env{})
	r.sink.WaitFor(t, 10*time.Second, "first update", func(us []sources.Update, _ []error) bool { return len(us) > 0 })
	want := sources.Update{Source: "dns", Services: []sources.Service{
		{Name: "ok", Endpoints: []sources.Endpoint{ep("10.0.0.1", 80, "ok.test")}},
		{Name: "bad", Endpoints: []sources.Endpoint{}},
	}, Incomplete: true} // bad.test has no answer: "bad" has no endpoint
	if diff := cmp.Diff(want, r.sink.Updates()[0]); diff != "" {
		t.Fatalf("first update (-want +got):\n%s", diff)
	}
	if errs := r.sink.Errors(); len(errs) == 0 || !strings.Contains(errs[0].Error(), "bad.test") {
		t.Fatalf("errors: %v", errs)
	}
}

func TestTruncationFallsBackToTCP(t *testing.T) {
	ts := newTestServer(t)
	ts.set("big.test", tA, reply{rcode: mdns.RcodeSuccess, truncUDP: true,
		rrs: []string{"big.test. 30 IN A 10.0.0.1", "big.test. 30 IN A 10.0.0.2"}})
	reg := prometheus.NewRegistry()
	r := startSource(t, "dns", srcCfg(ts.addr, strict("big", host("big.test", 80))), sources.Env{Metrics: reg})
	r.waitEndpoints(t, "big", []sources.Endpoint{ep("10.0.0.1", 80, "big.test"), ep("10.0.0.2", 80, "big.test")})
	if ts.tcpCount() == 0 {
		t.Fatal("no TCP query after a truncated UDP answer")
	}
	if got := testutil.ToFloat64(r.src.metrics.tcpFallbacks); got < 1 {
		t.Fatalf("tcp fallback metric = %v", got)
	}
}

func TestLookupFamilies(t *testing.T) {
	ts := newTestServer(t)
	ts.answer("dual.test", tA, "dual.test. 30 IN A 10.0.0.1")
	ts.answer("dual.test", tAAAA, "dual.test. 30 IN AAAA 2001:db8::1")
	ts.answer("v4.test", tA, "v4.test. 30 IN A 10.0.0.4")
	ts.answer("v4.test", tAAAA) // NODATA
	mk := func(name, fam, h string) svcCfg {
		s := strict(name, host(h, 80))
		s["dns_lookup_family"] = fam
		return s
	}
	r := startSource(t, "dns", srcCfg(ts.addr,
		mk("v4only", "V4_ONLY", "dual.test"),
		mk("v6only", "V6_ONLY", "dual.test"),
		mk("auto", "AUTO", "dual.test"),
		mk("autofallback", "AUTO", "v4.test"),
		mk("all", "ALL", "dual.test"),
		mk("v6none", "V6_ONLY", "v4.test"),
	), sources.Env{})
	r.sink.WaitFor(t, 10*time.Second, "first update", func(us []sources.Update, _ []error) bool { return len(us) > 0 })
	want := sources.Update{Source: "dns", Services: []sources.Service{
		{Name: "v4only", Endpoints: []sources.Endpoint{ep("10.0.0.1", 80, "dual.test")}},
		{Name: "v6only", Endpoints: []sources.Endpoint{ep("2001:db8::1", 80, "dual.test")}},
		{Name: "auto", Endpoints: []sources.Endpoint{ep("2001:db8::1", 80, "dual.test")}},
		{Name: "autofallback", Endpoints: []sources.Endpoint{ep("10.0.0.4", 80, "v4.test")}},
		{Name: "all", Endpoints: []sources.Endpoint{ep("10.0.0.1", 80, "dual.test"), ep("2001:db8::1", 80, "dual.test")}},
		{Name: "v6none", Endpoints: []sources.Endpoint{}},
	}}
	if diff := cmp.Diff(want, r.sink.Updates()[0]); diff != "" {
		t.Fatalf("first update (-want +got):\n%s", diff)
	}
}

func TestSRV(t *testing.T) {
	ts := newTestServer(t)
	ts.answer("_http._tcp.svc.test", mdns.TypeSRV,
		"_http._tcp.svc.test. 30 IN SRV 10 5 8080 a.svc.test.",
		"_http._tcp.svc.test. 30 IN SRV 10 1 8081 a.svc.test.",
		"_http._tcp.svc.test. 30 IN SRV 20 0 9090 b.svc.test.",
		"_http._tcp.svc.test. 30 IN SRV 30 0 1 .")
	ts.answer("a.svc.test", tA, "a.svc.test. 30 IN A 10.0.0.1", "a.svc.test. 30 IN A 10.0.0.2")
	ts.answer("b.svc.test", tA, "b.svc.test. 30 IN A 10.0.0.3")
	svc := svcCfg{"name": "srv", "srv": true, "dns_lookup_family": "V4_ONLY", "dns_refresh_rate": "20ms",
		"hosts": []map[string]any{{"name": "_http._tcp.svc.test"}}}
	r := startSource(t, "dns", srcCfg(ts.addr, svc), sources.Env{})
	srvEP := func(addr string, port, w, p uint32, h string) sources.Endpoint {
		e := ep(addr, port, h)
		e.Weight, e.Priority = w, p
		return e
	}
	want := []sources.Endpoint{
		srvEP("10.0.0.1", 8080, 5, 0, "a.svc.test"), srvEP("10.0.0.1", 8081, 1, 0, "a.svc.test"),
		srvEP("10.0.0.2", 8080, 5, 0, "a.svc.test"), srvEP("10.0.0.2", 8081, 1, 0, "a.svc.test"),
		srvEP("10.0.0.3", 9090, 0, 1, "b.svc.test"),
	}
	r.waitEndpoints(t, "srv", want)
	last, _ := r.sink.Last()
	if diff := cmp.Diff(want, last.Services[0].Endpoints); diff != "" {
		t.Fatalf("SRV endpoints (-want +got):\n%s", diff)
	}

	// A failing target fails the whole resolution: endpoints are kept.
	ts.set("b.svc.test", tA, reply{rcode: mdns.RcodeServerFailure})
	r.sink.WaitFor(t, 10*time.Second, "failure", func(_ []sources.Update, errs []error) bool { return len(errs) > 0 })
	if err := r.sink.Errors()[0]; !strings.Contains(err.Error(), "b.svc.test") {
		t.Fatalf("error %q does not name the SRV target", err)
	}
	ts.answer("b.svc.test", tA, "b.svc.test. 30 IN A 10.0.0.4")
	want[4].Address = "10.0.0.4"
	r.waitEndpoints(t, "srv", want)
}

func TestLogicalKeepsCurrentAddress(t *testing.T) {
	ts := newTestServer(t)
	ts.answer("rr.test", tA, "rr.test. 30 IN A 10.0.0.1", "rr.test. 30 IN A 10.0.0.2")
	svc := svcCfg{"name": "lg", "type": "LOGICAL_DNS", "dns_lookup_family": "V4_ONLY", "dns_refresh_rate": "20ms",
		"hosts": []map[string]any{host("rr.test", 443)}}
	r := startSource(t, "dns", srcCfg(ts.addr, svc), sources.Env{})
	r.waitEndpoints(t, "lg", []sources.Endpoint{ep("10.0.0.1", 443, "rr.test")})

	// Round robin rotation: the current address is still answered, keep it.
	ts.answer("rr.test", tA, "rr.test. 30 IN A 10.0.0.2", "rr.test. 30 IN A 10.0.0.1")
	settle(ts, "rr.test", tA, 4)
	// Zero hosts never drain a logical cluster.
	ts.answer("rr.test", tA)
	settle(ts, "rr.test", tA, 4)
	ts.set("rr.test", tA, reply{rcode: mdns.RcodeNameError})
	settle(ts, "rr.test", tA, 4)
	if n := len(r.sink.Updates()); n != 1 {
		t.Fatalf("got %d updates, want 1: rotation and empty answers must not change a logical cluster", n)
	}
	// The current address leaves the answer: take the first one.
	ts.answer("rr.test", tA, "rr.test. 30 IN A 10.0.0.3", "rr.test. 30 IN A 10.0.0.2")
	r.waitEndpoints(t, "lg", []sources.Endpoint{ep("10.0.0.3", 443, "rr.test")})
	if d := r.src.DebugInfo().(Debug).Names[0]; d.Current != "10.0.0.3:443" {
		t.Fatalf("debug current = %q", d.Current)
	}
}

func TestLogicalZeroHostsBeforeFirstAnswer(t *testing.T) {
	ts := newTestServer(t)
	ts.answer("later.test", tA)
	svc := svcCfg{"name": "lg", "type": "LOGICAL_DNS", "dns_lookup_family": "V4_ONLY", "dns_refresh_rate": "20ms",
		"hosts": []map[string]any{host("later.test", 80)}}
	r := startSource(t, "dns", srcCfg(ts.addr, svc), sources.Env{})
	r.waitEndpoints(t, "lg", nil)
	ts.answer("later.test", tA, "later.test. 30 IN A 10.0.0.7")
	r.waitEndpoints(t, "lg", []sources.Endpoint{ep("10.0.0.7", 80, "later.test")})
}

// TestRespectDNSTTL checks the refresh timing by counting queries: strict
// uses the minimum TTL (0 means the refresh rate), logical the first
// record's TTL.
func TestRespectDNSTTL(t *testing.T) {
	ts := newTestServer(t)
	ts.answer("s0.test", tA, "s0.test. 1 IN A 10.0.0.1", "s0.test. 0 IN A 10.0.0.2")
	ts.answer("l1.test", tA, "l1.test. 1 IN A 10.0.0.1", "l1.test. 0 IN A 10.0.0.2")
	ts.answer("s1.test", tA, "s1.test. 1 IN A 10.0.0.1", "s1.test. 3 IN A 10.0.0.2")
	ts.answer("nottl.test", tA, "nottl.test. 1 IN A 10.0.0.1")
	mk := func(name, typ, h string, respect bool) svcCfg {
		return svcCfg{"name": name, "type": typ, "dns_lookup_family": "V4_ONLY", "dns_refresh_rate": "20ms",
			"respect_dns_ttl": respect, "hosts": []map[string]any{host(h, 80)}}
	}
	start := time.Now()
	startSource(t, "dns", srcCfg(ts.addr,
		mk("s0", "STRICT_DNS", "s0.test", true),
		mk("l1", "LOGICAL_DNS", "l1.test", true),
		mk("s1", "STRICT_DNS", "s1.test", true),
		mk("nottl", "STRICT_DNS", "nottl.test", false),
	), sources.Env{})

	// Refresh-rate driven names query about every 20ms.
	ts.waitQueries("s0.test", tA, 10, 10*time.Second)
	ts.waitQueries("nottl.test", tA, 10, 10*time.Second)
	if el := time.Since(start); el > 900*time.Millisecond {
		t.Fatalf("10 queries at a 20ms refresh rate took %s", el)
	}
	if n := ts.count("l1.test", tA) + ts.count("s1.test", tA); n > 2 {
		t.Fatalf("TTL-driven names were queried %d times within the first TTL", n)
	}
	// The 1s TTL names come back after a second or so.
	ts.waitQueries("l1.test", tA, 3, 10*time.Second)
	ts.waitQueries("s1.test", tA, 3, 10*time.Second)
	if el := time.Since(start); el < 1900*time.Millisecond {
		t.Fatalf("3 queries with a 1s TTL came after %s, want at least 2s", el)
	}
}

func TestCoalescesSimultaneousChanges(t *testing.T) {
	ts := newTestServer(t)
	var svcs []svcCfg
	want := map[string]string{}
	for i := range 20 {
		n := string(rune('a'+i)) + ".test"
		ts.answer(n, tA, n+" 30 IN A 10.0.0.1")
		s := strict(n, host(n, 80))
		s["dns_refresh_rate"] = "200ms"
		s["dns_jitter"] = "1ms"
		svcs = append(svcs, s)
		want[n] = "10.0.1.1"
	}
	r := startSource(t, "dns", srcCfg(ts.addr, svcs...), sources.Env{})
	r.sink.WaitFor(t, 10*time.Second, "first update", func(us []sources.Update, _ []error) bool { return len(us) > 0 })
	for n := range want {
		ts.answer(n, tA, n+" 30 IN A 10.0.1.1")
	}
	r.sink.WaitFor(t, 10*time.Second, "all changed", func(us []sources.Update, _ []error) bool {
		for _, s := range us[len(us)-1].Services {
			if len(s.Endpoints) != 1 || s.Endpoints[0].Address != want[s.Name] {
				return false
			}
		}
		return true
	})
	if n := len(r.sink.Updates()) - 1; n > 10 {
		t.Fatalf("20 names changing together took %d updates, want them batched", n)
	}
}

func TestDebugInfoAndMetrics(t *testing.T) {
	ts := newTestServer(t)
	ts.answer("web.test", tA, "web.test. 42 IN A 10.0.0.1")
	ts.set("bad.test", tA, reply{rcode: mdns.RcodeServerFailure})
	reg := prometheus.NewRegistry()
	r := startSource(t, "mydns", srcCfg(ts.addr, strict("web", host("web.test", 80)), strict("bad", host("bad.test", 80))),
		sources.Env{Metrics: reg})
	r.sink.WaitFor(t, 10*time.Second, "first update", func(us []sources.Update, _ []error) bool { return len(us) > 0 })
	d := r.src.DebugInfo().(Debug)
	if !cmp.Equal(d.Resolvers, []string{ts.addr}) {
		t.Fatalf("resolvers %v", d.Resolvers)
	}
	web := d.Names[0]
	if web.Service != "web" || web.Name != "web.test" || web.TTL != "42s" || !cmp.Equal(web.Answer, []string{"10.0.0.1"}) ||
		web.NextRefresh == nil || web.LastSuccess == nil || web.LastError != "" {
		t.Fatalf("web debug: %+v", web)
	}
	bad := d.Names[1]
	if bad.ConsecutiveFailures < 1 || !strings.Contains(bad.LastError, "SERVFAIL") || len(bad.Answer) != 0 {
		t.Fatalf("bad debug: %+v", bad)
	}
	if got := testutil.ToFloat64(r.src.metrics.queries.WithLabelValues("A", "SERVFAIL")); got < 1 {
		t.Fatalf("SERVFAIL queries = %v", got)
	}
	if got := testutil.ToFloat64(r.src.metrics.queries.WithLabelValues("A", "NOERROR")); got < 1 {
		t.Fatalf("NOERROR queries = %v", got)
	}
	n, err := testutil.GatherAndCount(reg, "xdsbridge_dns_names", "xdsbridge_dns_resolutions_total", "xdsbridge_dns_publishes_total")
	if err != nil || n < 3 {
		t.Fatalf("gathered %d series (%v)", n, err)
	}
	if got := testutil.ToFloat64(r.src.metrics.names); got != 2 {
		t.Fatalf("names gauge = %v", got)
	}
}

func TestSystemResolvers(t *testing.T) {
	ts := newTestServer(t)
	ts.answer("web.test", tA, "web.test. 30 IN A 10.0.0.1")
	host, _, _ := strings.Cut(ts.addr, ":")
	dir := t.TempDir()
	conf := filepath.Join(dir, "resolv.conf")
	if err := os.WriteFile(conf, []byte("search example.com\nnameserver "+host+"\nnameserver not-an-ip\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := srcCfg(ts.addr, strict("web", map[string]any{"name": "web.test", "port": 80}))
	delete(cfg, "resolvers")
	raw := mustJSON(t, cfg)
	s, err := New("dns", raw, sources.Env{})
	if err != nil {
		t.Fatal(err)
	}
	src := s.(*Source)
	src.resolvConf = conf
	servers, err := src.servers()
	if err != nil || !cmp.Equal(servers, []string{host + ":53"}) {
		t.Fatalf("servers from resolv.conf = %v, %v", servers, err)
	}

	empty := filepath.Join(dir, "empty.conf")
	if err := os.WriteFile(empty, []byte("search example.com\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	src.resolvConf = empty
	err = src.Run(t.Context(), sourcestest.NewSink())
	if err == nil || !strings.Contains(err.Error(), "no nameserver") {
		t.Fatalf("Run with no nameserver: %v", err)
	}
	src.resolvConf = filepath.Join(dir, "missing.conf")
	if err := src.Run(t.Context(), sourcestest.NewSink()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Run with missing resolv.conf: %v", err)
	}
}

func TestClaimedNames(t *testing.T) {
	s, err := New("dns", mustJSON(t, srcCfg("127.0.0.1:53", strict("a", host("a.test", 1)), strict("b", host("b.test", 1)))), sources.Env{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.(sources.StaticClaimer).ClaimedNames()
	if err != nil || !cmp.Equal(got, []string{"a", "b"}) {
		t.Fatalf("ClaimedNames = %v, %v", got, err)
	}
	if s.Name() != "dns" {
		t.Fatalf("Name = %q", s.Name())
	}
}

func TestRunStopsWhileQueriesHang(t *testing.T) {
	ts := newTestServer(t)
	ts.set("slow.test", tA, reply{drop: true})
	cfg := srcCfg(ts.addr, strict("slow", host("slow.test", 80)))
	cfg["timeout"] = "1m" // the longest allowed
	r := startSource(t, "dns", cfg, sources.Env{})
	ts.waitQueries("slow.test", tA, 1, 10*time.Second)
	_ = r // cleanup cancels the source; it must return at once despite the minute-long timeout
}

func newRegistry() *prometheus.Registry { return prometheus.NewRegistry() }

func TestRunAgainPublishesAfresh(t *testing.T) {
	ts := newTestServer(t)
	ts.answer("web.test", tA, "web.test. 30 IN A 10.0.0.1")
	s, err := New("dns", mustJSON(t, srcCfg(ts.addr, strict("web", host("web.test", 80)))), sources.Env{})
	if err != nil {
		t.Fatal(err)
	}
	want := []sources.Endpoint{ep("10.0.0.1", 80, "web.test")}
	for range 2 {
		ctx, cancel := context.WithCancel(t.Context())
		sink := sourcestest.NewSink()
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx, sink) }()
		sink.WaitFor(t, 10*time.Second, "first update", func(us []sources.Update, _ []error) bool { return len(us) > 0 })
		if diff := cmp.Diff(want, sink.Updates()[0].Services[0].Endpoints); diff != "" {
			t.Fatalf("first update (-want +got):\n%s", diff)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}
