package policy

import (
	"os"
	"strings"
	"testing"
)

// Keys that name things the user chose (services, subsets) are not
// field names: their case is the user's, never a "case-sensitive key"
// error, in the example file with its names changed to mixed case.
func TestParseFileUserKeysAnyCase(t *testing.T) {
	data, err := os.ReadFile("../examples/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseFile(data); err != nil {
		t.Fatalf("examples/policy.yaml: %v", err)
	}
	s := string(data)
	for _, r := range [][2]string{{"  web:", "  Web:"}, {"stable:", "STABLE:"}, {"subset: stable", "subset: STABLE"}, {"default_subset: stable", "default_subset: STABLE"}} {
		s = strings.ReplaceAll(s, r[0], r[1])
	}
	f, err := ParseFile([]byte(s))
	if err != nil {
		t.Fatalf("mixed-case names: %v", err)
	}
	if _, ok := f.Services["Web"]; !ok {
		t.Errorf("service Web missing: %v", f.Services)
	}
	// A field name in the wrong case still is an error.
	if _, err := ParseFile([]byte(strings.Replace(s, "protocol: grpc", "Protocol: grpc", 1))); err == nil || !strings.Contains(err.Error(), "case-sensitive") {
		t.Errorf("Protocol: %v", err)
	}
}
