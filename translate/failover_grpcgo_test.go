package translate

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/xdsbridge/xdsbridge/policy"
	"github.com/xdsbridge/xdsbridge/sources"
)

// A service failing over to itself, or to a subset of its own, is
// published as grpc-go accepts it (it NACKs an assignment listing an
// address twice, and every call fails): calls through xds:///back reach
// back's host.
func TestFailoverDuplicateAddressGRPCGo(t *testing.T) {
	rig := startGRPCRig(t)
	host, port, err := net.SplitHostPort(rig.backend(t, "back"))
	if err != nil {
		t.Fatal(err)
	}
	var p uint32
	if _, err := fmt.Sscan(port, &p); err != nil {
		t.Fatal(err)
	}
	back := sources.Service{Name: "back", Endpoints: []sources.Endpoint{{Address: host, Port: p}}}
	all := policy.Subset{}
	for _, tc := range []struct {
		name string
		pol  *policy.Service
	}{
		{"self", &policy.Service{Failover: []policy.Target{{Service: "back"}}}},
		{"own-subset", &policy.Service{Subsets: map[string]policy.Subset{"all": all}, Failover: []policy.Target{{Subset: "all", Service: "back"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Options{Policy: tc.pol, Failover: []FailoverTarget{{Target: tc.pol.Failover[0], Service: &back, Policy: tc.pol}}}
			r := o.ServiceWithin(back, DefaultLimits())
			if r.Refused {
				t.Fatalf("refused: %v", r.Diagnostics)
			}
			res := map[resource.Type][]types.Resource{
				resource.ListenerType: {r.Listener},
				resource.RouteType:    {r.Route},
				resource.ClusterType:  {r.Cluster},
				resource.EndpointType: {r.Load},
			}
			for _, s := range r.Subsets {
				res[resource.ClusterType] = append(res[resource.ClusterType], s.Cluster)
				res[resource.EndpointType] = append(res[resource.EndpointType], s.Load)
			}
			snap, err := cache.NewSnapshot("v1", res)
			if err != nil {
				t.Fatal(err)
			}
			node := "failover-" + tc.name
			if err := rig.cache.SetSnapshot(context.Background(), node, snap); err != nil {
				t.Fatal(err)
			}
			conn := rig.dial(t, node, "back")
			c, err := rig.call(conn, "/x.Y/Call")
			if n := rig.nacksOf(node); len(n) > 0 {
				t.Fatalf("grpc-go NACKed: %s", strings.Join(n, "; "))
			}
			if err != nil || c != "back" {
				t.Fatalf("call reached %q, error %v; want back's host", c, err)
			}
		})
	}
}
