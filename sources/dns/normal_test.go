package dns

import (
	"net/netip"
	"testing"

	"github.com/xdsbridge/xdsbridge/sources"
)

// A STRICT_DNS service's endpoints are in normal form (sources.Normalize):
// a host two of its names resolve to is published once (the first name's),
// and the answers' order (DNS servers rotate them) does not show.
func TestEndpointsNormalForm(t *testing.T) {
	ha := func(ip string, port uint32, host string) hostAddr {
		return hostAddr{IP: netip.MustParseAddr(ip), Port: port, Hostname: host}
	}
	svc := &service{targets: []*target{
		{answer: []hostAddr{ha("10.0.0.3", 80, "a.example"), ha("10.0.0.1", 80, "a.example"), ha("2001:db8::1", 80, "a.example")}},
		{answer: []hostAddr{ha("10.0.0.2", 80, "b.example"), ha("10.0.0.1", 80, "b.example")}},
	}}
	eps := svc.endpoints()
	if err := sources.CheckNormal(eps); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range eps {
		got = append(got, e.Key().String()+" "+e.Hostname)
	}
	t.Logf("endpoints: %v", got)
	want := []string{"10.0.0.1:80 a.example", "10.0.0.2:80 b.example", "10.0.0.3:80 a.example", "[2001:db8::1]:80 a.example"}
	if len(got) != len(want) {
		t.Fatalf("endpoints %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("endpoints %v, want %v", got, want)
		}
	}
}
