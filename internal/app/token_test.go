package app

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xdsbridge/xdsbridge/config"
	"github.com/xdsbridge/xdsbridge/internal/logbuf"
	"github.com/xdsbridge/xdsbridge/internal/testcerts"
)

func TestAdminTokenFileErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, content, want string
	}{
		{"empty", "", "empty"},
		{"newline only", "\n", "empty"},
		{"space inside", "abcdefgh SECRETXYZ\n", "whitespace inside the token"},
		{"tab inside", "abcdefgh\tSECRETXYZ", "whitespace inside the token"},
		{"trailing space", "abcdefghSECRETXYZ \n", "whitespace inside the token"},
		{"short", "SECRETXYZ\n", "the token is 9 bytes; at least 16 are needed"},
		{"control byte", "abcdefgh\x01SECRETXYZ", "not printable ASCII"},
		{"not ASCII", "abcdefghSECRETXYZé", "not printable ASCII"},
		{"too long", strings.Repeat("SECRETXYZ", 500), "longer than 4096 bytes"},
	} {
		p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
		if err := os.WriteFile(p, []byte(tc.content), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := NewAdminToken(p, nil, nil)
		if err == nil || !strings.HasPrefix(err.Error(), "admin.token_file: "+p+": ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v; want admin.token_file: %s: ...%s", tc.name, err, p, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "SECRETXYZ") {
			t.Errorf("%s: the error shows the token: %v", tc.name, err)
		}
	}
	_, err := NewAdminToken(filepath.Join(dir, "absent"), nil, nil)
	if err == nil || !strings.Contains(err.Error(), "admin.token_file: stat "+filepath.Join(dir, "absent")+": no such file") {
		t.Errorf("missing file: error %v", err)
	}
	for _, p := range []string{dir, "/dev/zero"} {
		if _, err := NewAdminToken(p, nil, nil); err == nil || !strings.Contains(err.Error(), "admin.token_file: "+p+": not a regular file") {
			t.Errorf("%s: error %v", p, err)
		}
	}
	for _, ok := range []string{"0123456789abcdef", "0123456789abcdef\n", "0123456789abcdef\r\n", "0123456789abcdef\n\n"} {
		p := filepath.Join(dir, "ok")
		os.WriteFile(p, []byte(ok), 0o600)
		tok, err := NewAdminToken(p, nil, nil)
		if err != nil {
			t.Errorf("%q: %v", ok, err)
			continue
		}
		if !tok.Valid("0123456789abcdef") || tok.Valid("0123456789abcdef\n") || tok.Valid("0123456789abcde") {
			t.Errorf("%q: Valid does not match exactly the trimmed token", ok)
		}
	}
}

// New fails on a bad token file with the field-naming error, the path
// resolved against the config's directory.
func TestNewFailsOnBadTokenFile(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "services.yaml"), []byte("services: {}\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "tok"), []byte("SECRETXYZ\n"), 0o600)
	cfg, err := config.Parse([]byte("admin: {token_file: tok}\nsources: [{name: s, file: {path: services.yaml}}]\n"), dir, SourceTypeNames())
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil || !strings.Contains(err.Error(), "admin.token_file: "+filepath.Join(dir, "tok")+": the token is 9 bytes") {
		t.Fatalf("New: %v", err)
	}
}

// The whole app with admin.token_file: /debug/* needs the token, probes
// and /metrics do not; refusals are counted; a rotated token is picked up;
// an emptied file keeps the last good token; no token reaches the log.
func TestAdminTokenGuardsDebug(t *testing.T) {
	const (
		tok1  = "first-token-0123456789"
		tok2  = "second-token-ABCDEFGHIJ"
		wrong = "wrong-token-zyxwvutsrq"
	)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "services.yaml"), []byte("services: {web: {endpoints: [{address: 10.0.0.1, port: 80}]}}\n"), 0o644)
	tokPath := filepath.Join(dir, "admin.token")
	testcerts.WriteFile(t, tokPath, []byte(tok1+"\n"))
	cfg, err := config.Parse([]byte(`
xds: {listen: "127.0.0.1:0"}
admin: {listen: "127.0.0.1:0", token_file: admin.token}
sources: [{name: s, file: {path: services.yaml}}]
`), dir, SourceTypeNames())
	if err != nil {
		t.Fatal(err)
	}
	var logs logbuf.Buffer
	a, err := New(cfg, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	a.Token.interval = 20 * time.Millisecond
	if err := a.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	var stopOnce sync.Once
	stop := func() {
		stopOnce.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	defer stop()
	base := "http://" + a.AdminAddr()
	get := func(path, auth string) (int, http.Header, string) {
		t.Helper()
		return adminGet(t, base+path, auth)
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	waitFor("ready", a.Cache.Ready)

	for _, p := range []string{"/healthz", "/livez", "/readyz", "/metrics"} {
		if code, _, _ := get(p, ""); code != http.StatusOK {
			t.Errorf("%s without a token: %d, want 200", p, code)
		}
	}
	for _, p := range []string{"/debug/resources", "/debug/sources", "/debug/hosts", "/debug/clients"} {
		for _, auth := range []string{"", "Bearer " + wrong, "Basic " + tok1, "Bearer", "Bearer " + tok1 + "x"} {
			code, h, body := get(p, auth)
			if code != http.StatusUnauthorized || !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("%s with %q: %d, WWW-Authenticate %q; want 401, Bearer", p, auth, code, h.Get("WWW-Authenticate"))
			}
			if strings.Contains(body, "web") {
				t.Errorf("%s with %q: a 401 leaks the content: %s", p, auth, body)
			}
		}
		if code, _, _ := get(p, "Bearer "+tok1); code != http.StatusOK {
			t.Errorf("%s with the token: %d, want 200", p, code)
		}
	}
	if code, _, body := get("/debug/sources", "bearer "+tok1); code != http.StatusOK || !strings.Contains(body, `"name": "s"`) {
		t.Errorf("lower-case scheme: %d %s", code, body)
	}
	_, _, metrics := get("/metrics", "")
	for _, want := range []string{`xdsbridge_admin_unauthorized_total{reason="missing"} 12`, `xdsbridge_admin_unauthorized_total{reason="invalid"} 8`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}

	// Rotation: the new token works, the old one no longer does.
	testcerts.WriteFile(t, tokPath, []byte(tok2+"\n"))
	waitFor("the rotated token", func() bool { c, _, _ := get("/debug/clients", "Bearer "+tok2); return c == http.StatusOK })
	if code, _, _ := get("/debug/clients", "Bearer "+tok1); code != http.StatusUnauthorized {
		t.Errorf("the old token after rotation: %d, want 401", code)
	}

	// An emptied file (and a token with a space) keeps the last good token.
	testcerts.WriteFile(t, tokPath, nil)
	waitFor("the WARN about the emptied file", func() bool { return strings.Contains(logs.String(), "empty") })
	testcerts.WriteFile(t, tokPath, []byte("almost a token but spaced\n"))
	waitFor("the WARN about whitespace", func() bool { return strings.Contains(logs.String(), "whitespace") })
	time.Sleep(100 * time.Millisecond) // a few more failed re-reads
	if code, _, _ := get("/debug/clients", "Bearer "+tok2); code != http.StatusOK {
		t.Errorf("the last good token after a failed re-read: %d, want 200", code)
	}
	if code, _, _ := get("/debug/clients", "Bearer almost"); code != http.StatusUnauthorized {
		t.Errorf("part of the invalid file's content: %d, want 401", code)
	}
	if n := strings.Count(logs.String(), "level=WARN msg=\"admin token file did not load"); n != 2 {
		t.Errorf("%d WARNs for 2 distinct failures (each logged once):\n%s", n, logs.String())
	}

	stop()
	out := logs.String()
	for _, secret := range []string{tok1, tok2, wrong, "almost a token", "Authorization", "Bearer"} {
		if strings.Contains(out, secret) {
			t.Errorf("the log shows %q:\n%s", secret, out)
		}
	}
	if !strings.Contains(out, "admin token changed") {
		t.Errorf("no INFO about the rotation:\n%s", out)
	}
}
