package store

import (
	"fmt"
	"strconv"
	"testing"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
)

// BenchmarkFindSortedNames is a pass's lookups of sorted names, every
// gap-th of a type's, with a Cursor and in Resources: the cost per name
// found of each, by how far apart the names are (the density from which
// a pass uses a cursor, Cache.finder). The names are the store's strings,
// as a request's decoder hands them out.
func BenchmarkFindSortedNames(b *testing.B) {
	for _, size := range []int{500, 20000} {
		s := New(typeRank, resource.ClusterType, resource.EndpointType)
		ch := Change{TypeURL: resource.EndpointType}
		for i := range size {
			n := fmt.Sprintf("svc-%05d", i)
			ch.Upserts = append(ch.Upserts, Resource{Name: n, Msg: &endpoint.ClusterLoadAssignment{ClusterName: n}})
		}
		if err := s.Apply(ch); err != nil {
			b.Fatal(err)
		}
		ts := s.Type(resource.EndpointType)
		all := ts.AllNames().All()
		for _, gap := range []int{1, 2, 4, 8, 16, 32} {
			var seq []string
			for i := gap / 2; i < len(all); i += gap {
				seq = append(seq, all[i])
			}
			name := "size=" + strconv.Itoa(size) + "/gap=" + strconv.Itoa(gap)
			b.Run(name+"/cursor", func(b *testing.B) {
				for b.Loop() {
					cur := ts.Cursor()
					for _, n := range seq {
						if e, ok := cur.Find(n); !ok || e.Name != n {
							b.Fatal(n)
						}
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(seq)), "ns/name")
			})
			b.Run(name+"/map", func(b *testing.B) {
				for b.Loop() {
					for _, n := range seq {
						if e, ok := ts.Resources[n]; !ok || e.Name != n {
							b.Fatal(n)
						}
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(seq)), "ns/name")
			})
		}
	}
}
