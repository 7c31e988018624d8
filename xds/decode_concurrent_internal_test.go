package xds

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"sync"
	"testing"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/xdsbridge/xdsbridge/xds/store"
	"google.golang.org/protobuf/proto"
)

// TestDecodeWhileStoreChanges: requests of more names and entries than
// the decoder looks up at once (served, deleted, repeated; versions
// served, stale, repeated keys) decode to what proto.Unmarshal decodes
// while the store upserts and deletes the names, its wire index
// following them; a resume found to subscribe to exactly its current
// entries does.
func TestDecodeWhileStoreChanges(t *testing.T) {
	c := NewCache()
	var pool []string
	for i := range 60 {
		pool = append(pool, fmt.Sprintf("svc-%02d", i))
	}
	x := c.store.Wire()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		r := rand.New(rand.NewPCG(1, 2))
		for step := 0; ; step++ {
			select {
			case <-stop:
				return
			default:
			}
			ch := store.Change{TypeURL: EndpointType}
			for range 1 + r.IntN(10) {
				n := pool[r.IntN(len(pool))]
				if r.IntN(3) == 0 {
					ch.Deletes = append(ch.Deletes, n)
				} else {
					ch.Upserts = append(ch.Upserts, store.Resource{Name: n, Msg: &endpoint.ClusterLoadAssignment{ClusterName: fmt.Sprint(n, step%4)}})
				}
			}
			if err := c.Apply(ch); err != nil {
				t.Error(err)
				return
			}
		}
	})
	var readers sync.WaitGroup
	for w := range 2 {
		readers.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 9))
			for i := range 300 {
				// The versions served now, some of which are stale by the
				// time the request is decoded.
				served := map[string]string{}
				x.Read([]byte(EndpointType), func(wt *store.WireType) {
					for _, n := range pool {
						if e := wt.Entry(n); e != nil {
							served[n] = e.Version
						}
					}
				})
				req := &discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, InitialResourceVersions: map[string]string{}}
				for range r.IntN(80) {
					n := pool[r.IntN(len(pool))]
					req.ResourceNamesSubscribe = append(req.ResourceNamesSubscribe, n)
					if v, ok := served[n]; ok && r.IntN(4) != 0 {
						req.InitialResourceVersions[n] = v
					} else {
						req.InitialResourceVersions[n] = "old"
					}
				}
				b, err := proto.Marshal(req)
				if err != nil {
					t.Error(err)
					return
				}
				// A key repeated: its entry again, last, with another value.
				if i%3 == 0 && len(req.ResourceNamesSubscribe) > 0 {
					k := req.ResourceNamesSubscribe[0]
					b = append(b, entryBytes(str(1, k), str(2, served[k]))...)
				}
				want := &discovery.DeltaDiscoveryRequest{}
				if err := proto.Unmarshal(b, want); err != nil {
					t.Error(err)
					return
				}
				sc, ok := scanDelta(b)
				got := &discovery.DeltaDiscoveryRequest{}
				res, err := decodeScanned(b, sc, got, x, nil, true)
				if !ok || err != nil {
					t.Errorf("request %d: scanned %v, %v", i, ok, err)
					return
				}
				if res != nil && res.subsCur {
					cur := map[string]bool{}
					for _, e := range res.cur {
						cur[e.Name] = true
					}
					subs := map[string]bool{}
					for _, n := range got.ResourceNamesSubscribe {
						subs[n] = true
					}
					if !maps.Equal(cur, subs) {
						t.Errorf("request %d: subscribes to exactly its current entries, %v; subscribed %v", i, cur, subs)
						return
					}
				}
				h := &deltaHeld{versions: got.InitialResourceVersions, resumed: res}
				h.explicit()
				got.InitialResourceVersions = h.versions
				if !proto.Equal(got, want) {
					t.Errorf("request %d: decoded\n%v\nproto.Unmarshal decodes\n%v", i, got, want)
					return
				}
			}
		})
	}
	readers.Wait()
	close(stop)
	wg.Wait()
}
