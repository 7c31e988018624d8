package xds_test

import (
	"fmt"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/xdsbridge/xdsbridge/xds"
)

// BenchmarkDeltaFirstSync is the cache's cost of one Envoy's first sync
// (one op): a wildcard CDS subscription, sent in parts of the size bound,
// each part acknowledged and followed by a subscription to its clusters'
// assignments, which are sent in parts too, each acknowledged. ns/res is
// the cost per resource sent: the same at every catalog size if the sync
// is linear in the catalog.
func BenchmarkDeltaFirstSync(b *testing.B) {
	for _, services := range []int{5000, 20000} {
		b.Run(fmt.Sprintf("services=%d", services), func(b *testing.B) {
			c, _ := benchCache(b, services)
			b.ReportAllocs()
			for b.Loop() {
				if sent := firstSync(b, c); sent != 2*services {
					b.Fatalf("sent %d resources, want %d", sent, 2*services)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(2*services), "ns/res")
		})
	}
}

// firstSync plays an Envoy's first sync of clusters and assignments, and
// returns the number of resources it was sent. A response is taken (sent)
// before the next request of its type re-arms the watch, as the stream
// handler sends a queued response before it reads the next request.
func firstSync(b *testing.B, c *xds.Cache) int {
	type stream struct {
		d      *xds.DeltaDriver
		cancel func()
		got    []*discovery.DeltaDiscoveryResponse // sent, not answered yet
	}
	cds := &stream{d: xds.NewDeltaDriver(c, 2)}
	eds := &stream{d: xds.NewDeltaDriver(c, 2)}
	request := func(s *stream, req *discovery.DeltaDiscoveryRequest) {
		if r := s.d.Take(); r != nil {
			s.got = append(s.got, r)
		}
		if s.cancel != nil {
			s.cancel()
		}
		cancel, err := s.d.Watch(req)
		if err != nil {
			b.Fatal(err)
		}
		s.cancel = cancel
	}
	// answer takes the oldest response sent on s, ACKs it, and returns it.
	answer := func(s *stream, typeURL string) *discovery.DeltaDiscoveryResponse {
		if r := s.d.Take(); r != nil {
			s.got = append(s.got, r)
		}
		if len(s.got) == 0 {
			return nil
		}
		r := s.got[0]
		s.got = s.got[1:]
		request(s, &discovery.DeltaDiscoveryRequest{TypeUrl: typeURL, ResponseNonce: r.GetNonce()})
		return r
	}
	request(cds, &discovery.DeltaDiscoveryRequest{TypeUrl: xds.ClusterType})
	sent := 0
	for {
		r := answer(cds, xds.ClusterType)
		if r != nil {
			sent += len(r.GetResources())
			names := make([]string, 0, len(r.GetResources()))
			for _, res := range r.GetResources() {
				names = append(names, res.GetName())
			}
			request(eds, &discovery.DeltaDiscoveryRequest{TypeUrl: xds.EndpointType, ResourceNamesSubscribe: names})
		}
		e := answer(eds, xds.EndpointType)
		if e != nil {
			sent += len(e.GetResources())
		}
		if r == nil && e == nil {
			break
		}
	}
	cds.cancel()
	eds.cancel()
	return sent
}
