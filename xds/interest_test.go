package xds_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"

	"github.com/xdsbridge/xdsbridge/xds"
	"github.com/xdsbridge/xdsbridge/xds/store"
)

// TestSotwNarrowWatchesAnswerAsOfferedEveryCommit: sotw assignment
// clients of a few names each, served by a cache that wakes their watches
// by name, are sent exactly what a cache offering every commit to every
// watch sends them, response by response, through random changes,
// deletions, re-creations and subscription changes.
func TestSotwNarrowWatchesAnswerAsOfferedEveryCommit(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { sotwNarrowAgainstBroad(t, seed) })
	}
}

func sotwNarrowAgainstBroad(t *testing.T, seed uint64) {
	const services, clients, steps = 40, 24, 400
	rng := rand.New(rand.NewPCG(seed, 47))
	name := func(i int) string { return fmt.Sprintf("svc-%02d", i) }
	caches := [2]*xds.Cache{
		xds.NewCache(xds.WithTypes(xds.EndpointType)),                          // by name
		xds.NewCache(xds.WithTypes(xds.EndpointType), xds.WithNarrowNames(-1)), // every commit to every watch
	}
	apply := func(ch store.Change) {
		for _, c := range caches {
			if err := c.Apply(ch); err != nil {
				t.Fatal(err)
			}
		}
	}
	var all []store.Resource
	for i := range services {
		all = append(all, assignmentWithEndpoints(name(i), 1+i%3))
	}
	apply(store.Change{TypeURL: xds.EndpointType, Upserts: all})
	for _, c := range caches {
		c.MarkReady()
	}
	type client struct {
		d              [2]*xds.SotwDriver
		cancel         [2]func()
		names          []string
		version, nonce string
	}
	pick := func() []string {
		switch rng.IntN(8) {
		case 0:
			return nil // the wildcard (a first request), else nothing
		case 1:
			return []string{"svc-missing"}
		}
		var names []string
		for range 1 + rng.IntN(4) {
			names = append(names, name(rng.IntN(services)))
		}
		return names
	}
	// request sends c's next request (names; the version and nonce of the
	// last response taken) to both caches.
	request := func(c *client) {
		for k := range caches {
			if c.cancel[k] != nil {
				c.cancel[k]()
			}
			cancel, err := c.d[k].Watch(&discovery.DiscoveryRequest{TypeUrl: xds.EndpointType, ResourceNames: c.names, VersionInfo: c.version, ResponseNonce: c.nonce})
			if err != nil {
				t.Fatal(err)
			}
			c.cancel[k] = cancel
		}
	}
	// take takes c's response from both caches; they must be the same.
	take := func(step int, c *client) *discovery.DiscoveryResponse {
		a, b := c.d[0].Take(), c.d[1].Take()
		if !proto.Equal(a, b) {
			t.Fatalf("step %d, client of %q: by name sent\n%v\noffered every commit sent\n%v", step, c.names, a, b)
		}
		return a
	}
	cls := make([]*client, clients)
	for i := range cls {
		c := &client{names: pick()}
		for k := range caches {
			c.d[k] = xds.NewSotwDriver(caches[k], 1)
		}
		request(c)
		cls[i] = c
	}
	gone := map[int]bool{}
	for step := range steps {
		switch r := rng.IntN(10); {
		case r < 4: // a change, a deletion or a re-creation
			i := rng.IntN(services)
			if gone[i] || rng.IntN(6) > 0 {
				delete(gone, i)
				apply(store.Change{TypeURL: xds.EndpointType, Upserts: []store.Resource{assignmentWithEndpoints(name(i), 1+rng.IntN(5))}})
			} else {
				gone[i] = true
				apply(store.Change{TypeURL: xds.EndpointType, Deletes: []string{name(i)}})
			}
		case r < 5: // several at once
			var ups []store.Resource
			for range 2 + rng.IntN(6) {
				i := rng.IntN(services)
				delete(gone, i)
				ups = append(ups, assignmentWithEndpoints(name(i), 1+rng.IntN(5)))
			}
			apply(store.Change{TypeURL: xds.EndpointType, Upserts: ups})
		default: // a client takes its response, if any, and answers it
			c := cls[rng.IntN(clients)]
			if resp := take(step, c); resp != nil {
				c.version, c.nonce = resp.GetVersionInfo(), resp.GetNonce()
			}
			if rng.IntN(5) == 0 {
				c.names = pick()
			}
			request(c)
		}
	}
	for _, c := range cls {
		take(steps, c)
	}
}
