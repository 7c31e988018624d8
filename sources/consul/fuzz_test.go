package consul

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/netip"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/xdsbridge/xdsbridge/sources"
)

// FuzzMapping feeds a Consul /v1/health/service/<name> payload (a JSON
// list of service entries) and a mapping config to the mapper, and checks
// the endpoints it yields.
func FuzzMapping(f *testing.F) {
	entry := `{"Node": {"Node": "n1", "Address": "10.0.0.2", "Datacenter": "dc1", "TaggedAddresses": {"wan": "192.0.2.9"}, "Meta": {"zone": "a", "rack": "r1"}},
	  "Service": {"ID": "web-1", "Service": "web", "Port": 8080, "Address": "10.0.0.1", "Tags": ["v1", "canary"], "Meta": {"version": "1"}, "Weights": {"Passing": 3, "Warning": 1},
	    "TaggedAddresses": {"lan_ipv6": {"Address": "2001:db8::1", "Port": 9090}}, "Kind": ""},
	  "Checks": [{"Node": "n1", "CheckID": "serfHealth", "Status": "passing"}, {"Node": "n1", "CheckID": "service:web-1", "ServiceID": "web-1", "Status": "warning"}]}`
	for _, s := range []string{
		"[" + entry + "]",
		`[{"Node": {"Node": "n", "Address": "svc.example"}, "Service": {"ID": "x", "Service": "x", "Port": 80}}]`,
		`[{"Node": {"Node": "n", "Address": "[::ffff:10.0.0.1]"}, "Service": {"ID": "x", "Service": "x", "Port": 70000}}]`,
		`[{"Node": {"Node": "n", "Address": "10.0.0.1"}, "Service": {"ID": "x", "Service": "x", "Port": -1, "Kind": "connect-proxy"}}]`,
		`[{"Node": null, "Service": null}, null]`,
		`[]`,
	} {
		f.Add([]byte(s), `{"mapping": {"tagged_address": "lan_ipv6", "zone_meta_key": "zone", "failover_tagged_address": "lan_ipv6"}}`)
		f.Add([]byte(s), `{"mapping": {"tagged_address": "wan", "failover_tagged_address": "wan", "resolve_hostnames": true}}`)
	}
	f.Add([]byte("["+entry+"]"), `{}`)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	f.Fuzz(func(t *testing.T, payload []byte, cfg string) {
		var entries []*api.ServiceEntry
		if err := json.Unmarshal(payload, &entries); err != nil {
			return
		}
		set, err := parseConfig(json.RawMessage(cfg), "")
		if err != nil {
			return
		}
		mp := &mapper{m: set.mapping, sel: set.sel, log: log, resolver: fakeResolver{"svc.example": {netip.MustParseAddr("10.9.9.9")}}}
		ins, _, _ := mp.mapEntries(context.Background(), "web", dcInfo{name: "dc1", priority: 1}, entries)
		for _, in := range ins {
			e := in.endpoint
			if err := sources.ValidateEndpoint("endpoint", e); err != nil {
				t.Fatal(err)
			}
			if a := netip.MustParseAddr(e.Address); a.String() != e.Address || a.Is4In6() {
				t.Fatalf("address %q not canonical", e.Address)
			}
			if e.Priority != 1 || e.Locality.Region != "dc1" {
				t.Fatalf("priority %d region %q", e.Priority, e.Locality.Region)
			}
			if _, err := json.Marshal(e.Metadata); err != nil {
				t.Fatalf("metadata does not encode: %v", err)
			}
		}
	})
}
