package translate_test

import (
	"fmt"
	"testing"

	"github.com/xdsbridge/xdsbridge/policy"
	"github.com/xdsbridge/xdsbridge/sources"
	"github.com/xdsbridge/xdsbridge/translate"
)

func benchService(endpoints int) sources.Service {
	s := sources.Service{Name: "bench"}
	for j := range endpoints {
		s.Endpoints = append(s.Endpoints, sources.Endpoint{
			Address:  fmt.Sprintf("10.%d.%d.%d", j>>16&255, j>>8&255, j&255),
			Port:     8080,
			Health:   sources.HealthHealthy,
			Locality: sources.Locality{Region: "r1", Zone: fmt.Sprintf("z%d", j%3)},
			Metadata: sources.Metadata{"envoy.lb": {"canary": j%10 == 0}},
		})
	}
	return s
}

// BenchmarkService is the translator's cost for one dirty service: what the
// merge loop pays per changed service before the cache sees it.
func BenchmarkService(b *testing.B) {
	for _, n := range []int{10, 1000} {
		s := benchService(n)
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				r, _ := translate.Service(s)
				if r.Load == nil {
					b.Fatal("no load assignment")
				}
			}
		})
	}
}

// BenchmarkServiceSubsets is the same with a policy of four subsets, each
// filter evaluated on every endpoint (Consul-like metadata).
func BenchmarkServiceSubsets(b *testing.B) {
	p := &policy.Service{Subsets: map[string]policy.Subset{
		"canary":  {Filter: `Metadata["envoy.lb"].canary == true`},
		"z0":      {Filter: `Locality.Zone == z0`},
		"v1":      {Filter: `Service.Meta.version == "1" and "primary" in Service.Tags`},
		"healthy": {OnlyPassing: true},
	}}
	for _, n := range []int{10, 1000} {
		s := benchService(n)
		for j := range s.Endpoints {
			s.Endpoints[j].Metadata["consul"] = map[string]any{
				"service_id": fmt.Sprintf("bench-%d", j), "node": fmt.Sprintf("n%d", j%50),
				"tags": []any{"primary"}, "meta.version": fmt.Sprint(j % 2),
			}
		}
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				r, _ := translate.Options{Policy: p}.Service(s)
				if len(r.Subsets) != 4 {
					b.Fatal("subsets missing")
				}
			}
		})
	}
}
