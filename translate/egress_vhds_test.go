package translate

import (
	"slices"
	"testing"

	ondemand "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/on_demand/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
)

// TestEgressVHDSSplit: over VHDS, delta clients get the table's name
// with no virtual host and vhds over ADS, and each service's virtual host
// as a resource named "<table>/<service>" with its domains and routes and
// the on-demand filter's on-demand CDS over ADS; the catch-all is not
// one of them, and the table is left as it was.
func TestEgressVHDSSplit(t *testing.T) {
	e := Egress{VHDS: true}.WithDefaults()
	rc, _ := e.RouteTable([]EgressService{{Name: "api"}, {Name: "web"}})
	before := proto.Clone(rc)
	stub, hosts, err := e.VHDSSplit(rc)
	if err != nil {
		t.Fatal(err)
	}
	if stub.GetName() != DefaultEgressName || len(stub.GetVirtualHosts()) != 0 || stub.GetVhds().GetConfigSource().GetAds() == nil {
		t.Fatalf("stub %v: want %s, no virtual host, vhds over ADS", stub, DefaultEgressName)
	}
	var names []string
	for i, vh := range hosts {
		names = append(names, vh.GetName())
		if !slices.Equal(vh.GetDomains(), rc.VirtualHosts[i].GetDomains()) || !proto.Equal(vh.GetRoutes()[0], rc.VirtualHosts[i].GetRoutes()[0]) {
			t.Errorf("%s: domains %v routes %v; want the table's", vh.GetName(), vh.GetDomains(), vh.GetRoutes())
		}
		var pr ondemand.PerRouteConfig
		if err := vh.GetTypedPerFilterConfig()[OnDemandFilter].UnmarshalTo(&pr); err != nil || pr.GetOdcds().GetSource().GetAds() == nil {
			t.Errorf("%s: on-demand per-route config %v (%v); want on-demand CDS over ADS", vh.GetName(), &pr, err)
		}
	}
	if want := []string{DefaultEgressName + "/api", DefaultEgressName + "/web"}; !slices.Equal(names, want) {
		t.Fatalf("virtual hosts %v, want %v", names, want)
	}
	if !proto.Equal(rc, before) {
		t.Fatal("VHDSSplit modified the table")
	}
}

// TestEgressVHDSListener: with VHDS the egress listener's connection
// manager has the on-demand filter before the router (without: the
// router alone), and a fallback is refused.
func TestEgressVHDSListener(t *testing.T) {
	for _, vhds := range []bool{false, true} {
		e := Egress{VHDS: vhds, Listener: &EgressListener{Port: 10000}}.WithDefaults()
		l, err := e.EgressListener()
		if err != nil {
			t.Fatal(err)
		}
		var m hcm.HttpConnectionManager
		if err := l.GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(&m); err != nil {
			t.Fatal(err)
		}
		var filters []string
		for _, f := range m.GetHttpFilters() {
			filters = append(filters, f.GetName())
		}
		want := []string{"envoy.filters.http.router"}
		if vhds {
			want = append([]string{OnDemandFilter}, want...)
		}
		if !slices.Equal(filters, want) {
			t.Errorf("vhds %v: HTTP filters %v, want %v", vhds, filters, want)
		}
	}
	if err := (Egress{VHDS: true, Fallback: "other"}.WithDefaults()).Check(); err == nil {
		t.Error("vhds with a fallback: no error")
	}
}
