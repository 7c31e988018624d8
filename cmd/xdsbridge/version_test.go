package main

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/xdsbridge/xdsbridge/internal/buildinfo"
)

// `xdsbridge version`, -version and --version print the stamped version,
// the commit, the commit date and the Go version.
func TestVersionCommand(t *testing.T) {
	defer func(v string) { buildinfo.Version = v }(buildinfo.Version)
	buildinfo.Version = "v0.0.0-version-test"
	for _, arg := range []string{"version", "-version", "--version"} {
		out, err := runCommand(arg)
		if err != nil {
			t.Fatalf("%s: %v", arg, err)
		}
		for _, want := range []string{"xdsbridge v0.0.0-version-test\n", "\ncommit:   ", "\ndate:     ", "\ngo:       " + runtime.Version() + "\n"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s: output lacks %q:\n%s", arg, want, out)
			}
		}
		if !strings.HasPrefix(out, "xdsbridge v0.0.0-version-test\n") {
			t.Errorf("%s: output does not start with the version:\n%s", arg, out)
		}
	}
	if _, err := runCommand("version", "extra"); err == nil {
		t.Error("version extra: no error")
	}
}

// `xdsbridge healthcheck` exits 0 against a ready bridge (the admin address
// from -config, no admin token needed: /readyz is open) and fails, naming
// the reason, against a bridge that is not ready or not there.
func TestHealthcheckCommand(t *testing.T) {
	cfgPath, tokenPath, adminAddr, _ := startStatusBridge(t)
	waitCommandOutput(t, `^ready\n$`, "healthcheck", "-config", cfgPath)
	// The probe reads no token file: an unreadable one does not fail it.
	if err := os.Remove(tokenPath); err != nil {
		t.Fatal(err)
	}
	if out, err := runCommand("healthcheck", "-config", cfgPath); err != nil || out != "ready\n" {
		t.Errorf("healthcheck -config (token file gone): %q, %v", out, err)
	}
	if out, err := runCommand("healthcheck", "-admin", adminAddr); err != nil || out != "ready\n" {
		t.Errorf("healthcheck -admin %s: %q, %v", adminAddr, out, err)
	}

	notReady := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, `{"ready":false}`)
	}))
	defer notReady.Close()
	if _, err := runCommand("healthcheck", "-admin", notReady.URL); err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("healthcheck of a bridge not ready: %v, want a 503 error", err)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := l.Addr().String()
	l.Close()
	if _, err := runCommand("healthcheck", "-admin", gone, "-timeout", "2s"); err == nil || !strings.Contains(err.Error(), "not ready") {
		t.Errorf("healthcheck of no bridge: %v, want an error", err)
	}
}
