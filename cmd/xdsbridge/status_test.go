package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/xdsbridge/xdsbridge/internal/app"
	"github.com/xdsbridge/xdsbridge/xds"
)

// freePort returns a loopback port free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startStatusBridge runs the app of a config written for the test (the file
// source on examples/services.yaml, an admin token file, free ports) until
// the test ends; it returns
// the config file, the token file, the admin and the xDS addresses.
func startStatusBridge(t *testing.T) (cfgPath, tokenPath, adminAddr, xdsAddr string) {
	t.Helper()
	dir := t.TempDir()
	tokenPath = filepath.Join(dir, "admin-token")
	if err := os.WriteFile(tokenPath, []byte("0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	services, err := filepath.Abs("../../examples/services.yaml")
	if err != nil {
		t.Fatal(err)
	}
	xdsAddr, adminAddr = fmt.Sprintf("127.0.0.1:%d", freePort(t)), fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cfg := fmt.Sprintf("xds:\n  listen: %s\nadmin:\n  listen: %s\n  token_file: %s\nlogging:\n  level: warn\nsources:\n  - name: static\n    file:\n      path: %s\n",
		xdsAddr, adminAddr, tokenPath, services)
	cfgPath = filepath.Join(dir, "xdsbridge.yaml")
	a := runConfigApp(t, cfgPath, cfg)
	return cfgPath, tokenPath, a.AdminAddr(), a.XDSAddr()
}

// runConfigApp writes cfg to cfgPath and runs its app until the test ends.
func runConfigApp(t *testing.T, cfgPath, cfg string) *app.App {
	t.Helper()
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := loadConfig(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	a, err := app.New(c, dumpLogger(c.Logging, &bytes.Buffer{}))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return a
}

// runCommand runs xdsbridge with args and returns its output.
func runCommand(args ...string) (string, error) {
	var out, errOut bytes.Buffer
	err := run(args, &out, &errOut)
	return out.String() + errOut.String(), err
}

// waitCommandOutput runs args until the output matches re (10 s at most).
func waitCommandOutput(t *testing.T, re string, args ...string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := runCommand(args...)
		if err == nil && regexp.MustCompile(re).MatchString(out) {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("xdsbridge %s: no %q in:\n%s\nerror %v", strings.Join(args, " "), re, out, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// `xdsbridge status` against a running bridge with an admin token: the
// table of clients (a delta Envoy-like client holding its ACK is STALE,
// then SYNCED), -node's resources and versions, `status hosts SERVICE`, and
// the errors that name what is missing.
func TestStatusCommand(t *testing.T) {
	cfgPath, tokenPath, adminAddr, xdsAddr := startStatusBridge(t)
	cc, err := grpc.NewClient(xdsAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := discovery.NewAggregatedDiscoveryServiceClient(cc).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	node := &core.Node{Id: "ss-envoy-1", Cluster: "edge"}
	if err := st.Send(&discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: xds.ClusterType}); err != nil {
		t.Fatal(err)
	}
	r, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Resources) != 3 {
		t.Fatalf("%d clusters, want 3", len(r.Resources))
	}

	// From -config: admin.listen and admin.token_file.
	out := waitCommandOutput(t, `(?m)^ss-envoy-1 +\d+ +delta .* clusters +STALE +- +\d+ +\* +- +since `, "status", "-config", cfgPath)
	t.Logf("holding the ACK:\n%s", out)
	if err := st.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: xds.ClusterType, ResponseNonce: r.Nonce}); err != nil {
		t.Fatal(err)
	}
	out = waitCommandOutput(t, `(?m)^ss-envoy-1 +\d+ +delta .* clusters +SYNCED +(\d+) +(\d+) +\* +- *$`, "status", "-admin", adminAddr, "-token-file", tokenPath)
	t.Logf("after the ACK:\n%s", out)
	for _, want := range []string{"1 streams; types: 1 SYNCED, 0 STALE, 0 NACKED, 0 NOT_SENT; 0 NACKs since start\n", "NODE  ", "  STATE  ", "  LATENCY LAST/P50/P99  "} {
		if !strings.Contains(out, want) {
			t.Fatalf("no %q in:\n%s", want, out)
		}
	}
	m := regexp.MustCompile(`clusters +SYNCED +(\d+) +(\d+)`).FindStringSubmatch(out)
	if m[1] != m[2] {
		t.Fatalf("acked %s, current %s", m[1], m[2])
	}

	out, err = runCommand("status", "-admin", "http://"+adminAddr, "-token-file", tokenPath, "-node", "ss-envoy-1")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Logf("-node:\n%s", out)
	for _, re := range []string{`^node ss-envoy-1 \(cluster edge\): delta stream \d+ \(ads\) from 127\.0\.0\.1:\d+, connected `,
		`(?m)^clusters +SYNCED +\d+ +\d+ +\d+ +\* +- +0 *$`,
		`(?m)^clusters +api +[0-9a-f]{24} +[0-9a-f]{24} +yes$`, `(?m)^clusters +legacy +`, `(?m)^clusters +web +`} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Fatalf("no %q in -node output", re)
		}
	}
	if n := strings.Count(out, " yes\n"); n != 3 {
		t.Fatalf("%d resources synced, want 3", n)
	}

	out, err = runCommand("status", "hosts", "web", "-admin", adminAddr, "-token-file", tokenPath)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Logf("hosts web:\n%s", out)
	for _, re := range []string{`(?m)^SERVICE +HOST +DISCOVERED +SOURCE +SOURCE HEALTH +CHECK +PUBLISHED +HEALTH`,
		`(?m)^web +127\.0\.0\.1:8081 +yes +static +`, `(?m)^web +127\.0\.0\.1:8082 +yes +static +`} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Fatalf("no %q in hosts output", re)
		}
	}
	if strings.Contains(out, "api") {
		t.Fatalf("hosts web lists another service:\n%s", out)
	}

	// Errors name what is missing.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"status", "-admin", adminAddr}, "needs a token"},
		{[]string{"status", "-config", cfgPath, "-node", "nobody"}, `no client with node id "nobody"`},
		{[]string{"status", "-config", cfgPath, "hosts", "nope"}, `service "nope" has no hosts`},
		{[]string{"status", "-config", cfgPath, "clients"}, "unexpected arguments"},
	} {
		if out, err := runCommand(c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%v: error %v, want %q\n%s", c.args, err, c.want, out)
		}
	}
}

// `xdsbridge -h` and `xdsbridge help` list every command, one line each,
// and each one's flags; `xdsbridge COMMAND -h` that command's.
func TestHelpListsCommands(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"help"}, {"--help"}} {
		out, err := runCommand(args...)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		for _, re := range []string{`(?m)^  run +serve xDS`, `(?m)^  validate +check`, `(?m)^  dump +print`, `(?m)^  status +a running bridge`, `(?m)^  reload +make a running bridge read its config`,
			`(?m)^xdsbridge run `, `(?m)^xdsbridge validate `, `(?m)^xdsbridge dump `, `(?m)^xdsbridge status `,
			`(?m)^  -format string`, `(?m)^  -out string`, `(?m)^  -admin string`, `(?m)^  -node string`, `(?m)^  -token-file string`} {
			if !regexp.MustCompile(re).MatchString(out) {
				t.Fatalf("%v: no %q in:\n%s", args, re, out)
			}
		}
		if n := strings.Count(out, "  -config string"); n != 6 {
			t.Fatalf("%v: -config listed %d times, want once per command", args, n)
		}
	}
	out, err := runCommand("status", "-h")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out, "Usage: xdsbridge status ") || !strings.Contains(out, "-node string") || strings.Contains(out, "-format") {
		t.Fatalf("status -h:\n%s", out)
	}
	if _, err := runCommand("statsu"); err == nil || !strings.Contains(err.Error(), `unknown command "statsu"`) {
		t.Fatalf("unknown command: %v", err)
	}
}

// `xdsbridge dump` prints the resources and no serving log lines.
func TestDumpPrintsNoLogLines(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := run([]string{"dump", "-config", "../../examples/xdsbridge.yaml", "-format", "json"}, &out, &errOut); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	if errOut.Len() != 0 {
		t.Fatalf("dump wrote to stderr:\n%s", errOut.String())
	}
	if !strings.HasPrefix(out.String(), "{") || strings.Contains(out.String(), "level=") {
		t.Fatalf("dump output is not the resources alone:\n%.300s", out.String())
	}
}
