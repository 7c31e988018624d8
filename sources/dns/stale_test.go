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
