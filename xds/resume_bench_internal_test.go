package xds

import (
	"fmt"
	"syscall"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/xdsbridge/xdsbridge/sources"
	"github.com/xdsbridge/xdsbridge/translate"
)

// BenchmarkResume is what one Envoy reconnecting in a storm costs the
// server, per type's first request: an EDS request subscribing to 5,000
// assignments with their 5,000 versions (all current), decoded (compared
// with the store's as a guarded stream decodes them, with the store's
// strings, and as copies), then its watch made and answered (nothing to
// send).
func BenchmarkResume(b *testing.B) {
	const services = 5000
	c := NewCache()
	all := make([]translate.Resources, services)
	for i := range all {
		s := sources.Service{Name: fmt.Sprintf("svc-%05d", i)}
		for j := range 10 {
			s.Endpoints = append(s.Endpoints, sources.Endpoint{Address: fmt.Sprintf("10.%d.%d.%d", i>>8&255, i&255, j+1), Port: 80})
		}
		all[i], _ = translate.Service(s)
	}
	if err := c.PublishServices(all, nil); err != nil {
		b.Fatal(err)
	}
	c.MarkReady()
	req := &discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, InitialResourceVersions: map[string]string{}}
	for n, e := range c.types[EndpointType].Resources {
		req.ResourceNamesSubscribe = append(req.ResourceNamesSubscribe, n)
		req.InitialResourceVersions[n] = e.Version
	}
	wire, err := proto.Marshal(req)
	if err != nil {
		b.Fatal(err)
	}
	// As a guarded stream decodes it (compare: the versions compared
	// with the store's, resumed.go), or the codec of an unguarded one.
	decode := func(b *testing.B, cd codec, compare bool) (*discovery.DeltaDiscoveryRequest, *resumedVersions) {
		m := &discovery.DeltaDiscoveryRequest{}
		if compare {
			sc, _ := scanDelta(wire)
			r, err := decodeScanned(wire, sc, m, cd.wire, nil, true)
			if err != nil || r == nil {
				b.Fatalf("decoded %v, found current %v", err, r != nil)
			}
			return m, r
		}
		if err := cd.Unmarshal(mem.BufferSlice{mem.SliceBuffer(wire)}, m); err != nil {
			b.Fatal(err)
		}
		return m, nil
	}
	decoders := []struct {
		name    string
		cd      codec
		compare bool
	}{{"compare", codec{wire: c.store.Wire()}, true}, {"store-strings", codec{wire: c.store.Wire()}, false}, {"copies", codec{}, false}}
	for _, d := range decoders {
		b.Run("decode-"+d.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(wire)))
			cpu := processCPU()
			for b.Loop() {
				decode(b, d.cd, d.compare)
			}
			b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
		})
	}
	// The limits' accounting of the request on a fresh stream (a new
	// stream's first request; the stream's set of name hashes is one the
	// fleet shares, found, not built, after the first).
	b.Run("guard", func(b *testing.B) {
		b.ReportAllocs()
		g := newGuard(Limits{}.WithDefaults(), newGuardMetrics())
		cpu := processCPU()
		for b.Loop() {
			a := newTestStreamAcct(g)
			if err := a.checkWire(req, wire); err != nil {
				b.Fatal(err)
			}
			a.release()
		}
		b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
	})
	for _, d := range decoders {
		b.Run("watch-"+d.name, func(b *testing.B) {
			b.ReportAllocs()
			ch := make(chan *deltaResponse, 1)
			var cpu int64
			for b.Loop() {
				b.StopTimer()
				m, r := decode(b, d.cd, d.compare)
				b.StartTimer()
				cpu -= processCPU()
				sub := newDeltaSub(m.ResourceNamesSubscribe, m.ResourceNamesUnsubscribe, m.InitialResourceVersions, r)
				cancel, err := c.watchDelta(m, sub, deltaQueue{ch: ch})
				if err != nil {
					b.Fatal(err)
				}
				resp := <-ch
				if res := resp.resp; len(res.Resources)+len(res.RemovedResources) > 0 {
					b.Fatalf("resent %d, removed %d", len(res.Resources), len(res.RemovedResources))
				}
				cancel()
				cpu += processCPU()
			}
			b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}

// processCPU is the process's CPU time so far (user and system, every
// thread: the garbage collector's too), in nanoseconds: on a machine
// shared with other work, the figure that wall time is not.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
