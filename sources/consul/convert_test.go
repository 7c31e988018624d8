package consul

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/consul/api"

	"github.com/xdsbridge/xdsbridge/policy"
)

// PolicyOfEntries converts a list of entries of mixed kinds as the source
// converts the lists it reads: entries by kind, each kind's last entry of
// a name kept, entries of kinds not watched (and nil) ignored.
func TestPolicyOfEntries(t *testing.T) {
	f, diags := PolicyOfEntries([]api.ConfigEntry{
		defaults("web", "tcp"),
		splitter("web", api.ServiceSplit{Weight: 100, Service: "api"}),
		defaults("web", "http"),
		&api.ProxyConfigEntry{Kind: api.ProxyDefaults, Name: api.ProxyConfigGlobal},
		nil,
		resolver("api", func(e *api.ServiceResolverConfigEntry) {
			e.Failover = map[string]api.ServiceResolverFailover{"*": {Service: "back", Datacenters: []string{"dc9"}}}
		}),
	}, "dc1")
	want := map[string]policy.Service{
		"web": {Protocol: policy.ProtocolHTTP, Split: []policy.Split{{Weight: 100, Service: "api"}}},
	}
	if diff := cmp.Diff(want, f.Services); diff != "" {
		t.Errorf("policy (-want +got):\n%s", diff)
	}
	// dc9 is not watched (the local datacenter is dc1, no other is):
	// the failover is left out, with a diagnostic.
	if len(diags) != 1 || diags[0].Kind != api.ServiceResolver || diags[0].Name != "api" || diags[0].Skipped {
		t.Errorf("diagnostics %v, want one: service-resolver/api, the failover left out", diags)
	}
}
