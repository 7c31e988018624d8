package bridge

import (
	"context"
	"testing"
	"time"

	"github.com/xdsbridge/xdsbridge/healthcheck"
	"github.com/xdsbridge/xdsbridge/sources"
)

// TestChecksFlapWithinDebounce: verdict changes of a host that come faster
// than the debounce, within the quiet period after a flush, are folded into
// one rebuild (a first change after a quiet period takes the leading edge
// and is published at once), which publishes only the net change: none when the host ends where it started, one when it ends
// on the other verdict. Pushes never outnumber verdict changes; here they
// are fewer.
func TestChecksFlapWithinDebounce(t *testing.T) {
	const quiet = 500 * time.Millisecond // far above the time the toggles take
	rec := newRecorder()
	fc := &fakeChecks{verdicts: map[sources.HostKey]healthcheck.Verdict{}}
	l := run(t, Options{Sources: []string{"a"}, Quiet: quiet, MaxHold: 20 * quiet, HealthChecks: fc}, rec)
	h1 := sources.HostKey{Address: "10.0.0.1", Port: 1}
	h2 := sources.HostKey{Address: "10.0.0.1", Port: 2}
	fc.set(h1, healthcheck.Healthy)
	fc.set(h2, healthcheck.Healthy)
	publish(t, l, "a", service("x", 1, 2))
	rec.next(t)
	health := func() sources.HealthStatus {
		h, ok := hostInfo(l, "x", h2)
		if !ok {
			t.Fatal("h2 not in x")
		}
		return h.Health
	}

	flap := func(n int) {
		for i := 0; i < n; i++ {
			v := healthcheck.Unhealthy
			if i%2 == 1 {
				v = healthcheck.Healthy
			}
			fc.set(h2, v)
			l.ChecksChanged(context.Background(), "x")
		}
	}
	// 20 changes, back to Healthy: nothing to publish.
	flap(20)
	rec.none(t, 3*quiet)
	if got := health(); got != sources.HealthHealthy {
		t.Fatalf("h2 %s after flapping back to healthy", got)
	}
	// 21 changes, ending Unhealthy: one publish.
	flap(21)
	if c := rec.next(t); c.loads["x"] != 2 {
		t.Fatalf("publish %+v", c)
	}
	if got := health(); got != sources.HealthUnhealthy {
		t.Fatalf("h2 %s after flapping to unhealthy", got)
	}
	rec.none(t, 3*quiet)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if n := len(rec.calls); n != 2 {
		t.Fatalf("%d publishes for 41 verdict changes; want 2 (the first, and one net change)", n)
	}
}
