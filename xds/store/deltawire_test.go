package store

import (
	"bytes"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
)

// TestEntryWireIsDeltaEncoding: an entry's Wire is proto.Marshal of its
// Delta resource, holds its Any's value, and stays so when a dependency's
// change gives the entry a new version; a name that is not UTF-8 has none.
func TestEntryWireIsDeltaEncoding(t *testing.T) {
	s := New(typeRank, resource.ClusterType, resource.EndpointType)
	dep := &Dep{TypeURL: resource.ClusterType, Name: "a"}
	check := func(when string) {
		t.Helper()
		for _, u := range []string{resource.ClusterType, resource.EndpointType} {
			for n, e := range s.Type(u).Resources {
				want, err := proto.Marshal(e.Delta)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(e.Wire, want) {
					t.Errorf("%s: %s %q: Wire %x, proto.Marshal %x", when, u, n, e.Wire, want)
				}
				if v := e.Any.Value; len(v) > 0 && !bytes.Contains(e.Wire, v) {
					t.Errorf("%s: %s %q: the Any's value is not in Wire", when, u, n)
				}
				if e.Delta.Version != e.Version || e.Delta.Resource != e.Any {
					t.Errorf("%s: %s %q: Delta is not the entry's", when, u, n)
				}
			}
		}
	}
	if err := s.Apply(
		Change{TypeURL: resource.ClusterType, Upserts: []Resource{{Name: "a", Msg: &cluster.Cluster{Name: "a"}}, {Name: "empty", Msg: &cluster.Cluster{}}}},
		Change{TypeURL: resource.EndpointType, Upserts: []Resource{{Name: "a", Msg: &endpoint.ClusterLoadAssignment{ClusterName: "a"}, DependsOn: dep}}},
	); err != nil {
		t.Fatal(err)
	}
	check("added")
	before := s.Type(resource.EndpointType).Resources["a"].Version
	if err := s.Apply(Change{TypeURL: resource.ClusterType, Upserts: []Resource{{Name: "a", Msg: &cluster.Cluster{Name: "a", AltStatName: "x"}}}}); err != nil {
		t.Fatal(err)
	}
	if s.Type(resource.EndpointType).Resources["a"].Version == before {
		t.Fatal("the assignment was not re-versioned")
	}
	check("re-versioned")
	if err := s.Apply(Change{TypeURL: resource.ClusterType, Upserts: []Resource{{Name: "\xff", Msg: &cluster.Cluster{Name: "x"}}}}); err != nil {
		t.Fatal(err)
	}
	if e := s.Type(resource.ClusterType).Resources["\xff"]; e.Wire != nil {
		t.Errorf("a name that is not UTF-8 has Wire %x", e.Wire)
	}
}
