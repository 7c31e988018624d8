package xds

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"

	"github.com/xdsbridge/xdsbridge/xds/store"
)

// TestSotwRestDifferential: sotw streams of assignments (and clusters)
// split into small parts, served by a cache that keeps a state's rest
// (sotwHeld.rest) and by one whose every request checks in full, send
// the same responses, version_info included: random changes, deletes,
// re-creations at the same version, NACKs, lists changed (fewer, more,
// reordered, wildcard), restricted clients.
func TestSotwRestDifferential(t *testing.T) {
	seeds := uint64(300)
	if testing.Short() {
		seeds = 50
	}
	if s := os.Getenv("XDSBRIDGE_REST_SEEDS"); s != "" {
		seeds, _ = strconv.ParseUint(s, 10, 64)
	}
	for seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { sotwRestDiff(t, seed) })
	}
}

func sotwRestDiff(t *testing.T, seed uint64) {
	const services, clients, steps = 40, 5, 300
	rng := rand.New(rand.NewPCG(seed, 4949))
	name := func(i int) string { return fmt.Sprintf("svc-%03d", i) }
	maxBytes := 150 + rng.IntN(400)
	withCDS := seed%3 != 0
	types := []string{EndpointType}
	if withCDS {
		types = []string{ClusterType, EndpointType}
	}
	caches := [2]*Cache{
		NewCache(WithTypes(types...), WithMaxResponseBytes(maxBytes)),
		NewCache(WithTypes(types...), WithMaxResponseBytes(maxBytes)),
	}
	caches[1].maxNarrow = -1
	ver := 0
	last := map[string]store.Resource{}
	clusterOf := func(n string) store.Resource {
		ver++
		return store.Resource{Name: n, Msg: &cluster.Cluster{Name: n, AltStatName: fmt.Sprint(ver)}}
	}
	assignmentOf := func(n string) store.Resource {
		ver++
		la := &endpoint.ClusterLoadAssignment{ClusterName: n}
		for i := range 1 + rng.IntN(6) {
			la.Endpoints = append(la.Endpoints, &endpoint.LocalityLbEndpoints{Priority: uint32(i + ver%3)})
		}
		r := store.Resource{Name: n, Msg: la}
		if withCDS {
			r.DependsOn = &store.Dep{TypeURL: ClusterType, Name: n}
		}
		last[n] = r
		return r
	}
	apply := func(chs ...store.Change) { applyCopies(t, caches, chs...) }
	var cls, eps []store.Resource
	for i := range services {
		cls = append(cls, clusterOf(name(i)))
		eps = append(eps, assignmentOf(name(i)))
	}
	if withCDS {
		apply(store.Change{TypeURL: ClusterType, Upserts: cls}, store.Change{TypeURL: EndpointType, Upserts: eps})
	} else {
		apply(store.Change{TypeURL: EndpointType, Upserts: eps})
	}
	for _, c := range caches {
		c.MarkReady()
	}
	pick := func() []string {
		switch rng.IntN(8) {
		case 0:
			return nil
		case 1:
			return []string{"*"}
		}
		k := 1 + rng.IntN(services)
		var names []string
		for _, j := range rng.Perm(services)[:k] {
			names = append(names, name(j))
		}
		if rng.IntN(2) == 0 {
			slices.Sort(names)
		}
		return names
	}
	type client struct {
		s     [2]*diffSotwStream
		names map[string][]string
	}
	var cl []*client
	for i := range clients {
		c := &client{names: map[string][]string{ClusterType: nil, EndpointType: pick()}}
		for k := range caches {
			c.s[k] = newDiffSotwStream(caches[k], int64(i+1))
			c.s[k].everyRequest = k == 1
			if seed%2 == 1 {
				var vis *visibility
				if i%2 == 0 {
					vis = &visibility{patterns: []string{"*[0-4]"}}
				}
				caches[k].openStream(c.s[k].key, vis)
			}
		}
		cl = append(cl, c)
	}
	request := func(c *client, typ string, nack, stale bool) { requestPair(t, c.s, typ, c.names[typ], nack, stale) }
	for _, c := range cl {
		if withCDS {
			request(c, ClusterType, false, false)
		}
		request(c, EndpointType, false, false)
	}
	compare := func(step int, c *client) {
		comparePair(t, c.s, fmt.Sprintf("seed %d step %d", seed, step), "with rest", "in full")
	}
	for step := range steps {
		switch r := rng.IntN(12); {
		case r < 4:
			var chs []store.Change
			switch rng.IntN(6) {
			case 0:
				if withCDS {
					chs = append(chs, store.Change{TypeURL: ClusterType, Upserts: []store.Resource{clusterOf(name(rng.IntN(services)))}})
				}
			case 1:
				var dels []string
				for range 1 + rng.IntN(3) {
					dels = append(dels, name(rng.IntN(services)))
				}
				slices.Sort(dels)
				chs = append(chs, store.Change{TypeURL: EndpointType, Deletes: slices.Compact(dels)})
			case 2:
				// re-created (or set again) at its last version
				n := name(rng.IntN(services))
				chs = append(chs, store.Change{TypeURL: EndpointType, Upserts: []store.Resource{last[n]}})
			default:
				ups := someOf(rng, services, 8, func(j int) store.Resource { return assignmentOf(name(j)) })
				chs = append(chs, store.Change{TypeURL: EndpointType, Upserts: ups})
			}
			if len(chs) > 0 {
				apply(chs...)
			}
		default:
			c := cl[rng.IntN(clients)]
			if seed%4 != 3 || rng.IntN(6) != 0 {
				// else the request comes before the queued responses are
				// sent (the server drops those of its type)
				compare(step, c)
			}
			typ := EndpointType
			if withCDS && rng.IntN(5) == 0 {
				typ = ClusterType
			}
			if typ == EndpointType {
				switch ns := c.names[typ]; {
				case rng.IntN(8) == 0:
					c.names[typ] = pick()
				case len(ns) > 0 && rng.IntN(6) == 0:
					j := rng.IntN(len(ns))
					c.names[typ] = slices.Delete(slices.Clone(ns), j, j+1)
				case len(ns) > 1 && rng.IntN(6) == 0:
					ns = slices.Clone(ns)
					rng.Shuffle(len(ns), func(i, j int) { ns[i], ns[j] = ns[j], ns[i] })
					c.names[typ] = ns
				case len(ns) > 0 && rng.IntN(8) == 0:
					c.names[typ] = append(slices.Clone(ns), name(rng.IntN(services)))
				}
			}
			nack := rng.IntN(5) == 0
			stale := rng.IntN(10) == 0
			request(c, typ, nack, stale)
		}
	}
	for _, c := range cl {
		compare(steps, c)
	}
}
