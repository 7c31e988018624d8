package xds

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/xdsbridge/xdsbridge/xds/store"
)

// deltaDriver drives one delta EDS stream through a cache as the delta
// server does (deltaSub, responses installed in order) and records what
// each response carries.
type deltaDriver struct {
	t      *testing.T
	c      *Cache
	ch     chan *deltaResponse
	sub    deltaSub
	first  bool
	cancel func()
	nonce  string
	sent   int
	log    []string
}

func newDeltaDriver(t *testing.T, c *Cache) *deltaDriver {
	return &deltaDriver{t: t, c: c, ch: make(chan *deltaResponse, 64), first: true}
}

func (d *deltaDriver) take() {
	for {
		select {
		case resp := <-d.ch:
			dr := resp.resp
			d.sent++
			dr.Nonce = fmt.Sprint(d.sent)
			d.nonce = dr.Nonce
			d.sub.held = resp.install(dr.Nonce)
			var b strings.Builder
			for _, res := range dr.Resources {
				fmt.Fprintf(&b, "%s@%s ", res.Name, res.Version)
			}
			fmt.Fprintf(&b, "removed %v", dr.RemovedResources)
			d.log = append(d.log, b.String())
		default:
			return
		}
	}
}

func (d *deltaDriver) request(subs, unsubs []string) {
	if d.cancel != nil {
		d.cancel()
	}
	req := &discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResponseNonce: d.nonce, ResourceNamesSubscribe: subs, ResourceNamesUnsubscribe: unsubs}
	key := streamKey{true, 1}
	d.c.noteRequest(req, key, EndpointType)
	if d.first {
		d.sub, d.first = newDeltaSub(subs, unsubs, nil, nil), false
	} else {
		d.sub.update(subs, unsubs)
	}
	var err error
	if d.cancel, err = d.c.watchDelta(req, d.sub, deltaQueue{ch: d.ch}); err != nil {
		d.t.Fatal(err)
	}
}

// TestDeltaPassSortedSubscriptionAnswersAsMap: a delta pass that tells
// the names subscribed with a walk of the subscription's sorted names
// (every pass, WithMinCursor 0) sends and removes what a pass looking
// each name up in the subscription's map sends (no pass does): names
// subscribed before they exist, deleted and created again, unsubscribed
// and subscribed again, under a wildcard and by name, and split responses.
func TestDeltaPassSortedSubscriptionAnswersAsMap(t *testing.T) {
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 17))
		universe := make([]string, 20+r.IntN(60))
		for i := range universe {
			universe[i] = fmt.Sprintf("c%03d", i)
		}
		maxBytes := 150 + r.IntN(1500)
		caches := []*Cache{
			NewCache(WithTypes(EndpointType), WithMaxResponseBytes(maxBytes), WithMinCursor(0)),
			NewCache(WithTypes(EndpointType), WithMaxResponseBytes(maxBytes), WithMinCursor(1<<30)),
		}
		drivers := []*deltaDriver{newDeltaDriver(t, caches[0]), newDeltaDriver(t, caches[1])}
		version := 0
		commit := func() {
			version++
			ch := store.Change{TypeURL: EndpointType}
			seen := map[string]bool{}
			for range 1 + r.IntN(10) {
				n := universe[r.IntN(len(universe))]
				if seen[n] {
					continue
				}
				seen[n] = true
				if r.IntN(4) == 0 {
					ch.Deletes = append(ch.Deletes, n)
				} else {
					ch.Upserts = append(ch.Upserts, store.Resource{Name: n, Msg: &endpoint.ClusterLoadAssignment{ClusterName: fmt.Sprintf("%s-%d", n, version)}})
				}
			}
			for _, c := range caches {
				if err := c.Apply(ch); err != nil {
					t.Fatal(err)
				}
			}
		}
		pick := func(k int) []string {
			var out []string
			for range k {
				out = append(out, universe[r.IntN(len(universe))])
			}
			return out
		}
		commit()
		for _, c := range caches {
			c.MarkReady()
		}
		all := func(f func(d *deltaDriver)) {
			for _, d := range drivers {
				f(d)
			}
		}
		first := pick(1 + r.IntN(30))
		all(func(d *deltaDriver) { d.request(first, nil) })
		var resub []string // unsubscribed by the last request, subscribed again by the next
		for step := range 60 {
			var subs, unsubs []string
			switch op := r.IntN(10); {
			case resub != nil:
				subs, resub = resub, nil
			case op < 3:
				commit()
				continue
			case op < 6:
				// The ACK.
			case op < 7:
				if drivers[0].sub.IsWildcard() {
					unsubs = append(unsubs, "*")
				} else {
					subs = append(subs, "*")
				}
			case op < 8:
				// Unsubscribed, then subscribed again by the next request
				// (and, within this one, subscribed and unsubscribed).
				unsubs = pick(1 + r.IntN(4))
				resub = slices.Clone(unsubs)
				subs = unsubs[:1]
			default:
				subs, unsubs = pick(1+r.IntN(12)), pick(r.IntN(5))
			}
			all(func(d *deltaDriver) { d.take(); d.request(subs, unsubs) })
			all(func(d *deltaDriver) { d.take() })
			if a, b := drivers[0].log, drivers[1].log; !slices.Equal(a, b) {
				t.Fatalf("seed %d step %d: responses differ:\nsorted walk: %q\nmap:         %q", seed, step, a, b)
			}
		}
	}
}
