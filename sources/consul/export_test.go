package consul

import (
	"testing"
	"time"

	"github.com/xdsbridge/xdsbridge/sources"
)

// FlipObserver is what an xDS client of the catalog-scale benchmark
// reports to: the health it received for a cluster's host on the
// benchmark's instance 0 (scaleAddr), and when.
type FlipObserver interface {
	Observe(cluster string, health sources.HealthStatus, at time.Time)
}

// Observe implements FlipObserver.
func (k *flipSink) Observe(cluster string, h sources.HealthStatus, at time.Time) {
	k.observe(cluster, h, at)
}

// startXDSBridge runs, for XDSBRIDGE_CONSUL_BENCH_XDS=1, a bridge built
// as the app builds it on the Consul agent at agentAddr, with an xDS
// client reporting to obs, until the test ends; it returns a function
// reading the bridge's Consul requests by endpoint (cumulative). It is
// set by the external test package (xdsbench_test.go): the app imports
// this package, so this package's tests cannot import it.
var startXDSBridge func(t testing.TB, agentAddr string, obs FlipObserver) (requests func() map[string]int)

// SetXDSBridge sets startXDSBridge.
func SetXDSBridge(f func(t testing.TB, agentAddr string, obs FlipObserver) func() map[string]int) {
	startXDSBridge = f
}

// BenchNodeAddr is the address of every service's instance 0 in the
// benchmark, whose flips are timed.
func BenchNodeAddr() string { return scaleAddr(0) }
