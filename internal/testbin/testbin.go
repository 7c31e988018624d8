// Package testbin finds the real programs (Envoy, Chromium) that
// integration tests run against.
package testbin

import (
	"os"
	"os/exec"
	"testing"
)

// Envoy finds envoy on PATH (Find).
func Envoy(t testing.TB) string {
	t.Helper()
	return Find(t, "envoy")
}

// Find finds the program name on PATH, or skips the test; with
// XDSBRIDGE_REQUIRE_INTEGRATION=1 (CI) a missing program fails it.
func Find(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	if os.Getenv("XDSBRIDGE_REQUIRE_INTEGRATION") == "1" {
		t.Fatalf("%s not found on PATH (run .ci/install.sh)", name)
	}
	t.Skipf("%s not found on PATH; run .ci/install.sh", name)
	return ""
}
