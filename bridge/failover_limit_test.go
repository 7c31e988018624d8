package bridge

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/xdsbridge/xdsbridge/policy"
	"github.com/xdsbridge/xdsbridge/translate"
)

// max_failover_endpoints bounds what failover adds across the catalog:
// a pattern failing every service over to one big service adds big's
// hosts while there is room (in name order), the others keep their own
// hosts with a diagnostic, and a failover that goes away makes room for
// the next.
func TestFailoverEndpointsBudget(t *testing.T) {
	rec := newRecorder()
	l := run(t, Options{Sources: []string{"a", "policy"}, Quiet: time.Millisecond, Limits: translate.Limits{MaxFailoverEndpoints: 5}}, rec)
	publish(t, l, "a", service("big", 101, 102, 103), service("s1", 1), service("s2", 2), service("s3", 3))
	publishPolicy(t, l, "policy", map[string]policy.Service{"big": {}, "*": {Failover: []policy.Target{{Service: "big"}}}})
	c := rec.next(t)
	if d := cmp.Diff(map[string]int{"big": 3, "s1": 4, "s2": 1, "s3": 1}, c.loads); d != "" {
		t.Fatalf("published endpoints (-want +got):\n%s", d)
	}
	for _, s := range []string{"s2", "s3"} {
		diags := l.Diagnostics()[s]
		if len(diags) != 1 || diags[0].Field != "failover[0]" || !strings.Contains(diags[0].Message, "max_failover_endpoints 5; failover target dropped") {
			t.Errorf("%s: diagnostics %v", s, diags)
		}
	}
	if n := testutil.ToFloat64(l.m.limitExceeded.WithLabelValues(translate.LimitFailoverEndpoints)); n != 2 {
		t.Errorf("max_failover_endpoints counted %v times, want 2", n)
	}
	waitTrue(t, func() bool { return testutil.ToFloat64(l.m.failoverEndpoints) == 3 })

	// s1 goes away: s2 takes its room, s3 still has none.
	publish(t, l, "a", service("big", 101, 102, 103), service("s2", 2), service("s3", 3))
	c = rec.next(t)
	if d := cmp.Diff(map[string]int{"s2": 4}, c.loads); d != "" || len(c.removed) != 1 {
		t.Fatalf("published endpoints (-want +got):\n%s\nremoved %v", d, c.removed)
	}
	if diags := l.Diagnostics()["s2"]; len(diags) != 0 {
		t.Errorf("s2: diagnostics %v", diags)
	}
	if diags := l.Diagnostics()["s3"]; len(diags) != 1 {
		t.Errorf("s3: diagnostics %v", diags)
	}
	waitTrue(t, func() bool { return testutil.ToFloat64(l.m.failoverEndpoints) == 3 })

	// In one flush, s0 appears (translated first, in name order, while
	// s2 still holds the room) and s2 goes: s0 is translated again with
	// the room, and published once; s3 still has none.
	publish(t, l, "a", service("big", 101, 102, 103), service("s0", 9), service("s3", 3))
	c = rec.next(t)
	if d := cmp.Diff([]string{"s0"}, c.changed); d != "" || c.loads["s0"] != 4 {
		t.Fatalf("published %v (-want +got):\n%s\nendpoints %v; want s0's 1 and big's 3", c.changed, d, c.loads)
	}
	if diags := l.Diagnostics()["s0"]; len(diags) != 0 {
		t.Errorf("s0: diagnostics %v", diags)
	}
}

// A service whose failover was left out for lack of room, and that was
// translated again with its failover once room freed, gets that failover
// published even when the publish of that flush failed: the next flush
// publishes it, and the count of failover hosts is what is published.
func TestFailoverEndpointsBudgetRetryAfterPublishError(t *testing.T) {
	rec := newRecorder()
	l := run(t, Options{Sources: []string{"a", "policy"}, Quiet: time.Millisecond, Limits: translate.Limits{MaxFailoverEndpoints: 5}}, rec)
	publish(t, l, "a", service("big", 101, 102, 103), service("s1", 1), service("s2", 2))
	publishPolicy(t, l, "policy", map[string]policy.Service{"big": {}, "x": {}, "*": {Failover: []policy.Target{{Service: "big"}}}})
	c := rec.next(t)
	if d := cmp.Diff(map[string]int{"big": 3, "s1": 4, "s2": 1}, c.loads); d != "" {
		t.Fatalf("published endpoints (-want +got):\n%s", d)
	}

	// s1 goes away, freeing room for s2's failover, but the publish fails.
	rec.mu.Lock()
	rec.fail = errors.New("cache full")
	rec.mu.Unlock()
	publish(t, l, "a", service("big", 101, 102, 103), service("s2", 2))
	time.Sleep(30 * time.Millisecond)
	rec.mu.Lock()
	rec.fail = nil
	rec.mu.Unlock()
	// An unrelated service comes: the next flush retries.
	publish(t, l, "a", service("big", 101, 102, 103), service("s2", 2), service("x", 9))
	c = rec.next(t)
	if d := cmp.Diff(map[string]int{"s2": 4, "x": 1}, c.loads); d != "" {
		t.Fatalf("published endpoints (-want +got):\n%s", d)
	}
	waitTrue(t, func() bool { return testutil.ToFloat64(l.m.failoverEndpoints) == 3 })
}
