package bridge

import (
	"fmt"
	"testing"

	"github.com/xdsbridge/xdsbridge/sources"
)

// BenchmarkApplyUpdateOneChange is the merge loop's cost of recording a
// source's update of 20,000 services in which one changed, the unchanged
// ones handed over as the same values (as the Consul source does):
//
//	go test -run '^$' -bench ApplyUpdateOneChange ./bridge/
func BenchmarkApplyUpdateOneChange(b *testing.B) {
	l := New(Options{Sources: []string{"consul"}}, newRecorder())
	const n = 20000
	svcs := make([]sources.Service, n)
	for i := range svcs {
		svcs[i] = sources.Service{Name: fmt.Sprintf("svc-%05d", i), Endpoints: []sources.Endpoint{{Address: "10.0.0.1", Port: uint32(10000 + i)}}}
	}
	l.applyUpdate(sources.Update{Source: "consul", Services: svcs})
	b.ResetTimer()
	for i := range b.N {
		next := make([]sources.Service, n)
		copy(next, svcs)
		k := i % n
		next[k].Endpoints = []sources.Endpoint{{Address: "10.0.0.2", Port: uint32(10000 + k)}}
		if !l.applyUpdate(sources.Update{Source: "consul", Services: next}) {
			b.Fatal("the changed service is not dirty")
		}
		clear(l.dirty)
		svcs = next
	}
}
