package bridge

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/xdsbridge/xdsbridge/sources"
)

// TestOwnershipByRankNotArrival: the owner of a name two sources publish is
// the one configured first (or with the higher priority), whichever source
// publishes first.
func TestOwnershipByRankNotArrival(t *testing.T) {
	for _, c := range []struct {
		name     string
		priority map[string]int
		first    string
		owner    string
		ports    int // endpoints of the owner's x
	}{
		{"listed first, arrives first", nil, "a", "a", 1},
		{"listed first, arrives second", nil, "b", "a", 1},
		{"higher priority, arrives first", map[string]int{"b": 1}, "b", "b", 2},
		{"higher priority, arrives second", map[string]int{"b": 1}, "a", "b", 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := newRecorder()
			l := run(t, Options{Sources: []string{"a", "b"}, Priority: c.priority, Quiet: time.Millisecond}, rec)
			byA, byB := service("x", 1), service("x", 2, 3)
			if c.first == "a" {
				publish(t, l, "a", byA)
				publish(t, l, "b", byB)
			} else {
				publish(t, l, "b", byB)
				publish(t, l, "a", byA)
			}
			got := rec.next(t)
			if got.loads["x"] != c.ports {
				t.Fatalf("x published with %d endpoints, want %d (%s's)", got.loads["x"], c.ports, c.owner)
			}
			loser := map[string]string{"a": "b", "b": "a"}[c.owner]
			if d := cmp.Diff(map[string][]string{"x": {c.owner, loser}}, l.Conflicts()); d != "" {
				t.Fatalf("conflicts (-want +got):\n%s", d)
			}
			for _, st := range l.Sources() {
				want := 0
				if st.Name == loser {
					want = 1
				}
				if st.ClaimsLost != want {
					t.Errorf("source %s: claims_lost %d, want %d", st.Name, st.ClaimsLost, want)
				}
			}
		})
	}
}

// TestOwnershipMovesToHigherRankedClaimant: a source ranked before the
// owner that starts publishing the name takes it over (its endpoints
// replace the owner's); when it fails, its last state stays; when it
// drops the name, the other source's claim owns it again.
func TestOwnershipMovesToHigherRankedClaimant(t *testing.T) {
	rec := newRecorder()
	l := run(t, Options{Sources: []string{"low", "high"}, Priority: map[string]int{"high": 10}, Quiet: time.Millisecond}, rec)
	publish(t, l, "low", service("x", 1))
	publish(t, l, "high")
	if c := rec.next(t); c.loads["x"] != 1 {
		t.Fatalf("x from low: %+v", c)
	}
	publish(t, l, "high", service("x", 2, 3))
	if c := rec.next(t); c.loads["x"] != 2 {
		t.Fatalf("x did not move to high: %+v", c)
	}
	if d := cmp.Diff(map[string][]string{"x": {"high", "low"}}, l.Conflicts()); d != "" {
		t.Fatalf("conflicts (-want +got):\n%s", d)
	}
	// low's changes do not reach clients while high owns x.
	publish(t, l, "low", service("x", 4, 5, 6))
	rec.none(t, 50*time.Millisecond)
	// The owner failing changes nothing: fail static.
	l.Fail(context.Background(), "high", errors.New("registry down"))
	rec.none(t, 50*time.Millisecond)
	publish(t, l, "high")
	if c := rec.next(t); c.loads["x"] != 3 {
		t.Fatalf("x did not pass back to low's latest: %+v", c)
	}
	if len(l.Conflicts()) != 0 {
		t.Fatalf("conflicts remain: %v", l.Conflicts())
	}
}

// TestReconfigureRanksClaimsAgainAndWithdrawsRemoved: a reload that gives
// the other claimant a higher priority moves the name to it; one that
// removes a source withdraws its services (a name another source claims
// passes to it) and forgets its status.
func TestReconfigureRanksClaimsAgainAndWithdrawsRemoved(t *testing.T) {
	rec := newRecorder()
	l := run(t, Options{Sources: []string{"a", "b"}, Quiet: time.Millisecond}, rec)
	publish(t, l, "a", service("x", 1), service("only-a", 1))
	publish(t, l, "b", service("x", 2, 3))
	if c := rec.next(t); c.loads["x"] != 1 {
		t.Fatalf("x from a: %+v", c)
	}
	ctx := context.Background()
	if err := l.Reconfigure(ctx, Reconfig{Sources: []string{"a", "b"}, Priority: map[string]int{"b": 1}}); err != nil {
		t.Fatal(err)
	}
	// Every service is translated again (the cache passes on only what
	// comes out different).
	if c := rec.next(t); c.loads["x"] != 2 || c.loads["only-a"] != 1 || len(c.removed) != 0 {
		t.Fatalf("after b's priority rose: %+v, want x from b", c)
	}
	if d := cmp.Diff(map[string][]string{"x": {"b", "a"}}, l.Conflicts()); d != "" {
		t.Fatalf("conflicts (-want +got):\n%s", d)
	}
	if err := l.Reconfigure(ctx, Reconfig{Sources: []string{"a"}, Removed: []string{"b"}}); err != nil {
		t.Fatal(err)
	}
	if c := rec.next(t); c.loads["x"] != 1 || len(c.removed) != 0 {
		t.Fatalf("after b was removed: %+v, want x from a", c)
	}
	if len(l.Conflicts()) != 0 {
		t.Fatalf("conflicts remain: %v", l.Conflicts())
	}
	if err := l.Reconfigure(ctx, Reconfig{Sources: []string{"b"}, Removed: []string{"a"}}); err != nil {
		t.Fatal(err)
	}
	if c := rec.next(t); len(c.changed) != 0 || !cmp.Equal(c.removed, []string{"only-a", "x"}) {
		t.Fatalf("after a was removed: %+v, want only-a and x removed", c)
	}
	for _, st := range l.Sources() {
		if st.Name == "a" {
			t.Fatalf("the removed source's status remains: %+v", st)
		}
	}
}

// TestReconfigureRemovedSourceLateEventsIgnored: a removed source's
// instance may still report a failure, a confirmation or what it dropped
// after the reload removed it (its goroutine ends with its context); such
// late reports must not bring its status back, stale for ever
// (xdsbridge_source_stale{source} 1, an alert that never clears), nor leave
// its per-source series behind.
func TestReconfigureRemovedSourceLateEventsIgnored(t *testing.T) {
	rec := newRecorder()
	reg := prometheus.NewRegistry()
	l := run(t, Options{Sources: []string{"a", "b"}, Quiet: time.Millisecond, Metrics: reg}, rec)
	publish(t, l, "a", service("x", 1))
	publish(t, l, "b", service("y", 2))
	rec.next(t)
	ctx := context.Background()
	if err := l.Reconfigure(ctx, Reconfig{Sources: []string{"a"}, Removed: []string{"b"}}); err != nil {
		t.Fatal(err)
	}
	l.Fail(ctx, "b", errors.New("context canceled"))
	l.Confirm(ctx, "b", time.Now())
	l.ReportDropped(ctx, "b", []sources.Dropped{{Service: "y", Instance: "i", Reason: "limit"}})
	// A round trip through the loop: the reports above are handled.
	if err := l.Reconfigure(ctx, Reconfig{Sources: []string{"a"}}); err != nil {
		t.Fatal(err)
	}
	for _, st := range l.Sources() {
		if st.Name == "b" {
			t.Fatalf("the removed source's status came back: %+v", st)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "source" && lp.GetValue() == "b" {
					t.Errorf("%s{source=%q} remains after b was removed", mf.GetName(), "b")
				}
			}
		}
	}
}
