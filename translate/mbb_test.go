package translate

import (
	"testing"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"
)

// TestMakeBeforeBreakRouteGRPCAccepts: the interim route configuration
// (xds/mbb.go) passes grpc-go's RDS rules (grpcRDSCheck), keeps every
// route of the original in place, and adds to each virtual host one last
// route that never matches and names the added clusters in equal shares.
func TestMakeBeforeBreakRouteGRPCAccepts(t *testing.T) {
	orig := RouteConfig("s")
	before := proto.Clone(orig)
	rc := MakeBeforeBreakRoute(orig, []string{"s/v1", "other"})
	if !proto.Equal(orig, before) {
		t.Fatal("the original was modified")
	}
	if err := grpcRDSCheck(rc); err != nil {
		t.Fatalf("grpc-go would refuse the interim: %v", err)
	}
	for i, vh := range rc.GetVirtualHosts() {
		ov := orig.GetVirtualHosts()[i]
		if got, want := len(vh.GetRoutes()), len(ov.GetRoutes())+1; got != want {
			t.Fatalf("virtual host %q: %d routes; want %d", vh.GetName(), got, want)
		}
		for j, r := range ov.GetRoutes() {
			if !proto.Equal(r, vh.GetRoutes()[j]) {
				t.Fatalf("virtual host %q route %d changed", vh.GetName(), j)
			}
		}
		last := vh.GetRoutes()[len(vh.GetRoutes())-1]
		f := last.GetMatch().GetRuntimeFraction()
		if f.GetDefaultValue().GetNumerator() != 0 || f.GetRuntimeKey() != MakeBeforeBreakRuntimeKey || last.GetMatch().GetPrefix() != "/" {
			t.Fatalf("added route matches: %v", last.GetMatch())
		}
		var names []string
		for _, c := range last.GetRoute().GetWeightedClusters().GetClusters() {
			if c.GetWeight().GetValue() != 1 {
				t.Fatalf("weight %d of %s; want equal shares", c.GetWeight().GetValue(), c.GetName())
			}
			names = append(names, c.GetName())
		}
		if len(names) != 2 || names[0] != "s/v1" || names[1] != "other" {
			t.Fatalf("added route's clusters %v", names)
		}
	}
	// The check can fail on the same shape: zero weights are refused.
	bad := proto.Clone(rc).(*route.RouteConfiguration)
	for _, vh := range bad.GetVirtualHosts() {
		for _, c := range vh.GetRoutes()[len(vh.GetRoutes())-1].GetRoute().GetWeightedClusters().GetClusters() {
			c.Weight = nil
		}
	}
	if grpcRDSCheck(bad) == nil {
		t.Fatal("grpcRDSCheck accepted zero weights")
	}
}
