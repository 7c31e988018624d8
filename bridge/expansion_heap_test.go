package bridge

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/xdsbridge/xdsbridge/policy"
	"github.com/xdsbridge/xdsbridge/sources"
	"github.com/xdsbridge/xdsbridge/translate"
)

// keeper holds every published resource, as the xDS cache does.
type keeper struct {
	mu    sync.Mutex
	res   map[string]translate.Resources
	ready chan struct{}
}

func (k *keeper) PublishServices(changed []translate.Resources, removed []string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, r := range changed {
		k.res[r.Cluster.GetName()] = r
	}
	for _, n := range removed {
		delete(k.res, n)
	}
	return nil
}

func (k *keeper) MarkReady() { close(k.ready) }

func heapMiB() float64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapAlloc) / (1 << 20)
}

// The heap a "*" failover to a big service costs over a catalog of 3,000
// services, with the default max_failover_endpoints and without a bound
// worth the name. Measured, not asserted: set XDSBRIDGE_EXPANSION_HEAP=1.
//
//	XDSBRIDGE_EXPANSION_HEAP=1 go test -run TestFailoverExpansionHeap -v ./bridge/
func TestFailoverExpansionHeap(t *testing.T) {
	if os.Getenv("XDSBRIDGE_EXPANSION_HEAP") == "" {
		t.Skip("set XDSBRIDGE_EXPANSION_HEAP=1 to measure")
	}
	const services, bigHosts = 3000, 500
	catalog := make([]sources.Service, 0, services+1)
	for i := range services {
		s := sources.Service{Name: fmt.Sprintf("svc-%04d", i)}
		for j := range 3 {
			s.Endpoints = append(s.Endpoints, sources.Endpoint{Address: fmt.Sprintf("10.%d.%d.%d", i/250, i%250, j+1), Port: 8080,
				Metadata: sources.Metadata{"consul": {"node": fmt.Sprintf("node-%d", j), "service": s.Name, "tags": []any{"a", "b"}}}})
		}
		catalog = append(catalog, s)
	}
	big := sources.Service{Name: "big"}
	for j := range bigHosts {
		big.Endpoints = append(big.Endpoints, sources.Endpoint{Address: fmt.Sprintf("10.200.%d.%d", j/250, j%250+1), Port: 8080,
			Metadata: sources.Metadata{"consul": {"node": fmt.Sprintf("big-%d", j), "service": "big", "tags": []any{"a", "b"}}}})
	}
	catalog = append(catalog, big)
	pol := map[string]policy.Service{"big": {}, "*": {Failover: []policy.Target{{Service: "big"}}}}

	for _, tc := range []struct {
		name   string
		pol    map[string]policy.Service
		limits translate.Limits
	}{
		{"no policy", nil, translate.Limits{}},
		{"failover, default limits", pol, translate.Limits{}},
		{"failover, max_failover_endpoints 100000000", pol, translate.Limits{MaxFailoverEndpoints: translate.CeilingFailoverEndpoints}},
	} {
		before := heapMiB()
		start := time.Now()
		k := &keeper{res: map[string]translate.Resources{}, ready: make(chan struct{})}
		l := run(t, Options{Sources: []string{"a", "policy"}, Quiet: time.Millisecond, Limits: tc.limits}, k)
		publish(t, l, "a", catalog...)
		publishPolicy(t, l, "policy", tc.pol)
		select {
		case <-k.ready:
		case <-time.After(10 * time.Minute):
			t.Fatal("not ready")
		}
		took := time.Since(start)
		after := heapMiB()
		eps := 0
		k.mu.Lock()
		for _, r := range k.res {
			for _, g := range r.Load.GetEndpoints() {
				eps += len(g.GetLbEndpoints())
			}
		}
		k.mu.Unlock()
		t.Logf("%s: %d hosts published, heap %.0f MiB (+%.0f MiB), %v", tc.name, eps, after, after-before, took.Round(time.Millisecond))
		runtime.KeepAlive(l)
		k.mu.Lock()
		clear(k.res)
		k.mu.Unlock()
	}
}
