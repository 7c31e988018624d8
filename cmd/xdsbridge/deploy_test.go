package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// The configs the deployment assets ship are valid: the container image's
// (deploy/container, with examples/services.yaml beside it as the image
// has it) and the Kubernetes ConfigMap's (its files written out as the
// volume mounts them).
func TestValidateDeployConfigs(t *testing.T) {
	validate := func(dir, cfg string) {
		t.Helper()
		var out bytes.Buffer
		if err := run([]string{"validate", "-config", filepath.Join(dir, cfg)}, &out, &out); err != nil {
			t.Fatalf("%s: %v", cfg, err)
		}
		if strings.TrimSpace(out.String()) != "config ok" {
			t.Fatalf("%s: output %q", cfg, out.String())
		}
	}
	copyFile := func(src, dst string) {
		t.Helper()
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	image := t.TempDir()
	copyFile("../../deploy/container/xdsbridge.yaml", filepath.Join(image, "xdsbridge.yaml"))
	copyFile("../../examples/services.yaml", filepath.Join(image, "services.yaml"))
	validate(image, "xdsbridge.yaml")

	b, err := os.ReadFile("../../deploy/kubernetes/configmap.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cm struct {
		Data map[string]string `json:"data"`
	}
	if err := yaml.Unmarshal(b, &cm); err != nil {
		t.Fatal(err)
	}
	mounted := t.TempDir()
	for name, content := range cm.Data {
		if err := os.WriteFile(filepath.Join(mounted, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	validate(mounted, "xdsbridge.yaml")
}
