package xds_test

import (
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/xdsbridge/xdsbridge/xds"
	"github.com/xdsbridge/xdsbridge/xds/store"
)

func rcl(name string, v int) store.Resource {
	return store.Resource{Name: name, Msg: &cluster.Cluster{Name: name, LbPolicy: cluster.Cluster_LbPolicy(v)}}
}

func rla(name string, v int) store.Resource {
	return store.Resource{Name: name, Msg: &endpoint.ClusterLoadAssignment{ClusterName: name,
		Endpoints: []*endpoint.LocalityLbEndpoints{{Priority: uint32(v)}}},
		DependsOn: &store.Dep{TypeURL: xds.ClusterType, Name: name}}
}

func (h *harness) apply(chs ...store.Change) {
	h.t.Helper()
	if err := h.cache.Apply(chs...); err != nil {
		h.t.Fatal(err)
	}
}

// TestHeldBackAssignmentSurvivesTheNextRequest: an assignment held back
// until its cluster is sent is not lost when another EDS request replaces
// the watch that held it (found by review: the cluster then waited out
// Envoy's initial_fetch_timeout).
func TestHeldBackAssignmentSurvivesTheNextRequest(t *testing.T) {
	h := newHarness(t, true)
	h.apply(store.Change{TypeURL: cds, Upserts: []store.Resource{rcl("A", 0), rcl("X", 0)}},
		store.Change{TypeURL: eds, Upserts: []store.Resource{rla("A", 0), rla("X", 0)}})
	c := h.delta("n")
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: cds})
	r := c.recv()
	eq(t, "cds", []string{"A", "X"}, names(r))
	c.ack(r)
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: []string{"A"}})
	r = c.recv()
	eq(t, "eds", []string{"A"}, names(r))
	c.ack(r)
	h.waitWatches(1, cds, eds)

	h.apply(store.Change{TypeURL: cds, Upserts: []store.Resource{rcl("Y", 0)}})
	c1 := c.recv() // CDS Y, not acked yet
	eq(t, "c1", []string{"Y"}, names(c1))
	h.apply(store.Change{TypeURL: cds, Upserts: []store.Resource{rcl("X", 1)}}) // waits for c1's ACK
	h.apply(store.Change{TypeURL: eds, Upserts: []store.Resource{rla("A", 1)}})
	e1 := c.recv()
	eq(t, "e1", []string{"A"}, names(e1))
	// As Envoy: subscribes X (no nonce), then ACKs e1, then ACKs c1.
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: []string{"X"}})
	time.Sleep(100 * time.Millisecond)
	c.ack(e1)
	time.Sleep(100 * time.Millisecond)
	c.ack(c1)
	var order []string
	for {
		var r *discovery.DeltaDiscoveryResponse
		select {
		case r = <-c.resp:
		case <-time.After(500 * time.Millisecond):
		}
		if r == nil {
			break
		}
		for _, n := range names(r) {
			order = append(order, map[string]string{cds: "cds", eds: "eds"}[r.TypeUrl]+":"+n)
		}
		c.ack(r)
	}
	eq(t, "cluster X, then its assignment", []string{"cds:X", "eds:X"}, order)
}
