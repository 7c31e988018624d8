package xds

import (
	"runtime"
	"slices"
	"strconv"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/xdsbridge/xdsbridge/xds/store"
)

// TestRearmDeltaAnsweringACKAllocations: the ACK of a response while a
// change came re-arms the watch and answers it with the change in three
// allocations (the response, the state it installs, the record of what it
// carries), one more for the names of several commits: nothing for how
// the pass finds the names and their resources or tells an assignment
// held back for its cluster (values, not closures), for the names of the
// one commit since (the change log's own), or for the cancel function of
// a watch answered at once.
func TestRearmDeltaAnsweringACKAllocations(t *testing.T) {
	// One commit since the response; two, whose names are gathered from
	// the change log in one new slice, sorted there; one, on a stream
	// subscribed to clusters too (the response holds back the
	// assignments of clusters not sent: clusterHolder).
	for _, tc := range []struct {
		commits   int
		clusters  bool
		maxAllocs uint64
	}{{1, false, 3}, {2, false, 4}, {1, true, 3}} {
		if n := answeringACKAllocations(t, tc.commits, tc.clusters); n > tc.maxAllocs {
			t.Errorf("an ACK answered with the change of %d commits (clusters subscribed: %v): %d allocations, want at most %d", tc.commits, tc.clusters, n, tc.maxAllocs)
		}
	}
}

// answeringACKAllocations returns the allocations of an ACK's re-arm
// answered with the change of commits commits (the median of 50, past
// the first responses' growth: a rare one also grows a slice or a map),
// on a stream subscribed to every cluster first if clusters.
func answeringACKAllocations(t *testing.T, commits int, clusters bool) uint64 {
	c := NewCache(WithTypes(ClusterType, EndpointType))
	c.MarkReady()
	setAssignmentA(t, c, 1)
	ch := make(chan *deltaResponse, 4)
	if clusters {
		if err := c.Apply(store.Change{TypeURL: ClusterType, Upserts: []store.Resource{{Name: "a", Msg: &cluster.Cluster{Name: "a"}}}}); err != nil {
			t.Fatal(err)
		}
		sub := newDeltaSub(nil, nil, nil, nil)
		if _, _, err := c.newDeltaWatch(streamKey{true, 1}, &discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType}, sub, deltaQueue{ch: ch}); err != nil {
			t.Fatal(err)
		}
		r := <-ch
		r.resp.Nonce = "c1"
		r.install("c1")
		if c.streams[streamKey{true, 1}].cds == nil {
			t.Fatal("the stream's clusters are not followed")
		}
	}
	w, sub, r := watchAssignmentA(t, c, ch)
	var err error
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
