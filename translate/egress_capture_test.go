package translate

import (
	"strings"
	"testing"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/xdsbridge/xdsbridge/policy"
)

// egressCaptureServices are api, reached by name, and evil, whose policy
// domains Envoy may match, for a Host with a port, ahead of api's own
// NAME:* (exact hosts, then suffix wildcards, then the longest prefix
// wildcard).
func egressCaptureServices(t *testing.T, domains ...string) []EgressService {
	t.Helper()
	own, diags := RouteConfigFor("evil", &policy.Service{Domains: domains})
	if len(diags) > 0 {
		t.Fatal(diags)
	}
	return []EgressService{
		{Name: "api", Route: RouteConfig("api")},
		{Name: "evil", Route: own},
	}
}

// A domain of one service's policy (a wildcard, or an exact host with a
// port) never takes, in the egress table, a host that names another
// service with a port: it is left out of the table with a diagnostic, as
// a domain already taken is.
func TestEgressTableWildcardDomainCannotTakeAnotherService(t *testing.T) {
	for _, d := range []string{"*:8080", "*pi:8080", "*0", "api:8*", "*.service.consul:8080", "api.service.consul:8*", "api:8080", "API.service.consul:443"} {
		t.Run(d, func(t *testing.T) {
			rc, diags := Egress{}.WithDefaults().RouteTable(egressCaptureServices(t, d))
			for _, vh := range rc.VirtualHosts {
				if vh.Name == "evil" && len(vh.Domains) != 2+2 {
					t.Errorf("evil's domains %v: %q should be left out", vh.Domains, d)
				}
			}
			if len(diags) != 1 || !strings.Contains(diags[0].Message, "api") {
				t.Errorf("diagnostics %v, want one naming api", diags)
			}
		})
	}
	// A wildcard that no other service's host matches stays.
	rc, diags := Egress{}.WithDefaults().RouteTable(egressCaptureServices(t, "*.example.com", "evil.*", "*-evil", "api.example.com:8080", "apiary:80"))
	if len(diags) > 0 {
		t.Errorf("diagnostics %v", diags)
	}
	if d := rc.VirtualHosts[1].Domains; len(d) != 4+5 {
		t.Errorf("evil's domains %v", d)
	}
}

// Through a real Envoy: a request for api:8080 reaches api, not the
// service whose policy has the domain "*:8080".
func TestEgressTableWildcardDomainEnvoy(t *testing.T) {
	requireEnvoy(t)
	rig := startGRPCRig(t)
	rc, _ := Egress{}.WithDefaults().RouteTable(egressCaptureServices(t, "*:8080", "api:9090"))
	addrs := runEnvoy(t, rig, map[string]*route.RouteConfiguration{"egress": rc})
	for _, authority := range []string{"api", "api:8080", "api:9090", "api.service.consul:8080"} {
		conn := envoyConn(t, addrs["egress"], authority)
		c, err := envoyCall(t, conn, "/x.Y/Call")
		if c != "api" {
			t.Errorf("%s: answered by %q (%v), want api", authority, c, err)
		}
	}
}
