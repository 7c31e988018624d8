package bridge

import (
	"testing"
	"time"

	"github.com/xdsbridge/xdsbridge/healthcheck"
	"github.com/xdsbridge/xdsbridge/sources"
)

// The merge relies on the sources' normal form (sources.Normalize) and
// puts retained hosts (kept in a map) back in order among the discovered
// ones: a service whose absent hosts are all retained is the one already
// published, so nothing is translated or published again.
func TestRetainedHostsKeepOrder(t *testing.T) {
	rec := newRecorder()
	fc := &fakeChecks{verdicts: map[sources.HostKey]healthcheck.Verdict{}}
	l := run(t, Options{Sources: []string{"a"}, Quiet: time.Millisecond, HealthChecks: fc}, rec)
	var all, some []uint32
	for p := uint32(1); p <= 12; p++ {
		fc.set(sources.HostKey{Address: "10.0.0.1", Port: p}, healthcheck.Healthy)
		all = append(all, p)
		if p%3 == 0 {
			some = append(some, p)
		}
	}
	publish(t, l, "a", service("x", all...))
	if c := rec.next(t); c.loads["x"] != 12 {
		t.Fatalf("%+v", c)
	}
	// 8 of the 12 hosts leave discovery and pass their checks: retained,
	// the service unchanged.
	publish(t, l, "a", service("x", some...))
	waitTrue(t, func() bool {
		n := 0
		for _, h := range l.Hosts("x")["x"] {
			if h.Rule == healthcheck.RuleRetained {
				n++
			}
		}
		return n == 8
	})
	rec.none(t, 100*time.Millisecond)
	rec.mu.Lock()
	calls := len(rec.calls)
	rec.mu.Unlock()
	t.Logf("publishes: %d (hosts 12, discovered %d, retained %d)", calls, len(some), 12-len(some))
	if calls != 1 {
		t.Fatalf("%d publishes, want 1", calls)
	}
}
