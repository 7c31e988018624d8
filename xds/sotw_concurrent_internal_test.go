package xds

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/xdsbridge/xdsbridge/xds/store"
)

// TestSotwSharedStateUnderConcurrentStreams: sotw EDS streams, each in
// its own goroutine, list one of a few lists (so they share their
// subscription's set, its list and their versions' bases: sotwNames,
// sharedBases), change lists (with and without "*"), send requests with a
// stale nonce (skipped, some dropping the wildcard), ACK, while a
// publisher commits back to back; once it stops, every stream syncs and
// holds every name it lists at the store's version.
func TestSotwSharedStateUnderConcurrentStreams(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { sotwConcurrentStreams(t, seed) })
	}
}

func sotwConcurrentStreams(t *testing.T, seed uint64) {
	const services, streams, steps = 120, 8, 300
	maxBytes := 0
	if seed%2 == 1 {
		maxBytes = 1500
	}
	c := NewCache(WithTypes(EndpointType), WithMaxResponseBytes(maxBytes))
	name := func(i int) string { return fmt.Sprintf("c%04d", i) }
	var mu sync.Mutex
	truth := map[string]uint32{}
	var res []store.Resource
	for i := range services {
		res = append(res, testAssignment(name(i), 0))
		truth[name(i)] = 0
	}
	if err := c.Apply(store.Change{TypeURL: EndpointType, Upserts: res}); err != nil {
		t.Fatal(err)
	}
	c.MarkReady()
	r0 := rand.New(rand.NewPCG(seed, 99))
	var lists [][]string
	for k := range 4 {
		var l []string
		for i := range services {
			if k == 0 || r0.IntN(4) != 0 {
				l = append(l, name(i))
			}
		}
		lists = append(lists, l)
	}
	type client struct {
		s     *diffSotwStream
		list  []string
		model map[string]uint32
		nonce string
		log   []string
	}
	apply := func(cl *client, rs []*discovery.DiscoveryResponse) {
		for _, r := range rs {
			for _, a := range r.GetResources() {
				var cla endpoint.ClusterLoadAssignment
				if err := a.UnmarshalTo(&cla); err != nil {
					t.Error(err)
					continue
				}
				var p uint32
				if len(cla.Endpoints) > 0 {
					p = cla.Endpoints[0].Priority
				}
				cl.model[cla.ClusterName] = p
				cl.log = append(cl.log, fmt.Sprintf("%s got %d in %s", cla.ClusterName, p, r.Nonce))
			}
			cl.nonce = r.Nonce
		}
	}
	clients := make([]*client, streams)
	for i := range clients {
		clients[i] = &client{s: newDiffSotwStream(c, int64(i+1)), model: map[string]uint32{}}
	}
	ncommits := 0
	stop := make(chan struct{})
	var cw sync.WaitGroup
	cw.Add(1)
	go func() {
		defer cw.Done()
		r := rand.New(rand.NewPCG(seed, 7))
		for {
			select {
			case <-stop:
				return
			default:
			}
			var up []store.Resource
			mu.Lock()
			for range 1 + r.IntN(20) {
				n := name(r.IntN(services))
				truth[n]++
				up = append(up, testAssignment(n, truth[n]))
			}
			mu.Unlock()
			if err := c.Apply(store.Change{TypeURL: EndpointType, Upserts: up}); err != nil {
				t.Error(err)
			}
			ncommits++
		}
	}()
	t0 := time.Now()
	defer func() { t.Logf("commits %d in %v", ncommits, time.Since(t0)) }()
	var wg sync.WaitGroup
	for i, cl := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(i)))
			cl.list = lists[r.IntN(len(lists))]
			cl.s.request(t, &discovery.DiscoveryRequest{TypeUrl: EndpointType, ResourceNames: slices.Clone(cl.list)})
			for range steps {
				apply(cl, cl.s.takeAll())
				if r.IntN(12) == 0 {
					li := r.IntN(len(lists))
					nl := lists[li]
					for n := range cl.model {
						if !slices.Contains(nl, n) {
							delete(cl.model, n)
						}
					}
					cl.list = nl
					cl.log = append(cl.log, fmt.Sprintf("stale L%d wn=%q", li, cl.s.wnonce[EndpointType]))
					cl.s.request(t, &discovery.DiscoveryRequest{TypeUrl: EndpointType, ResourceNames: slices.Clone(cl.list), ResponseNonce: "0"})
					continue
				}
				if r.IntN(10) == 0 {
					li := r.IntN(len(lists))
					nl := lists[li]
					if r.IntN(4) == 0 {
						nl = append(slices.Clone(nl), "*")
					}
					for n := range cl.model {
						if !slices.Contains(nl, n) && !slices.Contains(nl, "*") {
							delete(cl.model, n)
						}
					}
					cl.list = nl
					cl.log = append(cl.log, fmt.Sprintf("L%d wild=%v", li, slices.Contains(nl, "*")))
				}
				cl.s.request(t, &discovery.DiscoveryRequest{TypeUrl: EndpointType, ResourceNames: slices.Clone(cl.list), ResponseNonce: cl.nonce})
			}
		}()
	}
	wg.Wait()
	close(stop)
	cw.Wait()
	for i, cl := range clients {
		for range 1000 {
			cl.s.request(t, &discovery.DiscoveryRequest{TypeUrl: EndpointType, ResourceNames: slices.Clone(cl.list), ResponseNonce: cl.nonce})
			got := cl.s.takeAll()
			if len(got) == 0 {
				break
			}
			apply(cl, got)
		}
		for _, n := range cl.list {
			if n == "*" {
				continue
			}
			if v, ok := cl.model[n]; !ok || v != truth[n] {
				t.Errorf("client %d: %s at %d (held %v), store %d", i, n, v, ok, truth[n])
				var l []string
				for _, e := range cl.log {
					if !strings.HasPrefix(e, "c0") || strings.HasPrefix(e, n+" ") {
						l = append(l, e)
					}
				}
				var in []bool
				for _, li := range lists {
					in = append(in, slices.Contains(li, n))
				}
				t.Errorf("lists have %s: %v; log: %q", n, in, l)
				return
			}
		}
	}
}
