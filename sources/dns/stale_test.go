package dns

import (
	"testing"
	"time"

	"github.com/xdsbridge/xdsbridge/sources"
)

// TestResolverThatStopsAnsweringIsStaleWithinBound: a resolver that stops
// answering makes the source fail (stale) at the first refresh that gets
// no answer: within dns_refresh_rate (+ its jitter) + timeout of the last
// answer, nothing published meanwhile. Successful refreshes confirm the
// state before, and again when the resolver answers.
func TestResolverThatStopsAnsweringIsStaleWithinBound(t *testing.T) {
	ts := newTestServer(t)
	ts.answer("web.test", tA, "web.test. 30 IN A 10.0.0.1")
	svc := strict("web", host("web.test", 80))
	svc["dns_refresh_rate"] = "500ms"
	svc["dns_jitter"] = "0s"
	cfg := srcCfg(ts.addr, svc)
	cfg["timeout"] = "500ms"
	r := startSource(t, "dns", cfg, sources.Env{})
	r.waitEndpoints(t, "web", []sources.Endpoint{ep("10.0.0.1", 80, "web.test")})
	settle(ts, "web.test", tA, 2)
	r.sink.WaitConfirms(t, 5*time.Second, 1)

	ts.set("web.test", tA, reply{drop: true})
	stopped := time.Now()
	r.sink.WaitFor(t, 5*time.Second, "a failure", func(_ []sources.Update, errs []error) bool { return len(errs) > 0 })
	// The last answer came at most a refresh before the stop.
	if took := time.Since(stopped); took > 500*time.Millisecond+500*time.Millisecond+300*time.Millisecond {
		t.Errorf("stale %v after the resolver stopped answering; want within dns_refresh_rate + timeout (1s)", took)
	}
	want := "resolving web.test: A web.test via " + ts.addr + ": no answer within 500ms (timeout)"
	if err := r.sink.Errors()[0]; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	if n := len(r.sink.Updates()); n != 1 {
		t.Errorf("%d updates while the resolver does not answer; want the first only", n)
	}
	confirms := len(r.sink.Confirms())

	ts.answer("web.test", tA, "web.test. 30 IN A 10.0.0.1")
	r.sink.WaitConfirms(t, 5*time.Second, confirms+1)
}

// TestPublishWhileANameFailsIsIncomplete: while one name gets no answer,
// a publish for another name's change is marked Incomplete (it confirms
// nothing: the bridge keeps the source stale, and a reloaded instance does
// not take over with it); once the failing name answers again, the
// publish is complete.
func TestPublishWhileANameFailsIsIncomplete(t *testing.T) {
	ts := newTestServer(t)
	ts.answer("web.test", tA, "web.test. 30 IN A 10.0.0.1")
	ts.answer("api.test", tA, "api.test. 30 IN A 10.0.1.1")
	web := strict("web", host("web.test", 80))
	web["dns_refresh_rate"] = "200ms"
	web["dns_jitter"] = "0s"
	api := strict("api", host("api.test", 80))
	api["dns_refresh_rate"] = "200ms"
	api["dns_failure_refresh_rate"] = "200ms"
	api["dns_jitter"] = "0s"
	cfg := srcCfg(ts.addr, web, api)
	cfg["timeout"] = "200ms"
	r := startSource(t, "dns", cfg, sources.Env{})
	r.waitEndpoints(t, "api", []sources.Endpoint{ep("10.0.1.1", 80, "api.test")})
	if u, _ := r.sink.Last(); u.Incomplete {
		t.Fatalf("the first publish, every name answered, is incomplete: %+v", u)
	}

	ts.set("api.test", tA, reply{drop: true})
	r.sink.WaitFor(t, 5*time.Second, "api failing", func(_ []sources.Update, errs []error) bool { return len(errs) > 0 })
	ts.answer("web.test", tA, "web.test. 30 IN A 10.0.0.2")
	r.waitEndpoints(t, "web", []sources.Endpoint{ep("10.0.0.2", 80, "web.test")})
	if u, _ := r.sink.Last(); !u.Incomplete {
		t.Fatalf("published while api.test gets no answer, not marked incomplete: %+v", u)
	}

	ts.answer("api.test", tA, "api.test. 30 IN A 10.0.1.1")
	r.sink.WaitFor(t, 5*time.Second, "a complete publish", func(us []sources.Update, _ []error) bool {
		return len(us) > 0 && !us[len(us)-1].Incomplete
	})
}
