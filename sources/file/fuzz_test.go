package file

import (
	"encoding/json"
	"net/netip"
	"testing"

	"github.com/xdsbridge/xdsbridge/sources"
)

// checkServices asserts what a successful parse must yield: valid names,
// endpoints with an IP address and a port in 1..65535, no endpoint twice.
func checkServices(t *testing.T, svcs []sources.Service) {
	t.Helper()
	names := map[string]bool{}
	for _, s := range svcs {
		if err := sources.ValidateServiceName("name", s.Name); err != nil {
			t.Fatalf("service %q: %v", s.Name, err)
		}
		if names[s.Name] {
			t.Fatalf("service %q twice", s.Name)
		}
		names[s.Name] = true
		seen := map[sources.HostKey]bool{}
		for _, e := range s.Endpoints {
			if _, err := netip.ParseAddr(e.Address); err != nil {
				t.Fatalf("service %q: address %q: %v", s.Name, e.Address, err)
			}
			if e.Port == 0 || e.Port > 65535 {
				t.Fatalf("service %q: port %d", s.Name, e.Port)
			}
			if seen[e.Key()] {
				t.Fatalf("service %q: %s twice", s.Name, e.Key())
			}
			seen[e.Key()] = true
		}
	}
}

// FuzzParse feeds services files, in both formats (concise services and
// cluster_load_assignments), YAML and JSON, to Parse.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"services:\n  web:\n    endpoints:\n      - {address: 10.0.0.1, port: 8080}\n      - {address: \"2001:db8::1\", port: 443, weight: 3, priority: 1, health: degraded, hostname: a.example, locality: {region: r, zone: z}, metadata: {envoy.lb: {canary: true}}}\n",
		`{"services": {"api": {"endpoints": [{"address": "192.0.2.1", "port": 65535}]}}}`,
		"cluster_load_assignments:\n  - cluster_name: billing\n    endpoints:\n      - locality: {region: eu}\n        priority: 0\n        lb_endpoints:\n          - endpoint: {address: {socket_address: {address: 10.1.0.1, port_value: 9000}}, hostname: b1}\n            health_status: HEALTHY\n            load_balancing_weight: 2\n            metadata: {filter_metadata: {envoy.lb: {v: 1}}}\n",
		"services: {a: {endpoints: []}}\ncluster_load_assignments: [{cluster_name: b}]\n",
		"services: {a: {endpoints: [{address: 10.0.0.1, port: 0}]}}\n",
		"services: {a: {endpoints: [{address: host.example, port: 80}]}}\n",
		"services: {a: {endpoints: [{address: 10.0.0.1, port: 80}, {address: 10.0.0.1, port: 80}]}}\n",
		`{"cluster_load_assignments": [{"cluster_name": "x", "endpoints": [{"lb_endpoints": [{"endpoint": {"address": {"socket_address": {"address": "::ffff:10.0.0.1", "port_value": 70000}}}}]}]}]}`,
		"",
		"[1, 2",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		svcs, err := Parse(data)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		checkServices(t, svcs)
		for _, s := range svcs {
			if err := sources.CheckNormal(s.Endpoints); err != nil {
				t.Fatalf("service %q not in normal form: %v", s.Name, err)
			}
		}
	})
}

// FuzzCLA feeds one Envoy ClusterLoadAssignment document (JSON, as in a
// static cluster's load_assignment) to the converter.
func FuzzCLA(f *testing.F) {
	for _, s := range []string{
		`{"cluster_name": "web", "endpoints": [{"locality": {"region": "r", "zone": "z", "sub_zone": "s"}, "priority": 1, "lb_endpoints": [{"endpoint": {"address": {"socket_address": {"address": "10.0.0.1", "port_value": 80}}, "hostname": "h"}, "health_status": "DRAINING", "load_balancing_weight": 5, "metadata": {"filter_metadata": {"ns": {"k": [1, "a", null, {"x": true}]}}}}]}]}`,
		`{"cluster_name": "web", "endpoints": [{"lb_endpoints": [{"endpoint_name": "named"}]}]}`,
		`{"cluster_name": "web", "endpoints": [{"lb_endpoints": [{"endpoint": {"address": {"pipe": {"path": "/tmp/s"}}}}]}]}`,
		`{"cluster_name": "web", "endpoints": [{"lb_endpoints": [{"endpoint": {"address": {"socket_address": {"address": "10.0.0.1", "named_port": "http"}}}}]}]}`,
		`{"cluster_name": "web", "endpoints": [{"lb_endpoints": [{"endpoint": {"address": {"socket_address": {"address": "10.0.0.1", "port_value": 80}}}, "health_status": 42}]}]}`,
		`{"cluster_name": ""}`,
		`{}`,
		`null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		svc, err := fromCLA("cla", json.RawMessage(data))
		if err != nil {
			return
		}
		checkServices(t, []sources.Service{svc})
	})
}
