package store

import (
	"fmt"
	"slices"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
)

// commitRecorder is an Observer that notes each call, reading the
// committed type as an observer may (with the store's lock held).
type commitRecorder struct {
	calls []string
}

func (r *commitRecorder) Committed(t *Type, changed []string) {
	present := 0
	for _, n := range changed {
		if _, ok := t.Resources[n]; ok {
			present++
		}
	}
	r.calls = append(r.calls, fmt.Sprintf("%s gen %d %v (%d present)", t.URL, t.Gen, changed, present))
}

func (r *commitRecorder) Readied() { r.calls = append(r.calls, "ready") }

func (r *commitRecorder) Applied() {}

func typeRank(u string) int {
	return slices.Index([]string{resource.ClusterType, resource.EndpointType}, u)
}

// TestObserverSeesCommitsAfterReady: the observer is told nothing before
// MarkReady, once of MarkReady, then of each commit in Apply's order: the
// type, its generation and the changed names (sorted, each once),
// including the assignments a cluster's change re-versioned, committed
// after the clusters.
func TestObserverSeesCommitsAfterReady(t *testing.T) {
	s := New(typeRank, resource.ClusterType, resource.EndpointType)
	rec := &commitRecorder{}
	s.Observe(rec)
	dep := &Dep{TypeURL: resource.ClusterType, Name: "a"}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.Apply(
		Change{TypeURL: resource.ClusterType, Upserts: []Resource{{Name: "b", Msg: &cluster.Cluster{Name: "b"}}, {Name: "a", Msg: &cluster.Cluster{Name: "a"}}}},
		Change{TypeURL: resource.EndpointType, Upserts: []Resource{{Name: "a", Msg: &endpoint.ClusterLoadAssignment{ClusterName: "a"}, DependsOn: dep}}},
	))
	if len(rec.calls) != 0 {
		t.Fatalf("before MarkReady the observer was told %q", rec.calls)
	}
	s.MarkReady()
	s.MarkReady()
	// A cluster's change re-versions its assignment, committed after it;
	// a removal is a changed name too.
	must(s.Apply(Change{TypeURL: resource.ClusterType, Upserts: []Resource{{Name: "a", Msg: &cluster.Cluster{Name: "a", AltStatName: "x"}}}, Deletes: []string{"b", "b", "gone"}}))
	want := []string{
		"ready",
		resource.ClusterType + " gen 2 [a b] (1 present)",
		resource.EndpointType + " gen 2 [a] (1 present)",
	}
	if !slices.Equal(rec.calls, want) {
		t.Fatalf("observer calls\n got %q\nwant %q", rec.calls, want)
	}
}
