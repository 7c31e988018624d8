package bridge

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/xdsbridge/xdsbridge/sources"
	"github.com/xdsbridge/xdsbridge/translate"
)

func deepMetadata(depth int) sources.Metadata {
	var v any = "v"
	for range depth - 1 {
		v = map[string]any{"k": v}
	}
	return sources.Metadata{"deep": {"k": v}}
}

// Input over a limit that can be dropped is dropped: the service is
// published without it, the diagnostic names service and field, and the
// limit is counted.
func TestLimitDropsWhatIsOver(t *testing.T) {
	rec := newRecorder()
	l := run(t, Options{Sources: []string{"a"}, Quiet: time.Millisecond}, rec)
	deep := service("deep", 1, 2)
	deep.Endpoints[0].Metadata = deepMetadata(48)
	publish(t, l, "a", service("web", 1), deep)
	c := rec.next(t)
	if d := cmp.Diff(map[string]int{"web": 1, "deep": 2}, c.loads); d != "" {
		t.Fatalf("published endpoints (-want +got):\n%s", d)
	}
	want := map[string][]translate.Diagnostic{"deep": {{Service: "deep", Field: "endpoints[10.0.0.1:1].metadata", Message: `namespace "deep" dropped: nested more than max_metadata_depth 16 levels deep`}}}
	if d := cmp.Diff(want, l.Diagnostics()); d != "" {
		t.Fatalf("diagnostics (-want +got):\n%s", d)
	}
	if n := testutil.ToFloat64(l.m.limitExceeded.WithLabelValues(translate.LimitMetadataDepth)); n != 1 {
		t.Errorf("max_metadata_depth counted %v times", n)
	}
	if n := testutil.ToFloat64(l.m.refused); n != 0 {
		t.Errorf("refused %v", n)
	}
}

// A service whose resource is over max_resource_bytes keeps its last
// published version; its neighbours are published; going back to the
// published input clears the diagnostics.
func TestOverSizeServiceKeepsLastPublished(t *testing.T) {
	rec := newRecorder()
	l := run(t, Options{Sources: []string{"a"}, Quiet: time.Millisecond, Limits: translate.Limits{MaxResourceBytes: translate.MinResourceBytes}}, rec)
	small := service("big", 1, 2)
	publish(t, l, "a", small, service("web", 1))
	rec.next(t)

	large := service("big")
	for p := range uint32(400) {
		large.Endpoints = append(large.Endpoints, sources.Endpoint{Address: "10.0.0.1", Port: 1000 + p})
	}
	publish(t, l, "a", large, service("web", 1, 2))
	c := rec.next(t)
	if d := cmp.Diff([]string{"web"}, c.changed); d != "" {
		t.Fatalf("published (-want +got):\n%s", d)
	}
	diags := l.Diagnostics()["big"]
	if len(diags) != 1 || diags[0].Field != "cluster_load_assignment" || !strings.Contains(diags[0].Message, "more than max_resource_bytes 4096; service update refused") {
		t.Fatalf("diagnostics %v", diags)
	}
	if n := testutil.ToFloat64(l.m.refused); n != 1 {
		t.Errorf("refused counted %v", n)
	}
	if n := testutil.ToFloat64(l.m.limitExceeded.WithLabelValues(translate.LimitResourceBytes)); n != 1 {
		t.Errorf("max_resource_bytes counted %v", n)
	}
	// The gauge is set after the publish the recorder saw.
	waitTrue(t, func() bool { return testutil.ToFloat64(l.m.refusedServices) == 1 })

	// Back to what is published: translated again, to clear the
	// diagnostics (the cache finds the content unchanged and sends none).
	publish(t, l, "a", small, service("web", 1, 2))
	c = rec.next(t)
	if d := cmp.Diff(map[string]int{"big": 2}, c.loads); d != "" {
		t.Fatalf("published (-want +got):\n%s", d)
	}
	if d := l.Diagnostics(); len(d) != 0 {
		t.Fatalf("diagnostics %v", d)
	}
	waitTrue(t, func() bool { return testutil.ToFloat64(l.m.refusedServices) == 0 })

	// A refused service that was never published is not published; the
	// first state still is, and its removal removes nothing.
	publish(t, l, "a", small, service("web", 1, 2), func() sources.Service { s := large; s.Name = "new"; return s }())
	rec.none(t, 50*time.Millisecond)
	waitTrue(t, func() bool { return len(l.Diagnostics()["new"]) == 1 })
	publish(t, l, "a", small, service("web", 1, 2))
	rec.none(t, 50*time.Millisecond)
	waitTrue(t, func() bool { return len(l.Diagnostics()) == 0 })
}

// A name over max_name_bytes refuses the service; the rest is served.
func TestNameOverLimitNotServed(t *testing.T) {
	rec := newRecorder()
	l := run(t, Options{Sources: []string{"a"}, Quiet: time.Millisecond, Limits: translate.Limits{MaxNameBytes: 8}}, rec)
	publish(t, l, "a", service("web", 1), service("much-too-long", 1))
	c := rec.next(t)
	if d := cmp.Diff([]string{"web"}, c.changed); d != "" {
		t.Fatalf("published (-want +got):\n%s", d)
	}
	waitTrue(t, l.Ready)
	if d := l.Diagnostics()["much-too-long"]; len(d) != 1 || d[0].Field != "name" {
		t.Fatalf("diagnostics %v", d)
	}
}
