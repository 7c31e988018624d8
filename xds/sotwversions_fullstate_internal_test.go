package xds

import (
	"fmt"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/xdsbridge/xdsbridge/xds/store"
)

// TestSotwFullStateStateHoldsWhatChanged: a sotw CDS response
// (a type whose responses carry everything) after one cluster changed
// installs a state whose names changed since its base are that one
// cluster, not every cluster the response carries: otherwise the state
// holds each name twice (the base and over) and every response rebuilds a
// base of every name.
func TestSotwFullStateStateHoldsWhatChanged(t *testing.T) {
	const n = 200
	c := NewCache(WithTypes(ClusterType))
	res := func(name string, ver int) store.Resource {
		return store.Resource{Name: name, Msg: &cluster.Cluster{Name: name, AltStatName: fmt.Sprint(ver)}}
	}
	var ups []store.Resource
	for i := range n {
		ups = append(ups, res(fmt.Sprintf("c%03d", i), 0))
	}
	if err := c.Apply(store.Change{TypeURL: ClusterType, Upserts: ups}); err != nil {
		t.Fatal(err)
	}
	c.MarkReady()
	sub := newSotwSub(nil) // wildcard
	ch := make(chan *sotwResponse, 1)
	q := sotwQueue{ch: ch}
	if _, err := c.watchSotw(&discovery.DiscoveryRequest{TypeUrl: ClusterType}, sub, q); err != nil {
		t.Fatal(err)
	}
	held := (<-ch).next
	for round := range 3 {
		sub.held = held
		ack := &discovery.DiscoveryRequest{TypeUrl: ClusterType, VersionInfo: "x", ResponseNonce: fmt.Sprint(round + 1)}
		cancel, err := c.watchSotw(ack, sub, q)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Apply(store.Change{TypeURL: ClusterType, Upserts: []store.Resource{res("c007", round+1)}}); err != nil {
			t.Fatal(err)
		}
		r := <-ch
		cancel()
		if len(r.resp.Resources) != n {
			t.Fatalf("round %d: %d clusters sent", round, len(r.resp.Resources))
		}
		held = r.next
		if k := len(held.versions.over); k > 1 {
			t.Errorf("round %d: one cluster changed; the state has %d names changed since its base of %d", round, k, len(held.versions.base))
		}
	}
}
