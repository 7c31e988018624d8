// Package testbin finds the real programs (Envoy) that integration tests
// run against.
package testbin

import (
	"os"
	"os/exec"
	"testing"
)

// Envoy finds envoy on PATH, or skips the test; with
// XDSBRIDGE_REQUIRE_INTEGRATION=1 (CI) a missing envoy fails it.
func Envoy(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("envoy")
	if err == nil {
		return p
	}
	if os.Getenv("XDSBRIDGE_REQUIRE_INTEGRATION") == "1" {
		t.Fatal("envoy not found on PATH (run .ci/install.sh)")
	}
	t.Skip("envoy not found on PATH; run .ci/install.sh")
	return ""
}
