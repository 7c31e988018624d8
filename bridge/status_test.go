package bridge

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/xdsbridge/xdsbridge/sources"
)

// sourceStatus waits until cond holds for source src's status.
func sourceStatus(t *testing.T, l *Loop, src string, what string, cond func(SourceStatus) bool) SourceStatus {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		for _, st := range l.Sources() {
			if st.Name == src && cond(st) {
				return st
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: %+v", what, l.Sources())
		}
		time.Sleep(time.Millisecond)
	}
}

// TestSourceConfirmedAndChangedAges: the two ages of a source. A publish
// with the same content and a Confirm move the confirmation, not the
// change; a Confirm clears a stale mark only when it is later than the
// failure; the metrics say which is which.
func TestSourceConfirmedAndChangedAges(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1000, 0)}
	reg := prometheus.NewRegistry()
	l := run(t, Options{Sources: []string{"a"}, Quiet: time.Millisecond, MaxHold: time.Millisecond, Now: clock.Now, Metrics: reg}, newRecorder())
	ctx := context.Background()
	publish(t, l, "a", service("web", 1))
	st := sourceStatus(t, l, "a", "the first publish", func(st SourceStatus) bool { return st.Synced })
	if !st.LastChanged.Equal(time.Unix(1000, 0)) || !st.LastConfirmed.Equal(time.Unix(1000, 0)) {
		t.Fatalf("after the first publish: changed %v, confirmed %v", st.LastChanged, st.LastConfirmed)
	}

	clock.advance(10 * time.Second) // 1010: the same content again
	publish(t, l, "a", service("web", 1))
	sourceStatus(t, l, "a", "the confirmation by an unchanged publish", func(st SourceStatus) bool {
		return st.LastConfirmed.Equal(time.Unix(1010, 0)) && st.LastChanged.Equal(time.Unix(1000, 0))
	})

	clock.advance(10 * time.Second) // 1020: a confirmation without a publish
	l.Confirm(ctx, "a", clock.Now())
	clock.advance(5 * time.Second) // 1025
	st = sourceStatus(t, l, "a", "the confirmation", func(st SourceStatus) bool { return st.LastConfirmed.Equal(time.Unix(1020, 0)) })
	if st.ConfirmedAge != "5s" || st.ChangedAge != "25s" {
		t.Errorf("ages: confirmed %q, changed %q; want 5s, 25s", st.ConfirmedAge, st.ChangedAge)
	}
	want := `
# HELP xdsbridge_source_changed_age_seconds Time since what the source publishes last changed (services, endpoints, health or policy). It grows whenever nothing changes: not a sign of trouble by itself.
# TYPE xdsbridge_source_changed_age_seconds gauge
xdsbridge_source_changed_age_seconds{source="a"} 25
# HELP xdsbridge_source_confirmed_age_seconds Time since the source last confirmed its state: a successful read of its registry (a Consul query or liveness probe answered, a DNS refresh, a services file read or stat), whether anything changed or not. Alert on this one: it grows only while the registry does not answer.
# TYPE xdsbridge_source_confirmed_age_seconds gauge
xdsbridge_source_confirmed_age_seconds{source="a"} 5
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "xdsbridge_source_confirmed_age_seconds", "xdsbridge_source_changed_age_seconds"); err != nil {
		t.Error(err)
	}

	// A failure at 1025; a confirmation of a read from before it (1024)
	// does not clear it, one after it (1026) does.
	l.Fail(ctx, "a", errors.New("registry does not answer"))
	sourceStatus(t, l, "a", "stale", func(st SourceStatus) bool { return st.Stale })
	l.Confirm(ctx, "a", time.Unix(1024, 0))
	clock.advance(time.Second)
	l.Confirm(ctx, "a", time.Unix(1024, 500))
	st = sourceStatus(t, l, "a", "the earlier confirmations", func(st SourceStatus) bool { return st.LastConfirmed.Equal(time.Unix(1024, 500)) })
	if !st.Stale {
		t.Fatal("a confirmation older than the failure cleared the stale mark")
	}
	l.Confirm(ctx, "a", time.Unix(1026, 0))
	sourceStatus(t, l, "a", "not stale after a later confirmation", func(st SourceStatus) bool { return !st.Stale })
}

// TestSourceDroppedBoundedAndCounted: the instances a source drops are
// listed up to MaxDroppedListed, sorted, and all counted by reason in the
// status and the metric.
func TestSourceDroppedBoundedAndCounted(t *testing.T) {
	reg := prometheus.NewRegistry()
	l := run(t, Options{Sources: []string{"a"}, Metrics: reg}, newRecorder())
	var dropped []sources.Dropped
	for i := MaxDroppedListed + 20; i > 0; i-- {
		dropped = append(dropped, sources.Dropped{Service: "web", Instance: fmt.Sprintf("web-%03d", i), Reason: sources.DropExcludedTag, Detail: `tag "canary" is in services.exclude_tags`})
	}
	dropped = append(dropped, sources.Dropped{Service: "api", Instance: "api-1", Reason: sources.DropUnresolvable, Detail: `resolving hostname "api.invalid": no such host`})
	l.ReportDropped(context.Background(), "a", dropped)
	st := sourceStatus(t, l, "a", "the dropped instances", func(st SourceStatus) bool { return len(st.Dropped) > 0 })
	if len(st.Dropped) != MaxDroppedListed {
		t.Errorf("%d listed, want %d", len(st.Dropped), MaxDroppedListed)
	}
	if st.Dropped[0].Instance != "api-1" || st.Dropped[1].Instance != "web-001" {
		t.Errorf("listed first: %+v, %+v; want api-1, web-001", st.Dropped[0], st.Dropped[1])
	}
	if fmt.Sprint(st.DroppedCounts) != "map[excluded_tag:120 unresolvable_address:1]" {
		t.Errorf("counts %v", st.DroppedCounts)
	}
	want := `
# HELP xdsbridge_source_dropped_instances Instances the source read from its registry and currently leaves out, by reason (excluded_tag, unresolvable_address, limit, malformed).
# TYPE xdsbridge_source_dropped_instances gauge
xdsbridge_source_dropped_instances{reason="excluded_tag",source="a"} 120
xdsbridge_source_dropped_instances{reason="unresolvable_address",source="a"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "xdsbridge_source_dropped_instances"); err != nil {
		t.Error(err)
	}
	l.ReportDropped(context.Background(), "a", nil)
	sourceStatus(t, l, "a", "no dropped instances", func(st SourceStatus) bool { return len(st.Dropped) == 0 && st.DroppedCounts == nil })
}

// TestIncompletePublishKeepsStaleMark: a publish made while a part of the
// source fails (sources.Update.Incomplete: a DNS name without an answer,
// a failing Consul watch) does not clear the source's stale mark nor move
// its confirmation; a complete one does.
func TestIncompletePublishKeepsStaleMark(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1000, 0)}
	l := run(t, Options{Sources: []string{"a"}, Quiet: time.Millisecond, MaxHold: time.Millisecond, Now: clock.Now}, newRecorder())
	ctx := context.Background()
	publish(t, l, "a", service("web", 1), service("api", 2))
	sourceStatus(t, l, "a", "the first publish", func(st SourceStatus) bool { return st.Synced })
	clock.advance(10 * time.Second) // 1010
	l.Fail(ctx, "a", errors.New("resolving api.test: no answer"))
	sourceStatus(t, l, "a", "stale", func(st SourceStatus) bool { return st.Stale })
	clock.advance(10 * time.Second) // 1020: web changes, api still fails
	if err := l.Publish(ctx, sources.Update{Source: "a", Services: []sources.Service{service("web", 3), service("api", 2)}, Incomplete: true}); err != nil {
		t.Fatal(err)
	}
	st := sourceStatus(t, l, "a", "the incomplete publish", func(st SourceStatus) bool { return st.LastSync.Equal(time.Unix(1020, 0)) })
	if !st.Stale || !st.LastConfirmed.Equal(time.Unix(1000, 0)) {
		t.Fatalf("after a publish with a part failing: stale %v, confirmed %v; want stale, confirmed at 1000", st.Stale, st.LastConfirmed)
	}
	clock.advance(10 * time.Second) // 1030: api answers again
	publish(t, l, "a", service("web", 3), service("api", 2))
	sourceStatus(t, l, "a", "the complete publish", func(st SourceStatus) bool {
		return !st.Stale && st.LastConfirmed.Equal(time.Unix(1030, 0))
	})
}
