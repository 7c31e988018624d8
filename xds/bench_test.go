package xds_test

import (
	"fmt"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/stream/v3"

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

// benchWatch is an Envoy-like delta EDS stream as the go-control-plane
// server drives the cache: one open watch, re-created after each response
// with the versions it returned.
type benchWatch struct {
	sub stream.Subscription
	ch  chan cache.DeltaResponse
}

func (w *benchWatch) arm(b *testing.B, c *xds.Cache, nonce string) {
	req := &discovery.DeltaDiscoveryRequest{TypeUrl: xds.EndpointType, ResponseNonce: nonce}
	if _, err := c.CreateDeltaWatch(req, &w.sub, w.ch); err != nil {
		b.Fatal(err)
	}
}

// rearm takes the watch's response, if any, and opens the next watch as the
// server would after the client's ACK. It reports whether one was pending.
func (w *benchWatch) rearm(b *testing.B, c *xds.Cache) bool {
	select {
	case r := <-w.ch:
		w.sub.SetReturnedResources(r.GetNextVersionMap())
		w.arm(b, c, "n")
		return true
	default:
		return false
	}
}

// sync takes the initial responses (split above the size bound), ACKing
// each, until the watch is held with nothing to send.
func (w *benchWatch) sync(b *testing.B, c *xds.Cache) {
	if !w.rearm(b, c) {
		b.Fatal("no initial response")
	}
	for w.rearm(b, c) {
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
				w := &benchWatch{ch: make(chan cache.DeltaResponse, 1)}
				w.sub = stream.NewDeltaSubscription(names, nil, nil, false)
				w.arm(b, c, "")
				ws[i] = w
				w.sync(b, c)
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
					if !w.rearm(b, c) {
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
	w := &benchWatch{ch: make(chan cache.DeltaResponse, 1)}
	w.sub = stream.NewDeltaSubscription(names, nil, nil, false)
	w.arm(b, c, "")
	w.sync(b, c)
	req := &discovery.DeltaDiscoveryRequest{TypeUrl: xds.EndpointType, ResponseNonce: "n"}
	b.ReportAllocs()
	for b.Loop() {
		cancel, err := c.CreateDeltaWatch(req, &w.sub, w.ch)
		if err != nil {
			b.Fatal(err)
		}
		cancel()
	}
}
