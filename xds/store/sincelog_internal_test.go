package store

import (
	"fmt"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestSinceLogOneAllocation: the names changed after a generation are
// gathered into one slice of their number, however many commits they
// came in, and none when nothing changed.
func TestSinceLogOneAllocation(t *testing.T) {
	s := New(func(string) int { return 0 }, resource.ClusterType)
	ts := s.types[resource.ClusterType]
	for i := range 20 {
		n := fmt.Sprintf("c%02d", i%5)
		c := &cluster.Cluster{Name: n, ConnectTimeout: durationpb.New(time.Duration(i+1) * time.Millisecond)}
		if err := s.Apply(Change{TypeURL: resource.ClusterType, Upserts: []Resource{{Name: n, Msg: c}}}); err != nil {
			t.Fatal(err)
		}
	}
	gen := ts.Log[len(ts.Log)-12].Gen
	if got := ts.SinceLog(gen); len(got) != 11 {
		t.Fatalf("%d names changed after the 12th commit from the end, want 11", len(got))
	}
	if a := testing.AllocsPerRun(100, func() { ts.SinceLog(gen) }); a != 1 {
		t.Fatalf("%v allocations, want 1", a)
	}
	if a := testing.AllocsPerRun(100, func() { ts.SinceLog(ts.Gen) }); a != 0 {
		t.Fatalf("%v allocations with nothing changed, want 0", a)
	}
}
