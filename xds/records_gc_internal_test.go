package xds

import (
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"
	"weak"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
)

// The state a response installed is garbage once the stream holds a later
// one and nothing reads it, also on a stream whose client always sends its
// next subscription before it answers the last response (each response is
// installed while the one before is unanswered): a response's record,
// kept while it is unanswered, does not keep the state that response
// installed, nor through it the records of the responses before.
func TestDeltaStateCollectedWhileResponsesOverlap(t *testing.T) {
	const n = 64
	c := NewCache()
	c.MarkReady()
	for i := range n {
		setAssignment(t, c, fmt.Sprintf("s%03d", i), 1)
	}
	h := startDeltaHandler(t, c)
	sub := func(i int) {
		h.send(&discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResourceNamesSubscribe: []string{fmt.Sprintf("s%03d", i)}})
	}
	// The fake stream keeps the responses it sent, which hold their
	// state: it keeps their nonces only.
	sentN := func(k int) []*discovery.DeltaDiscoveryResponse {
		h.sent(k)
		h.str.mu.Lock()
		for j, r := range h.str.sent {
			h.str.sent[j] = &discovery.DeltaDiscoveryResponse{Nonce: r.Nonce}
		}
		got := slices.Clone(h.str.sent)
		h.str.mu.Unlock()
		return got
	}
	// Each response installed while the one before is unanswered, which
	// is answered right after.
	sub(0)
	sent := sentN(1)
	var early weak.Pointer[deltaHeld]
	for i := 1; i < n; i++ {
		sub(i)
		sent = sentN(i + 1)
		h.send(&discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResponseNonce: sent[i-1].Nonce})
		if i == 2 {
			// The state the watch of that answer starts from: response
			// 2's.
			for start := time.Now(); early.Value() == nil; time.Sleep(time.Millisecond) {
				if time.Since(start) > 5*time.Second {
					t.Fatal("no watch open after the answer")
				}
				c.lock()
				for w := range c.types[EndpointType].watches {
					early = weak.Make(w.known)
				}
				c.unlock()
			}
		}
	}
	h.send(&discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResponseNonce: sent[n-1].Nonce})
	for range 3 {
		runtime.GC()
	}
	if early.Value() != nil {
		t.Fatalf("the state of response 2 is still reachable after %d later responses", n-2)
	}
}
