package file

import (
	"os"
	"strings"
	"testing"
)

// Two plain YAML keys that the YAML-to-JSON conversion (sigs.k8s.io/yaml,
// YAML 1.1) reads as the same key are keys given twice: `y:` and `yes:`
// both become "true", and one service (with its endpoints) would silently
// vanish while the other is served under the name "true".
func TestParseYAMLKeysResolvingAlike(t *testing.T) {
	for _, in := range []string{
		"services:\n  y: {endpoints: [{address: 10.0.0.1, port: 80}]}\n  yes: {endpoints: [{address: 10.0.0.2, port: 80}]}\n",
		"services:\n  on: {endpoints: [{address: 10.0.0.1, port: 80}]}\n  \"true\": {endpoints: [{address: 10.0.0.2, port: 80}]}\n",
		"services:\n  1.10: {endpoints: [{address: 10.0.0.1, port: 80}]}\n  1.1: {endpoints: [{address: 10.0.0.2, port: 80}]}\n",
		"services:\n  web: {endpoints: [{address: 10.0.0.1, port: 80, metadata: {lb: {y: a, Yes: b}}}]}\n",
	} {
		svcs, err := Parse([]byte(in))
		if err == nil || !strings.Contains(err.Error(), "duplicate key") {
			t.Errorf("%q: services %+v, error %v; want a duplicate key error", in, svcs, err)
		}
	}
	// Quoted keys stay strings: "yes" and "y" are two services.
	svcs, err := Parse([]byte("services:\n  \"yes\": {endpoints: [{address: 10.0.0.1, port: 80}]}\n  \"y\": {endpoints: [{address: 10.0.0.2, port: 80}]}\n"))
	if err != nil || len(svcs) != 2 {
		t.Fatalf("quoted keys: %+v, %v", svcs, err)
	}
}

// Service names and metadata keys are the user's: any case, in the
// example file; a field name in the wrong case is an error.
func TestParseUserKeysAnyCase(t *testing.T) {
	data, err := os.ReadFile("../../examples/services.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := strings.NewReplacer("  web:", "  Web:", "  api:", "  API:", "envoy.lb: {version: v2}", "Envoy.LB: {Version: v2, version: v3}").Replace(string(data))
	svcs, err := Parse([]byte(s))
	if err != nil {
		t.Fatalf("mixed-case names: %v", err)
	}
	names := map[string]bool{}
	for _, sv := range svcs {
		names[sv.Name] = true
		for _, e := range sv.Endpoints {
			if md := e.Metadata["Envoy.LB"]; md != nil && (md["Version"] != "v2" || md["version"] != "v3") {
				t.Errorf("metadata %v", e.Metadata)
			}
		}
	}
	if !names["Web"] || !names["API"] || !names["legacy"] {
		t.Errorf("services %v", names)
	}
	if _, err := Parse([]byte(strings.Replace(s, "port: 8081", "Port: 8081", 1))); err == nil || !strings.Contains(err.Error(), "case-sensitive") {
		t.Errorf("Port: %v", err)
	}
}
