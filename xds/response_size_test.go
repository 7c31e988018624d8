package xds_test

import (
	"fmt"
	"slices"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"

	"github.com/xdsbridge/xdsbridge/xds"
	"github.com/xdsbridge/xdsbridge/xds/store"
)

// assignmentWithEndpoints is an assignment of n endpoints.
func assignmentWithEndpoints(name string, n int) store.Resource {
	la := &endpoint.ClusterLoadAssignment{ClusterName: name}
	var lle endpoint.LocalityLbEndpoints
	for i := range n {
		lle.LbEndpoints = append(lle.LbEndpoints, &endpoint.LbEndpoint{HostIdentifier: &endpoint.LbEndpoint_Endpoint{Endpoint: &endpoint.Endpoint{
			Address: &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
				Address: fmt.Sprintf("10.%d.%d.%d", i/65536, i/256%256, i%256), PortSpecifier: &core.SocketAddress_PortValue{PortValue: 8080}}}}}}})
	}
	la.Endpoints = []*endpoint.LocalityLbEndpoints{&lle}
	return store.Resource{Name: name, Msg: la}
}

// TestDeltaPartsFitTheBound: every part of a delta EDS sync that
// carries more than one resource is at most the bound once encoded (with
// its nonce); a resource larger than the bound goes alone; every part
// carries something; together they carry every assignment once.
func TestDeltaPartsFitTheBound(t *testing.T) {
	c := xds.NewCache(xds.WithTypes(xds.EndpointType))
	var all []store.Resource
	var names []string
	for i := range 2000 {
		n := fmt.Sprintf("service-%05d", i)
		eps := 1 + i%7
		if i == 777 {
			eps = 3000 // ~70 kB
		}
		all = append(all, assignmentWithEndpoints(n, eps))
		names = append(names, n)
	}
	if err := c.Apply(store.Change{TypeURL: xds.EndpointType, Upserts: all}); err != nil {
		t.Fatal(err)
	}
	c.MarkReady()
	s := newSim(t, c, xds.EndpointType)
	s.req(names, nil, nil)
	seen := map[string]int{}
	parts := 0
	for {
		r := s.take()
		if r == nil {
			break
		}
		parts++
		if len(r.Resources) == 0 {
			if len(seen) != len(names) {
				t.Fatalf("part %d is empty with %d of %d sent", parts, len(seen), len(names))
			}
		}
		size := proto.Size(r)
		for _, res := range r.Resources {
			seen[res.Name]++
			if res.Name == "service-00777" && len(r.Resources) != 1 {
				t.Fatalf("the large assignment went with %d others", len(r.Resources)-1)
			}
		}
		if len(r.Resources) > 1 && size > xds.DefaultMaxResponseBytes {
			t.Fatalf("part %d: %d resources, %d bytes encoded, bound %d", parts, len(r.Resources), size, xds.DefaultMaxResponseBytes)
		}
		s.req(nil, nil, nil)
		if parts > 1000 {
			t.Fatal("no end")
		}
	}
	for _, n := range names {
		if seen[n] != 1 {
			t.Fatalf("%s sent %d times", n, seen[n])
		}
	}
	t.Logf("%d parts", parts)
}

// TestSotwEDSPartsFitTheBound: the same for a sotw EDS client (its
// parts follow each ACK), whose bound grows with the names it lists
// (xds.SotwPartBytes).
func TestSotwEDSPartsFitTheBound(t *testing.T) {
	c := xds.NewCache(xds.WithTypes(xds.EndpointType))
	var all []store.Resource
	var names []string
	listed := 0
	for i := range 2000 {
		n := fmt.Sprintf("service-%05d", i)
		eps := 1 + i%7
		if i == 777 {
			eps = 20000 // over the bound
		}
		all = append(all, assignmentWithEndpoints(n, eps))
		names = append(names, n)
		listed += 2 + len(n)
	}
	bound := xds.SotwPartBytes(xds.DefaultMaxResponseBytes, listed)
	if bound <= xds.DefaultMaxResponseBytes || proto.Size(all[777].Msg) <= bound {
		t.Fatalf("bound %d: not above the cache's, or not below the large assignment's %d bytes", bound, proto.Size(all[777].Msg))
	}
	if err := c.Apply(store.Change{TypeURL: xds.EndpointType, Upserts: all}); err != nil {
		t.Fatal(err)
	}
	c.MarkReady()
	d := xds.NewSotwDriver(c, 1)
	seen := map[string]bool{}
	version, nonce := "", ""
	for parts := 1; ; parts++ {
		if parts > 1000 {
			t.Fatal("no end")
		}
		cancel, err := d.Watch(&discovery.DiscoveryRequest{TypeUrl: xds.EndpointType, ResourceNames: names, VersionInfo: version, ResponseNonce: nonce})
		if err != nil {
			t.Fatal(err)
		}
		dr := d.Take()
		if dr == nil {
			cancel()
			if len(seen) != len(names) {
				t.Fatalf("no part %d with %d of %d sent", parts, len(seen), len(names))
			}
			t.Logf("%d parts", parts-1)
			return
		}
		if len(dr.Resources) == 0 {
			t.Fatalf("part %d is empty", parts)
		}
		var got []string
		for _, a := range dr.Resources {
			var la endpoint.ClusterLoadAssignment
			if err := a.UnmarshalTo(&la); err != nil {
				t.Fatal(err)
			}
			got = append(got, la.ClusterName)
			seen[la.ClusterName] = true
		}
		if slices.Contains(got, "service-00777") && len(got) != 1 {
			t.Fatalf("the large assignment went with %d others", len(got)-1)
		}
		if size := proto.Size(dr); len(got) > 1 && size > bound {
			t.Fatalf("part %d: %d resources, %d bytes encoded, bound %d", parts, len(got), size, bound)
		}
		version, nonce = dr.VersionInfo, dr.Nonce
		cancel()
	}
}
