package xds

import (
	"strconv"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/xdsbridge/xdsbridge/xds/store"
)

// BenchmarkRearmDeltaIdleACK is the cache's part of an idle ACK on a
// delta stream (Cache.rearmDelta: nothing changed since the response it
// acknowledges), each stream holding a CDS and an EDS watch; the ACKs go
// round the streams, as a fleet's do, so that with many streams each
// finds its stream's state out of the CPU's caches.
func BenchmarkRearmDeltaIdleACK(b *testing.B) {
	for _, streams := range []int{1, 1000} {
		b.Run("streams="+strconv.Itoa(streams), func(b *testing.B) {
			c := NewCache(WithTypes(ClusterType, EndpointType))
			c.MarkReady()
			err := c.Apply(store.Change{TypeURL: EndpointType, Upserts: []store.Resource{testAssignment("a", 1)}})
			if err != nil {
				b.Fatal(err)
			}
			type stream struct {
				w   *watch
				sub deltaSub
				ack *discovery.DeltaDiscoveryRequest
			}
			ss := make([]stream, streams)
			for i := range ss {
				key := streamKey{true, int64(i + 1)}
				cch, ch := make(chan *deltaResponse, 1), make(chan *deltaResponse, 1)
				cw, _, err := c.newDeltaWatch(key, &discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType}, newDeltaSub(nil, nil, nil, nil), deltaQueue{ch: cch})
				if err != nil || cw == nil {
					b.Fatal(err)
				}
				sub := newDeltaSub([]string{"a"}, nil, nil, nil)
				w, _, err := c.newDeltaWatch(key, &discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResourceNamesSubscribe: []string{"a"}}, sub, deltaQueue{ch: ch})
				if err != nil {
					b.Fatal(err)
				}
				r := <-ch
				r.resp.Nonce = "1"
				sub.held = r.install("1")
				ack := &discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResponseNonce: "1"}
				if w, _, err = c.rearmDelta(w, ack, sub); err != nil || len(ch) != 0 {
					b.Fatal("an idle ACK answered: ", err)
				}
				ss[i] = stream{w, sub, ack}
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				s := &ss[i]
				if s.w, _, err = c.rearmDelta(s.w, s.ack, s.sub); err != nil {
					b.Fatal(err)
				}
				if i++; i == len(ss) {
					i = 0
				}
			}
		})
	}
}
