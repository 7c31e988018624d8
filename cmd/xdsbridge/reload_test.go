package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xdsbridge/xdsbridge/internal/app"
)

// TestReloadCommandAndHangup: `xdsbridge reload` applies an edited config
// and prints what changed, or fails with the reason the bridge refused it;
// `xdsbridge status sources` shows the sources, a name two of them publish
// with its owner, and a refused reload; SIGHUP reloads as the command does.
func TestReloadCommandAndHangup(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "admin-token"), []byte("0123456789abcdef0123456789abcdef\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("services: {api: {endpoints: [{address: 10.0.0.1, port: 80}]}}\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "b.yaml"), []byte("services: {api: {endpoints: [{address: 10.0.0.2, port: 80}]}, db: {endpoints: [{address: 10.0.0.3, port: 80}]}}\n"), 0o644)
	cfgPath := filepath.Join(dir, "xdsbridge.yaml")
	head := fmt.Sprintf("xds: {listen: \"127.0.0.1:%d\"}\nadmin: {listen: \"127.0.0.1:%d\", token_file: admin-token}\nlogging: {level: warn}\nsources:\n- {name: first, file: {path: a.yaml}}\n", freePort(t), freePort(t))
	write := func(sources string) { os.WriteFile(cfgPath, []byte(head+sources), 0o644) }
	write("")
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
	// SIGHUP must never kill the test process: it is caught here, as run
	// catches it before it builds the app, and handed to serve.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	t.Cleanup(func() { signal.Stop(hup) })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, a, cfgPath, hup) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	for !a.Cache.Ready() {
		time.Sleep(10 * time.Millisecond)
	}

	write("- {name: second, file: {path: b.yaml}}\n")
	out, err := runCommand("reload", "-config", cfgPath)
	if err != nil || out != "config reloaded\n  sources added: second\n  sources unchanged: first\n" {
		t.Fatalf("reload: %v\n%s", err, out)
	}
	waitCommandOutput(t, `(?m)^  api: owned by first, also published by second$`, "status", "sources", "-config", cfgPath)

	// The config read locally fails as well: without -admin the command
	// says so; with the admin address and token given, the bridge refuses
	// it.
	write("- {name: second, file: {path: b.yaml}, priority: 1.5}\n")
	if _, err := runCommand("reload", "-config", cfgPath); err == nil || !strings.Contains(err.Error(), "not 1.5 (the running bridge was not asked: give -admin") {
		t.Fatalf("reload -config of an invalid file: %v", err)
	}
	admin := []string{"-admin", a.AdminAddr(), "-token-file", filepath.Join(dir, "admin-token")}
	out, err = runCommand(append([]string{"reload"}, admin...)...)
	want := "reload refused, the running config stays: " + cfgPath + ": line 6, column 3: sources[1]: priority: want a whole number in -1000..1000, not 1.5"
	if err == nil || err.Error() != want {
		t.Fatalf("reload of an invalid config: %v, want %q\n%s", err, want, out)
	}
	out, err = runCommand(append([]string{"status", "sources"}, admin...)...)
	if err != nil || !regexp.MustCompile(`(?m)^second +SYNCED +2 `).MatchString(out) || !strings.Contains(out, "  api: owned by first, also published by second\n") || !strings.Contains(out, "; last reload REFUSED ") || !strings.Contains(out, "not 1.5") {
		t.Fatalf("status sources: %v\n%s", err, out)
	}

	// SIGHUP, with the config fixed (and second ranked first).
	write("- {name: second, file: {path: b.yaml}, priority: 1}\n")
	deadline := time.Now().Add(10 * time.Second)
	for a.ReloadStatus().Successes < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("no reload after SIGHUP: %+v", a.ReloadStatus())
		}
		syscall.Kill(os.Getpid(), syscall.SIGHUP)
		time.Sleep(50 * time.Millisecond)
	}
	waitCommandOutput(t, `(?m)^  api: owned by second, also published by first$`, "status", "sources", "-config", cfgPath)
}
