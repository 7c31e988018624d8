package xds

import (
	"fmt"
	"math/rand/v2"
	"testing"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/xdsbridge/xdsbridge/xds/store"
)

// TestSentAssignmentsThroughTheCache drives a delta EDS stream through
// the cache as the delta server does (deltaSub, responses installed in
// order, commits crossing requests so that a queued response is in flight
// when the next watch is made, "*" toggles; half the seeds a client that
// may read some names only) and checks,
// after every step, the invariant the sent record relies on (set ∪ extra
// within the subscription last kept to) and that every name it says was
// sent was in a response since the client last subscribed to it.
func TestSentAssignmentsThroughTheCache(t *testing.T) {
	for seed := range uint64(300) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 11))
			universe := make([]string, 20+r.IntN(60))
			for i := range universe {
				universe[i] = fmt.Sprintf("c%03d", i)
			}
			c := NewCache(WithTypes(EndpointType), WithMaxResponseBytes(150+r.IntN(1500)))
			version := 0
			commit := func() {
				version++
				var ch store.Change
				ch.TypeURL = EndpointType
				for range 1 + r.IntN(10) {
					n := universe[r.IntN(len(universe))]
					if r.IntN(4) == 0 {
						ch.Deletes = append(ch.Deletes, n)
					} else {
						ch.Upserts = append(ch.Upserts, store.Resource{Name: n, Msg: &endpoint.ClusterLoadAssignment{ClusterName: fmt.Sprintf("%s-%d", n, version)}})
					}
				}
				seen := map[string]bool{}
				var ups []store.Resource
				for _, u := range ch.Upserts {
					if !seen[u.Name] {
						seen[u.Name] = true
						ups = append(ups, u)
					}
				}
				ch.Upserts = ups
				var dels []string
				for _, d := range ch.Deletes {
					if !seen[d] {
						seen[d] = true
						dels = append(dels, d)
					}
				}
				ch.Deletes = dels
				if err := c.Apply(ch); err != nil {
					t.Fatal(err)
				}
			}
			commit()
			commit()
			c.MarkReady()

			key := streamKey{true, 1}
			if seed%2 == 1 {
				// A restricted client: it may read names ending in 0-4.
				c.openStream(key, &visibility{patterns: []string{"*[0-4]"}})
			}
			ch := make(chan *deltaResponse, 64)
			var sub deltaSub
			first := true
			var cancel func()
			nonce, sent := "", 0
			// sentSince: names in a response taken since the client last
			// subscribed to them (by name; a wildcard keeps what it had).
			sentSince := map[string]bool{}
			take := func() {
				for {
					select {
					case resp := <-ch:
						dr := resp.resp
						sent++
						dr.Nonce = fmt.Sprint(sent)
						nonce = dr.Nonce
						sub.held = resp.install(dr.Nonce)
						for _, res := range dr.Resources {
							if seed%2 == 1 && res.Name[len(res.Name)-1] > '4' {
								t.Fatalf("%s sent to a client that may not read it", res.Name)
							}
							sentSince[res.Name] = true
						}
						for _, n := range dr.RemovedResources {
							delete(sentSince, n)
						}
					default:
						return
					}
				}
			}
			request := func(subs, unsubs []string) {
				if cancel != nil {
					cancel()
				}
				req := &discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResponseNonce: nonce, ResourceNamesSubscribe: subs, ResourceNamesUnsubscribe: unsubs}
				c.noteRequest(req, key, EndpointType)
				if first {
					sub, first = newDeltaSub(subs, unsubs, nil, nil), false
				} else {
					sub.update(subs, unsubs)
				}
				if !sub.IsWildcard() {
					for n := range sentSince {
						if !sub.names.has(n) {
							delete(sentSince, n)
						}
					}
				}
				var err error
				cancel, err = c.watchDelta(req, sub, deltaQueue{ch: ch})
				if err != nil {
					t.Fatal(err)
				}
			}
			pick := func(k int) []string {
				var out []string
				for range k {
					out = append(out, universe[r.IntN(len(universe))])
				}
				return out
			}
			check := func(step int) {
				c.mu.Lock()
				defer c.mu.Unlock()
				st := c.streams[key]
				if st == nil {
					return
				}
				s := &st.edsSent
				if s.within != nil && s.set != nil {
					for n := range s.set.m {
						if !s.within.has(n) {
							t.Fatalf("step %d: %s in the set, outside the subscription kept to", step, n)
						}
					}
					for n := range s.extra.all() {
						if !s.within.has(n) {
							t.Fatalf("step %d: %s in the overlay, outside the subscription kept to", step, n)
						}
					}
				}
				for _, n := range universe {
					if s.has(n) && !sentSince[n] {
						t.Fatalf("step %d: %s recorded as sent; the client was not sent it since it subscribed", step, n)
					}
				}
			}

			request(pick(1+r.IntN(30)), nil)
			for step := range 60 {
				switch op := r.IntN(10); {
				case op < 3:
					commit()
				case op < 5: // a commit crossing the next request
					commit()
					request(nil, nil)
				case op < 7:
					take()
					request(nil, nil) // the ACK
				case op < 8:
					take()
					var subs, unsubs []string
					if r.IntN(4) == 0 {
						if sub.IsWildcard() {
							unsubs = append(unsubs, "*")
						} else {
							subs = append(subs, "*")
						}
					}
					request(append(subs, pick(r.IntN(8))...), append(unsubs, pick(r.IntN(8))...))
				default:
					take()
					request(pick(1+r.IntN(5)), pick(r.IntN(5)))
				}
				take() // what is queued was sent (the server sends before it reads the next request)
				check(step)
			}
		})
	}
}
