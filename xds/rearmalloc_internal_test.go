package xds

import (
	"runtime"
	"strconv"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
)

// TestRearmDeltaAnsweringACKAllocations: the ACK of a response while a
// change came re-arms the watch and answers it with the change; the pass
// that computes the answer allocates its response and the state it
// installs, and nothing for how it finds the names and their resources
// (no closures).
func TestRearmDeltaAnsweringACKAllocations(t *testing.T) {
	const maxAllocs = 3
	c := NewCache(WithTypes(EndpointType))
	c.MarkReady()
	setAssignmentA(t, c, 1)
	ch := make(chan *deltaResponse, 4)
	sub := newDeltaSub([]string{"a"}, nil, nil, nil)
	first := &discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResourceNamesSubscribe: []string{"a"}}
	w, _, err := c.newDeltaWatch(streamKey{true, 1}, first, sub, ch)
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	var ms runtime.MemStats
	var most uint64
	for i := range 50 {
		nonce := strconv.Itoa(i + 1)
		r.resp.Nonce = nonce
		sub.held = r.install(nonce)
		setAssignmentA(t, c, i+2) // while the response is unanswered
		ack := &discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResponseNonce: nonce}
		runtime.ReadMemStats(&ms)
		before := ms.Mallocs
		w, _, err = c.rearmDelta(w, ack, sub)
		runtime.ReadMemStats(&ms)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case r = <-ch:
		default:
			t.Fatalf("ACK %d: not answered with the change", i+1)
		}
		if i >= 5 { // past the first responses' growth
			most = max(most, ms.Mallocs-before)
		}
	}
	if most > maxAllocs {
		t.Errorf("an ACK answered with one change: %d allocations, want at most %d", most, maxAllocs)
	}
	t.Logf("%d allocations", most)
}
