package consul

import (
	"github.com/hashicorp/consul/api"

	"github.com/xdsbridge/xdsbridge/policy"
)

// PolicyOfEntries converts config entries into a policy as the source
// does (mapping.cluster_name "{service}", local datacenter dc, no
// failover_datacenters): the policy of every service they name, and the
// diagnostics of what it could not carry. Entries of kinds the source does
// not watch are ignored. The File passes its Check. It is what tests and
// tools that drive the bridge without a Consul server publish.
func PolicyOfEntries(entries []api.ConfigEntry, dc string) (*policy.File, []Diagnostic) {
	es := newEntrySet()
	by := map[string][]api.ConfigEntry{}
	for _, e := range entries {
		if e != nil {
			by[e.GetKind()] = append(by[e.GetKind()], e)
		}
	}
	for _, k := range entryKinds {
		es.set(k, by[k])
	}
	return convertEntries(es, naming{template: "{service}", local: dc})
}
