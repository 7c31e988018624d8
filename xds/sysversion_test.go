package xds_test

import (
	"strconv"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/xdsbridge/xdsbridge/translate"
	"github.com/xdsbridge/xdsbridge/xds"
)

// TestDeltaSystemVersionFollowsCommits: the system_version_info of each
// delta response is the type's generation when it was computed, a newer
// one after each commit, for every client, though it is formatted once
// per generation.
func TestDeltaSystemVersionFollowsCommits(t *testing.T) {
	c := xds.NewCache()
	all := []translate.Resources{benchResources(0, 2, 80), benchResources(1, 2, 80)}
	if err := c.PublishServices(all, nil); err != nil {
		t.Fatal(err)
	}
	c.MarkReady()
	names := []string{all[0].Cluster.GetName(), all[1].Cluster.GetName()}
	var clients [2]*xds.DeltaDriver
	for i := range clients {
		clients[i] = xds.NewDeltaDriver(c, 2)
		if _, err := clients[i].Watch(&discovery.DeltaDiscoveryRequest{TypeUrl: xds.EndpointType, ResourceNamesSubscribe: names}); err != nil {
			t.Fatal(err)
		}
	}
	version := func(d *xds.DeltaDriver) uint64 {
		t.Helper()
		r := d.Take()
		if r == nil {
			t.Fatal("no response")
		}
		v, err := strconv.ParseUint(r.GetSystemVersionInfo(), 10, 64)
		if err != nil {
			t.Fatalf("system_version_info %q: %v", r.GetSystemVersionInfo(), err)
		}
		if _, err := d.Watch(&discovery.DeltaDiscoveryRequest{TypeUrl: xds.EndpointType, ResponseNonce: r.GetNonce()}); err != nil {
			t.Fatal(err)
		}
		return v
	}
	last := [2]uint64{version(clients[0]), version(clients[1])}
	if last[0] != last[1] {
		t.Fatalf("first responses at versions %d and %d, want one generation", last[0], last[1])
	}
	for i := range 3 {
		if err := c.PublishServices([]translate.Resources{benchResources(i%2, 2, uint32(1000+i))}, nil); err != nil {
			t.Fatal(err)
		}
		for j, d := range clients {
			v := version(d)
			if v <= last[j] {
				t.Fatalf("change %d: client %d's response at version %d, after %d", i, j, v, last[j])
			}
			last[j] = v
		}
	}
}
