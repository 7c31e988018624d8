package bridge

import (
	"fmt"
	"testing"

	"github.com/xdsbridge/xdsbridge/sources"
)

// BenchmarkApplyUpdateOneChange is the merge loop's cost of recording a
// source's update of 20,000 services in which one changed, the unchanged
// ones handed over as the same values, with a delta naming the changed
// one (as the Consul source does: "delta") and without (every service
// compared: "full"):
//
//	go test -run '^$' -bench ApplyUpdateOneChange ./bridge/
func BenchmarkApplyUpdateOneChange(b *testing.B) {
	for _, withDelta := range []bool{true, false} {
		name := "full"
		if withDelta {
			name = "delta"
		}
		b.Run(name, func(b *testing.B) {
			l := New(Options{Sources: []string{"consul"}}, newRecorder())
			const n = 20000
			svcs := make([]sources.Service, n)
			for i := range svcs {
				svcs[i] = sources.Service{Name: fmt.Sprintf("svc-%05d", i), Endpoints: []sources.Endpoint{{Address: "10.0.0.1", Port: uint32(10000 + i)}}}
			}
			l.applyUpdate(sources.Update{Source: "consul", Services: svcs})
			b.ResetTimer()
			for i := range b.N {
				// The source's copy of its list is not the loop's cost.
				b.StopTimer()
				next := make([]sources.Service, n)
				copy(next, svcs)
				k := i % n
				next[k].Endpoints = []sources.Endpoint{{Address: "10.0.0.2", Port: uint32(10000 + k)}}
				u := sources.Update{Source: "consul", Services: next}
				if withDelta {
					u.Delta = &sources.Delta{Base: svcs, Changed: next[k : k+1]}
				}
				b.StartTimer()
				if !l.applyUpdate(u) {
					b.Fatal("the changed service is not dirty")
				}
				clear(l.dirty)
				svcs = next
			}
		})
	}
}
