package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func TestValidateExampleConfigs(t *testing.T) {
	for _, cfg := range []string{"../../examples/xdsbridge.yaml", "../../examples/consul.yaml"} {
		var out bytes.Buffer
		if err := run([]string{"validate", "-config", cfg}, &out, &out); err != nil {
			t.Fatalf("%s: %v", cfg, err)
		}
		if strings.TrimSpace(out.String()) != "config ok" {
			t.Fatalf("%s: output %q", cfg, out.String())
		}
	}
}

func TestValidateNamesTheField(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ config, want string }{
		{"xds: {lisen: x}\nsources: [{name: s, file: {path: s.yaml}}]\n", `unknown field "lisen"`},
		{"sources: [{name: s, file: {path: s.yaml}}]\n", "s.yaml"}, // the services file is missing
		{"sources: [{name: s, fil: {path: s.yaml}}]\n", `unknown source type "fil"`},
		{"sources: [{name: s, dns: {services: [{name: a, hosts: [{name: '', port: 80}]}]}}]\n", "hosts[0].name"},
		{"sources: [{name: s, file: {path: ok.yaml}, health_check: {type: htp}}]\n", "sources[0].health_check"},
	} {
		os.WriteFile(filepath.Join(dir, "ok.yaml"), []byte("services: {}\n"), 0o644)
		p := filepath.Join(dir, "c.yaml")
		os.WriteFile(p, []byte(tc.config), 0o644)
		var out bytes.Buffer
		err := run([]string{"validate", "-config", p}, &out, &out)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("config %q: error %v, want it to mention %q", tc.config, err, tc.want)
		}
	}
}

func TestDumpPrintsResources(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := run([]string{"dump", "-config", "../../examples/xdsbridge.yaml"}, &out, &errOut); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	var got map[string][]struct {
		Name    string         `json:"name"`
		Version string         `json:"version"`
		Res     map[string]any `json:"resource"`
	}
	if err := yaml.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range got["eds"] {
		names = append(names, r.Name)
		if r.Version == "" {
			t.Errorf("%s has no version", r.Name)
		}
	}
	if strings.Join(names, ",") != "api,legacy,web" {
		t.Fatalf("eds resources %v, want api,legacy,web (examples/services.yaml)", names)
	}
	if len(got["cds"]) != 3 || len(got["lds"]) != 3 || len(got["rds"]) != 3 {
		t.Fatalf("cds %d lds %d rds %d, want 3 each", len(got["cds"]), len(got["lds"]), len(got["rds"]))
	}
}
