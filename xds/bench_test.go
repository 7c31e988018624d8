package xds_test

import (
	"fmt"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/xdsbridge/xdsbridge/sources"
	"github.com/xdsbridge/xdsbridge/translate"
	"github.com/xdsbridge/xdsbridge/xds"
)

func benchResources(i, endpoints int, port uint32) translate.Resources {
	s := sources.Service{Name: fmt.Sprintf("svc-%05d", i)}
	for j := range endpoints {
		p := uint32(80)
		if j == 0 {
			p = port
		}
		s.Endpoints = append(s.Endpoints, sources.Endpoint{Address: fmt.Sprintf("10.%d.%d.%d", i>>8&255, i&255, j+1), Port: p})
	}
	r, _ := translate.Service(s)
	return r
}

// benchCache returns a ready cache serving n services of 10 endpoints, and
// their names.
func benchCache(b *testing.B, n int) (*xds.Cache, []string) {
	c := xds.NewCache()
	all := make([]translate.Resources, n)
	names := make([]string, n)
	for i := range all {
		all[i] = benchResources(i, 10, 80)
		names[i] = all[i].Cluster.GetName()
	}
	if err := c.PublishServices(all, nil); err != nil {
		b.Fatal(err)
	}
	c.MarkReady()
	return c, names
}

// benchWatch is an Envoy-like delta EDS stream as the delta stream handler
// drives the cache: one open watch, re-created after each response with
// the state it installed.
type benchWatch struct {
	d *xds.DeltaDriver
}

func newBenchWatch(c *xds.Cache) *benchWatch { return &benchWatch{d: xds.NewDeltaDriver(c, 1)} }

func (w *benchWatch) arm(b *testing.B, req *discovery.DeltaDiscoveryRequest) {
	if _, err := w.d.Watch(req); err != nil {
		b.Fatal(err)
	}
}

// rearm takes the watch's response, if any, and opens the next watch as the
// server would after the client's ACK. It reports whether one was pending.
func (w *benchWatch) rearm(b *testing.B) bool {
	r := w.d.Take()
	if r == nil {
		return false
	}
	w.arm(b, &discovery.DeltaDiscoveryRequest{TypeUrl: xds.EndpointType, ResponseNonce: r.GetNonce()})
	return true
}

// sync takes the initial responses (split above the size bound), ACKing
// each, until the watch is held with nothing to send.
func (w *benchWatch) sync(b *testing.B) {
	if !w.rearm(b) {
		b.Fatal("no initial response")
	}
	for w.rearm(b) {
	}
}

// BenchmarkPublishSingleEndpointChange is the cache update path for one
// service whose one endpoint changed (its unchanged cluster republished with
// it, as the merge loop does), with 5,000 services served and N open delta
// EDS watches subscribed to every service (Envoys). Re-arming the watches
// (the clients' ACKs) is not timed; see BenchmarkDeltaACK.
func BenchmarkPublishSingleEndpointChange(b *testing.B) {
	const services = 5000
	for _, watches := range []int{0, 100, 1000} {
		b.Run(fmt.Sprintf("watches=%d", watches), func(b *testing.B) {
			c, names := benchCache(b, services)
			ws := make([]*benchWatch, watches)
			for i := range ws {
				w := newBenchWatch(c)
				w.arm(b, &discovery.DeltaDiscoveryRequest{TypeUrl: xds.EndpointType, ResourceNamesSubscribe: names})
				ws[i] = w
				w.sync(b)
			}
			// Two prebuilt variants of service 42, alternated.
			variants := [2][]translate.Resources{{benchResources(42, 10, 1001)}, {benchResources(42, 10, 1002)}}
			b.ReportAllocs()
			i := 0
			before := c.Stats().Marshals
			for b.Loop() {
				if err := c.PublishServices(variants[i%2], nil); err != nil {
					b.Fatal(err)
				}
				i++
				b.StopTimer()
				for _, w := range ws {
					if !w.rearm(b) {
						b.Fatal("watch not answered")
					}
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(c.Stats().Marshals-before)/float64(i), "encodings/op")
		})
	}
}

// BenchmarkDeltaACK is the cost of an ACK when nothing changed since the
// response it acknowledges: the watch is held, nothing is scanned.
func BenchmarkDeltaACK(b *testing.B) {
	const services = 5000
	c, names := benchCache(b, services)
	w := newBenchWatch(c)
	w.arm(b, &discovery.DeltaDiscoveryRequest{TypeUrl: xds.EndpointType, ResourceNamesSubscribe: names})
	w.sync(b)
	req := &discovery.DeltaDiscoveryRequest{TypeUrl: xds.EndpointType, ResponseNonce: "n"}
	b.ReportAllocs()
	for b.Loop() {
		cancel, err := w.d.Watch(req)
		if err != nil {
			b.Fatal(err)
		}
		cancel()
	}
}
