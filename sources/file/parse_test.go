package file

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/xdsbridge/xdsbridge/sources"
)

// envoyCLA is a static cluster's load_assignment from an Envoy bootstrap,
// pasted unchanged under cluster_load_assignments.
const envoyCLA = `
cluster_load_assignments:
- cluster_name: payments
  endpoints:
  - locality:
      region: us-east-1
      zone: us-east-1b
    lb_endpoints:
    - endpoint:
        address:
          socket_address:
            address: 10.0.1.2
            port_value: 8443
        hostname: payments-1.internal
      load_balancing_weight: 20
      health_status: DRAINING
    - endpoint:
        address:
          socket_address: { address: 10.0.1.1, port_value: 8443 }
      load_balancing_weight: 10
      health_status: HEALTHY
      metadata:
        filter_metadata:
          envoy.lb:
            canary: true
            version: v2
            labels: { team: payments, shards: [1, 2] }
  - locality: { region: eu-west-1, zone: eu-west-1a, sub_zone: rack7 }
    priority: 1
    load_balancing_weight: 5
    lb_endpoints:
    - endpoint:
        address:
          socket_address: { protocol: TCP, address: "2001:db8::7", port_value: 8443 }
      health_status: DEGRADED
`

func TestParseValid(t *testing.T) {
	payments := sources.Service{Name: "payments", Endpoints: []sources.Endpoint{
		{
			Address: "10.0.1.1", Port: 8443, Weight: 10, Health: sources.HealthHealthy,
			Locality: sources.Locality{Region: "us-east-1", Zone: "us-east-1b"},
			Metadata: sources.Metadata{"envoy.lb": {
				"canary": true, "version": "v2",
				"labels": map[string]any{"team": "payments", "shards": []any{float64(1), float64(2)}},
			}},
		},
		{
			Address: "10.0.1.2", Port: 8443, Hostname: "payments-1.internal", Weight: 20, Health: sources.HealthDraining,
			Locality: sources.Locality{Region: "us-east-1", Zone: "us-east-1b"},
		},
		{
			Address: "2001:db8::7", Port: 8443, Priority: 1, Health: sources.HealthDegraded,
			Locality: sources.Locality{Region: "eu-west-1", Zone: "eu-west-1a", SubZone: "rack7"},
		},
	}}
	for _, tc := range []struct {
		name string
		doc  string
		want []sources.Service
	}{
		{"empty services", "services: {}\n", []sources.Service{}},
		{"empty assignments", "cluster_load_assignments: []\n", []sources.Service{}},
		{"empty sections", "services: {}\ncluster_load_assignments: []\n", []sources.Service{}},
		{"service without endpoints", "services:\n  idle: {}\n  idle2: {endpoints: []}\n", []sources.Service{
			{Name: "idle", Endpoints: []sources.Endpoint{}},
			{Name: "idle2", Endpoints: []sources.Endpoint{}},
		}},
		{
			"concise",
			`
services:
  web:
    endpoints:
      - {address: 10.0.0.2, port: 8080}
      - address: 10.0.0.1
        port: 8080
        hostname: web-1
        weight: 3
        priority: 0
        health: healthy
        locality: {region: r1, zone: z1, sub_zone: s1}
        metadata:
          envoy.lb: {canary: true, nested: {a: [1, "b"]}}
      - {address: "2001:db8::1", port: 443, priority: 1, health: DRAINING}
  api:
    endpoints:
      - {address: 10.1.0.1, port: 9000, health: Timeout}
      - {address: 10.1.0.1, port: 9001, health: unhealthy}
      - {address: 10.1.0.2, port: 9000, health: degraded}
      - {address: 10.1.0.3, port: 9000, health: unknown}
`,
			[]sources.Service{
				{Name: "api", Endpoints: []sources.Endpoint{
					{Address: "10.1.0.1", Port: 9000, Health: sources.HealthTimeout},
					{Address: "10.1.0.1", Port: 9001, Health: sources.HealthUnhealthy},
					{Address: "10.1.0.2", Port: 9000, Health: sources.HealthDegraded},
					{Address: "10.1.0.3", Port: 9000, Health: sources.HealthUnknown},
				}},
				{Name: "web", Endpoints: []sources.Endpoint{
					{Address: "10.0.0.2", Port: 8080},
					{
						Address: "10.0.0.1", Port: 8080, Hostname: "web-1", Weight: 3, Health: sources.HealthHealthy,
						Locality: sources.Locality{Region: "r1", Zone: "z1", SubZone: "s1"},
						Metadata: sources.Metadata{"envoy.lb": {"canary": true, "nested": map[string]any{"a": []any{float64(1), "b"}}}},
					},
					{Address: "2001:db8::1", Port: 443, Priority: 1, Health: sources.HealthDraining},
				}},
			},
		},
		{"envoy cluster load assignment", envoyCLA, []sources.Service{payments}},
		{
			"envoy JSON with camelCase names",
			`{"cluster_load_assignments": [{"clusterName": "c", "endpoints": [{"lbEndpoints": [
				{"endpoint": {"address": {"socketAddress": {"address": "10.9.0.1", "portValue": 80}}}, "healthStatus": "UNHEALTHY", "loadBalancingWeight": 2}
			]}]}]}`,
			[]sources.Service{{Name: "c", Endpoints: []sources.Endpoint{
				{Address: "10.9.0.1", Port: 80, Weight: 2, Health: sources.HealthUnhealthy},
			}}},
		},
		{
			"mixed",
			envoyCLA + "services:\n  web:\n    endpoints: [{address: 10.0.0.1, port: 80}]\n",
			[]sources.Service{payments, {Name: "web", Endpoints: []sources.Endpoint{{Address: "10.0.0.1", Port: 80}}}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse([]byte(tc.doc))
			if err != nil {
				t.Fatal(err)
			}
			// Endpoints come sorted as translation emits them.
			for _, s := range tc.want {
				sources.SortEndpoints(s.Endpoints)
			}
			if d := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
			for _, s := range got {
				if s.Endpoints == nil {
					t.Errorf("service %s has nil endpoints", s.Name)
				}
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	svc := func(ep string) string { return "services:\n  web:\n    endpoints:\n      - " + ep + "\n" }
	cla := func(lbEndpoint string) string {
		return "cluster_load_assignments:\n- cluster_name: c\n  endpoints:\n  - lb_endpoints:\n    - " + lbEndpoint + "\n"
	}
	const claPrefix = "cluster_load_assignments[0].endpoints[0].lb_endpoints[0]"
	for _, tc := range []struct {
		name string
		doc  string
		want []string
	}{
		{"empty file", "", []string{"empty document", "services: {}"}},
		{"whitespace only", " \n   \n\n", []string{"empty document"}},
		{"comment only", "# nothing yet\n", []string{"empty document"}},
		{"null", "null\n", []string{"empty document"}},
		{"tilde", "~\n", []string{"empty document"}},
		{"empty mapping", "{}\n", []string{"empty document"}},
		{"null sections", "services:\ncluster_load_assignments: null\n", []string{"empty document"}},
		{"empty JSON document", " {} ", []string{"empty document"}},
		{"non-IP address", svc("{address: web.internal, port: 80}"), []string{`services.web.endpoints[0].address: "web.internal" is not an IP address`}},
		{"missing address", svc("{port: 80}"), []string{"services.web.endpoints[0].address: missing"}},
		{"port 0", svc("{address: 10.0.0.1, port: 0}"), []string{"services.web.endpoints[0].port: 0 is not in 1..65535"}},
		{"port missing", svc("{address: 10.0.0.1}"), []string{"services.web.endpoints[0].port: 0 is not in 1..65535"}},
		{"port 70000", svc("{address: 10.0.0.1, port: 70000}"), []string{"services.web.endpoints[0].port: 70000 is not in 1..65535"}},
		{"negative port", svc("{address: 10.0.0.1, port: -1}"), []string{"services.web.endpoints[0].port", "expected a whole number from 0 to 4294967295, got -1"}},
		{"port as string", svc("{address: 10.0.0.1, port: http}"), []string{"services.web.endpoints[0].port", `expected a whole number from 0 to 4294967295, got a string`}},
		{"bad health", svc("{address: 10.0.0.1, port: 80, health: sickly}"), []string{`services.web.endpoints[0].health: unknown health status "sickly"`}},
		{"unknown endpoint field", svc("{adress: 10.0.0.1, port: 80}"), []string{`unknown field "adress" in services.web.endpoints[0]`}},
		{"unknown locality field", svc("{address: 10.0.0.1, port: 80, locality: {zon: a}}"), []string{`unknown field "zon" in services.web.endpoints[0].locality`}},
		{"unknown service field", "services:\n  web:\n    endpoint: []\n", []string{`unknown field "endpoint" in services.web`}},
		{"unknown top-level field", "service:\n  web: {}\n", []string{`unknown field "service"`}},
		{"metadata not a mapping", svc("{address: 10.0.0.1, port: 80, metadata: {ns: 1}}"), []string{"services.web.endpoints[0].metadata.ns"}},
		{
			"duplicate endpoint",
			"services:\n  web:\n    endpoints:\n      - {address: 10.0.0.1, port: 80}\n      - {address: 10.0.0.2, port: 80}\n      - {address: 10.0.0.1, port: 80, weight: 2}\n",
			[]string{"services.web.endpoints: 10.0.0.1:80 is listed twice"},
		},
		{"bad service name", "services:\n  \"my web\": {}\n", []string{`services.my web: service name "my web" contains whitespace`}},
		{"service named like a subset", "services:\n  web: {}\n  web/v1: {}\n", []string{`services.web/v1: service name "web/v1" contains "/", which only the names the bridge derives hold`}},
		{"assignment named like a subset", "cluster_load_assignments:\n  - cluster_name: web/v1\n", []string{`cluster_load_assignments[0].cluster_name: service name "web/v1" contains "/"`}},
		{
			"one IPv6 host spelled twice",
			"services:\n  web:\n    endpoints:\n      - {address: \"2001:db8::1\", port: 80}\n      - {address: \"2001:DB8:0::1\", port: 80}\n",
			[]string{"services.web.endpoints: [2001:db8::1]:80 is listed twice"},
		},
		{
			"IPv4 and its mapped IPv6",
			"services:\n  web:\n    endpoints:\n      - {address: 127.0.0.1, port: 80}\n      - {address: \"::ffff:127.0.0.1\", port: 80}\n",
			[]string{"services.web.endpoints: 127.0.0.1:80 is listed twice"},
		},
		{
			"IPv4 and its mapped IPv6 (assignment)",
			cla("endpoint: {address: {socket_address: {address: 10.0.0.1, port_value: 80}}}\n    - endpoint: {address: {socket_address: {address: \"::ffff:10.0.0.1\", port_value: 80}}}"),
			[]string{"cluster_load_assignments[0].endpoints: 10.0.0.1:80 is listed twice"},
		},
		{
			"two services blocks (YAML)",
			"services:\n  a:\n    endpoints: [{address: 10.0.0.1, port: 80}]\nservices:\n  b:\n    endpoints: [{address: 10.0.0.2, port: 80}]\n",
			[]string{`duplicate key "services": lines 1 and 4`},
		},
		{
			"service given twice (YAML)",
			"services:\n  web: {endpoints: [{address: 10.0.0.1, port: 80}]}\n  web: {endpoints: [{address: 10.0.0.2, port: 80}]}\n",
			[]string{`duplicate key in services "web": lines 2 and 3`},
		},
		{
			"endpoint field given twice (JSON)",
			"{\"services\": {\"web\": {\"endpoints\": [\n  {\"address\": \"10.0.0.1\",\n   \"address\": \"10.0.0.2\", \"port\": 80}]}}}",
			[]string{`duplicate key in services.web.endpoints[0] "address": lines 2 and 3`},
		},
		{
			"assignment field given twice (JSON)",
			"{\"cluster_load_assignments\": [{\"cluster_name\": \"a\",\n \"cluster_name\": \"b\"}]}",
			[]string{`duplicate key in cluster_load_assignments[0] "cluster_name": lines 1 and 2`},
		},
		{
			"service in both sections",
			"services:\n  c: {}\n" + cla("endpoint: {address: {socket_address: {address: 10.0.0.1, port_value: 80}}}"),
			[]string{`cluster_load_assignments[0].cluster_name: service "c" is defined twice in the file`},
		},
		{
			"two assignments of one cluster",
			"cluster_load_assignments:\n- cluster_name: c\n- cluster_name: c\n",
			[]string{`cluster_load_assignments[1].cluster_name: service "c" is defined twice in the file`},
		},
		{"named port in CLA", cla("endpoint: {address: {socket_address: {address: 10.0.0.1, named_port: http}}}"), []string{claPrefix + ".endpoint.address.socket_address.port_value: missing (named ports are not supported)"}},
		{"hostname address in CLA", cla("endpoint: {address: {socket_address: {address: web.internal, port_value: 80}}}"), []string{claPrefix + `.endpoint.address.socket_address.address: "web.internal" is not an IP address`}},
		{"port 0 in CLA", cla("endpoint: {address: {socket_address: {address: 10.0.0.1, port_value: 0}}}"), []string{claPrefix + ".endpoint.address.socket_address.port_value: 0 is not in 1..65535"}},
		{"port 70000 in CLA", cla("endpoint: {address: {socket_address: {address: 10.0.0.1, port_value: 70000}}}"), []string{"cluster_load_assignments[0]", "PortValue"}},
		{"pipe address in CLA", cla("endpoint: {address: {pipe: {path: /tmp/sock}}}"), []string{claPrefix + ".endpoint.address.socket_address: missing (only socket addresses are supported)"}},
		{"named endpoint in CLA", "cluster_load_assignments:\n- cluster_name: c\n  endpoints:\n  - lb_endpoints:\n    - endpoint_name: ep1\n  named_endpoints:\n    ep1: {address: {socket_address: {address: 10.0.0.1, port_value: 80}}}\n", []string{claPrefix + ".endpoint: missing (named endpoints are not supported)"}},
		{"unknown health number in CLA", cla("endpoint: {address: {socket_address: {address: 10.0.0.1, port_value: 80}}}\n      health_status: 9"), []string{claPrefix + ".health_status: unknown health status 9"}},
		{"bad health name in CLA", cla("endpoint: {address: {socket_address: {address: 10.0.0.1, port_value: 80}}}\n      health_status: SICK"), []string{"cluster_load_assignments[0]", "SICK"}},
		{"unknown field in CLA", cla("endpoint: {adress: {}}"), []string{"cluster_load_assignments[0]", `"adress"`}},
		{"CLA without cluster name", "cluster_load_assignments:\n- endpoints: []\n", []string{"cluster_load_assignments[0]", "ClusterName"}},
		{"duplicate endpoint in CLA", "cluster_load_assignments:\n- cluster_name: c\n  endpoints:\n  - lb_endpoints:\n    - endpoint: {address: {socket_address: {address: 10.0.0.1, port_value: 80}}}\n  - priority: 1\n    lb_endpoints:\n    - endpoint: {address: {socket_address: {address: 10.0.0.1, port_value: 80}}}\n", []string{"cluster_load_assignments[0].endpoints: 10.0.0.1:80 is listed twice"}},
		{"assignments not a list", "cluster_load_assignments: {cluster_name: c}\n", []string{"line 1, column 1: cluster_load_assignments: expected a list, got a mapping"}},
		{"YAML syntax error", "services:\n  web:\n    endpoints: [\n      {address: 10.0.0.1, port: 80\n", []string{"line"}},
		{"YAML indentation error", "services:\n  web:\n endpoints: []\n    x: 1\n", []string{"line"}},
		{"JSON syntax error", "{\"services\":\n  {\"web\": {\"endpoints\": [}}}", []string{"line"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse([]byte(tc.doc))
			if err == nil {
				t.Fatalf("Parse succeeded: %+v", got)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestParseDeterministic(t *testing.T) {
	doc := []byte(envoyCLA + "services:\n  b: {endpoints: [{address: 10.0.0.2, port: 1}, {address: 10.0.0.1, port: 1}]}\n  a: {}\n  z: {}\n")
	first, err := Parse(doc)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range first {
		names = append(names, s.Name)
	}
	if d := cmp.Diff([]string{"a", "b", "payments", "z"}, names); d != "" {
		t.Errorf("service order (-want +got):\n%s", d)
	}
	for range 20 {
		again, err := Parse(doc)
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(first, again); d != "" {
			t.Fatalf("Parse is not deterministic:\n%s", d)
		}
	}
}

// Addresses are published in their canonical form.
func TestParseCanonicalAddresses(t *testing.T) {
	svcs, err := Parse([]byte("services:\n  web:\n    endpoints:\n      - {address: \"2001:DB8:0::1\", port: 80}\n      - {address: \"::ffff:10.0.0.1\", port: 80}\n"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range svcs[0].Endpoints {
		got = append(got, e.Address)
	}
	if strings.Join(got, " ") != "10.0.0.1 2001:db8::1" {
		t.Errorf("addresses %q, want the canonical forms", got)
	}
}

// Keys are case-sensitive: `serviCes:` is not `services:`.
func TestParseKeysCaseSensitive(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"serviCes:\n  web: {endpoints: [{address: 10.0.0.1, port: 80}]}\n", `unknown field "serviCes" (keys are case-sensitive: did you mean "services"?)`},
		{"services:\n  web: {endpoints: [{address: 10.0.0.1, Port: 80}]}\n", `unknown field "Port" in services.web.endpoints[0] (keys are case-sensitive: did you mean "port"?)`},
		{"services:\n  web: {endpoints: [{address: 10.0.0.1, port: 80, locality: {Zone: a}}]}\n", `unknown field "Zone" in services.web.endpoints[0].locality (keys are case-sensitive: did you mean "zone"?)`},
	} {
		_, err := Parse([]byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.in, err, tc.want)
		}
	}
}

// The file source publishes each service's endpoints in normal form
// (sources.Normalize): sorted, whatever their order in the file, in both
// formats.
func TestParseEndpointsNormalForm(t *testing.T) {
	svcs, err := Parse([]byte(`services:
  web:
    endpoints:
      - {address: 10.0.0.9, port: 80}
      - {address: "::FFFF:10.0.0.1", port: 80, locality: {zone: b}}
      - {address: 10.0.0.5, port: 80, priority: 1}
      - {address: 10.0.0.2, port: 80, locality: {zone: a}}
      - {address: 10.0.0.1, port: 79}
cluster_load_assignments:
  - cluster_name: api
    endpoints:
      - priority: 1
        lb_endpoints: [{endpoint: {address: {socket_address: {address: 10.1.0.2, port_value: 80}}}}]
      - lb_endpoints:
          - {endpoint: {address: {socket_address: {address: 10.1.0.9, port_value: 80}}}}
          - {endpoint: {address: {socket_address: {address: 10.1.0.1, port_value: 80}}}}
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(svcs) != 2 {
		t.Fatalf("services %+v", svcs)
	}
	for _, s := range svcs {
		if err := sources.CheckNormal(s.Endpoints); err != nil {
			t.Errorf("%s: %v", s.Name, err)
		}
		var keys []string
		for _, e := range s.Endpoints {
			keys = append(keys, e.Key().String())
		}
		t.Logf("%s: %v", s.Name, keys)
	}
	if got := svcs[1].Endpoints[0].Key().String(); svcs[1].Name != "web" || got != "10.0.0.1:79" {
		t.Errorf("web's first endpoint %s", got)
	}
}

// The checks after decoding name the line and column of the value, also
// under a service name with dots; decoding errors say what was expected.
func TestParseErrorsNameLineAndColumn(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"services:\n  web.internal:\n    endpoints:\n      - port: 80\n        address: web.internal\n",
			`line 5, column 9: services.web.internal.endpoints[0].address: "web.internal" is not an IP address (names belong to the dns source)`},
		{"services:\n  web:\n    endpoints:\n      - {address: 10.0.0.1, port: 80, weight: .nan}\n",
			"line 4, column 39: services.web.endpoints[0].weight: expected a finite number, got .nan"},
		{"services:\n  web:\n    endpoints:\n      - {address: 10.0.0.1, port: 4294967296}\n",
			"line 4, column 29: services.web.endpoints[0].port: expected a whole number from 0 to 4294967295, got 4294967296"},
		{"services:\n  web:\n    endpoints: {address: 10.0.0.1}\n",
			"line 3, column 5: services.web.endpoints: expected a list, got a mapping"},
	} {
		_, err := Parse([]byte(tc.in))
		if err == nil || err.Error() != tc.want {
			t.Errorf("%q:\n got %v\nwant %s", tc.in, err, tc.want)
		}
	}
}
