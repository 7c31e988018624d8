package app

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/xdsbridge/xdsbridge/config"
)

// A policy for a service name that no services file or DNS source
// publishes is a warning with the closest name one does; with a source
// whose names are known only at run time (Consul), only a name close to a
// published one is reported.
func TestPolicyForUnpublishedServiceWarns(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("services.yaml", "services:\n  web: {endpoints: [{address: 10.0.0.1, port: 80}]}\n")
	write("policy.yaml", "services:\n  webb: {timeout: 1s}\n  web: {timeout: 2s}\n  \"web-*\": {timeout: 3s}\n  payments: {timeout: 4s}\n  api.internal: {timeout: 5s}\n")
	const static = "sources:\n  - {name: files, file: {path: services.yaml}}\n  - {name: names, dns: {services: [{name: api.internal, hosts: [{name: api.example, port: 80}]}]}}\n  - {name: pol, policy_file: {path: policy.yaml}}\n"
	pol := filepath.Join(dir, "policy.yaml")
	for _, tc := range []struct {
		name, config string
		want         []string
	}{
		{"static sources only", static, []string{
			"sources[2] (pol): " + pol + `: line 2, column 3: services.webb: no source publishes service "webb" (did you mean "web"?)`,
			"sources[2] (pol): " + pol + `: line 5, column 3: services.payments: no source publishes service "payments"`,
		}},
		{"with a Consul source", static + "  - {name: registry, consul: {address: '127.0.0.1:8500'}}\n", []string{
			"sources[2] (pol): " + pol + `: line 2, column 3: services.webb: no services file or DNS source publishes service "webb" (it may come from source registry) (did you mean "web"?)`,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := config.Parse([]byte(tc.config), dir, SourceTypeNames())
			if err != nil {
				t.Fatal(err)
			}
			got, err := Check(c, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("warnings (-want +got):\n%s", d)
			}
		})
	}
}
