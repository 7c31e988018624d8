package sources

import (
	"slices"
	"strings"
	"testing"
)

func testEndpoint(addr string, port uint32, prio uint32, zone string, weight uint32) Endpoint {
	return Endpoint{Address: addr, Port: port, Priority: prio, Locality: Locality{Zone: zone}, Weight: weight}
}

// Normalize is the one sort and de-duplication of a host list: canonical
// spellings, the first of a host in input order kept, sorted by priority,
// locality, address and port; CheckNormal accepts what it returns and
// names what departs from it.
func TestNormalize(t *testing.T) {
	in := []Endpoint{
		testEndpoint("10.0.0.3", 80, 1, "", 1),
		testEndpoint("10.0.0.2", 80, 0, "b", 2),
		testEndpoint("::ffff:10.0.0.1", 80, 0, "b", 3), // 10.0.0.1
		testEndpoint("2001:DB8:0::1", 443, 0, "a", 4),
		testEndpoint("10.0.0.1", 80, 0, "a", 5), // a second spelling: dropped, the first kept
		testEndpoint("10.0.0.2", 81, 0, "b", 6), // another port: kept
		testEndpoint("10.0.0.3", 80, 0, "", 7),  // same host, lower priority, later: dropped
		testEndpoint("2001:db8::1", 443, 2, "", 8),
		testEndpoint("not-an-ip", 80, 0, "", 9), // left as it is, for validation to refuse
	}
	if CheckNormal(in) == nil {
		t.Fatal("CheckNormal accepts an unsorted list with duplicates")
	}
	got := Normalize(slices.Clone(in))
	var weights []uint32
	for _, e := range got {
		weights = append(weights, e.Weight)
	}
	// Priority 0: locality "" (not-an-ip), "a" (2001:db8::1), "b" (10.0.0.1,
	// 10.0.0.2:80, 10.0.0.2:81); priority 1: 10.0.0.3.
	if want := []uint32{9, 4, 3, 2, 6, 1}; !slices.Equal(weights, want) {
		t.Fatalf("Normalize kept weights %v, want %v: %+v", weights, want, got)
	}
	if got[2].Address != "10.0.0.1" || got[1].Address != "2001:db8::1" {
		t.Errorf("addresses not canonical: %q %q", got[2].Address, got[1].Address)
	}
	if err := CheckNormal(got); err != nil {
		t.Errorf("CheckNormal(Normalize(x)) = %v", err)
	}
	if again := Normalize(slices.Clone(got)); !slices.EqualFunc(again, got, func(a, b Endpoint) bool { return a.Key() == b.Key() && a.Weight == b.Weight }) {
		t.Errorf("Normalize is not idempotent: %+v", again)
	}
	for _, tc := range []struct {
		eps  []Endpoint
		want string
	}{
		{[]Endpoint{testEndpoint("10.0.0.2", 80, 0, "", 0), testEndpoint("10.0.0.1", 80, 0, "", 0)}, "endpoints[1]: 10.0.0.1:80 is out of order"},
		{[]Endpoint{testEndpoint("10.0.0.1", 80, 0, "", 0), testEndpoint("10.0.0.1", 80, 1, "", 0)}, "endpoints[1]: 10.0.0.1:80 is listed twice"},
		{[]Endpoint{testEndpoint("::FFFF:10.0.0.1", 80, 0, "", 0)}, `endpoints[0]: address "::FFFF:10.0.0.1" is not in its canonical form "10.0.0.1"`},
	} {
		if err := CheckNormal(tc.eps); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckNormal(%+v) = %v, want %q", tc.eps, err, tc.want)
		}
	}
	if Normalize(nil) != nil || CheckNormal(nil) != nil {
		t.Error("nil list")
	}
}
