package app

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
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

// run logs the warnings validate prints, and counts them.
func TestNewLogsAndCountsConfigWarnings(t *testing.T) {
	dir := t.TempDir()
	c, err := config.Parse([]byte("xds: {listen: '127.0.0.1:0'}\nadmin: {listen: '127.0.0.1:0'}\nsources: [{name: s, file: {path: later.yaml}}]\n"), dir, SourceTypeNames())
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	a, err := New(c, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	want := "sources[0] (s): services file " + filepath.Join(dir, "later.yaml") + " does not exist (yet)"
	if !strings.Contains(logs.String(), `level=WARN msg="config: `+want) {
		t.Errorf("log:\n%s\nwant a WARN line %q", logs.String(), want)
	}
	mfs, err := a.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := -1.0
	for _, mf := range mfs {
		if mf.GetName() == "xdsbridge_config_warnings" && len(mf.GetMetric()) == 1 {
			got = mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	if got != 1 {
		t.Errorf("xdsbridge_config_warnings = %v; want 1", got)
	}
}
