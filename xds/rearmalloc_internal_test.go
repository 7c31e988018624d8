package xds

import (
	"runtime"
	"slices"
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
	// One commit since the response; two, whose names are gathered from
	// the change log in one new slice, sorted there.
	for commits, maxAllocs := range []uint64{1: 3, 2: 4} {
		if commits == 0 {
			continue
		}
		if n := answeringACKAllocations(t, commits); n > maxAllocs {
			t.Errorf("an ACK answered with the change of %d commits: %d allocations, want at most %d", commits, n, maxAllocs)
		}
	}
}

// answeringACKAllocations returns the allocations of an ACK's re-arm
// answered with the change of commits commits (the median of 50, past
// the first responses' growth: a rare one also grows a slice or a map).
func answeringACKAllocations(t *testing.T, commits int) uint64 {
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
	var counts []uint64
	v := 1
	for i := range 50 {
		nonce := strconv.Itoa(i + 1)
		r.resp.Nonce = nonce
		sub.held = r.install(nonce)
		for range commits { // while the response is unanswered
			v++
			setAssignmentA(t, c, v)
		}
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
		if i >= 5 {
			counts = append(counts, ms.Mallocs-before)
		}
	}
	slices.Sort(counts)
	return counts[len(counts)/2]
}
