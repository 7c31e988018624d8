package main

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xdsbridge/xdsbridge/xds"
)

// admin.token_file is relative to the config file's directory (as the
// server reads it: config.Path); `xdsbridge status -config FILE` run from
// elsewhere must read the same file.
func TestStatusTokenFileRelativeToConfig(t *testing.T) {
	const token = "0123456789abcdef0123456789abcdef"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		fmt.Fprint(w, `{"clients":[],"nacks":0}`)
	}))
	defer srv.Close()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "admin-token"), []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	services, err := filepath.Abs("../../examples/services.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf("admin:\n  listen: %s\n  token_file: admin-token\nsources:\n  - name: static\n    file:\n      path: %s\n",
		strings.TrimPrefix(srv.URL, "http://"), services)
	cfgPath := filepath.Join(dir, "xdsbridge.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	// The test runs in the package directory, not dir.
	out, err := runCommand("status", "-config", cfgPath)
	if err != nil {
		t.Fatalf("status -config %s (token_file relative to it): %v\n%s", cfgPath, err, out)
	}
}

// Node ids and clusters come from any xDS client; `xdsbridge status`
// must not write their control characters (terminal escape sequences, new
// lines that forge rows) to the operator's terminal.
func TestStatusPrintsNoControlCharacters(t *testing.T) {
	evil := "ok\x1b]0;pwned\x07\x1b[2J\nFORGED\tROW\r"
	now := time.Now()
	st := xds.ClientStatus{Node: evil, Cluster: evil, Peer: evil, Mode: "delta", TypeURL: "ads", Connected: now,
		Types: []xds.TypeStatus{{Type: "clusters", State: xds.Synced, Current: "1", Behind: []string{evil}}}}
	var b bytes.Buffer
	printClients(&b, []xds.ClientStatus{st}, 0, now)
	printNode(&b, []xds.ClientStreamDetail{{ClientStatus: st, Resources: []xds.ResourceSync{{Type: "clusters", Name: evil, Current: "1"}}}}, now)
	for _, line := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(line, "FORGED") {
			t.Errorf("a node id forged a line: %q", line)
		}
		for _, r := range line {
			if r < 0x20 || r == 0x7f {
				t.Fatalf("control character %q written to the terminal in %q", r, line)
			}
		}
	}
}

// With admin.tls in -config, `status -config FILE -admin HOST:PORT` must
// speak https: over plain http the bearer token crosses the network in
// clear text (the TLS listener then answers 400, too late).
func TestStatusAdminAddrKeepsConfigTLS(t *testing.T) {
	const token = "0123456789abcdef0123456789abcdef"
	leaked := make(chan string, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		leaked <- r.Header.Get("Authorization")
		fmt.Fprint(w, `{"clients":[],"nacks":0}`)
	}))
	defer srv.Close()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "admin-token"), []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	services, err := filepath.Abs("../../examples/services.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf("admin:\n  listen: 127.0.0.1:1\n  token_file: admin-token\n  tls: {cert_file: c.pem, key_file: k.pem}\nsources:\n  - name: static\n    file:\n      path: %s\n", services)
	cfgPath := filepath.Join(dir, "xdsbridge.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := runCommand("status", "-config", cfgPath, "-admin", strings.TrimPrefix(srv.URL, "http://"))
	select {
	case h := <-leaked:
		t.Fatalf("the token went over plain http (Authorization %q); status: %v\n%s", h, err, out)
	default:
	}
}
