package app

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xdsbridge/xdsbridge/config"
	"github.com/xdsbridge/xdsbridge/internal/testcerts"
)

// statusApp runs an app on a file source of two services (one of them
// with a host DRAINING) and, when token is not empty, admin.token_file.
func statusApp(t *testing.T, token string) *App {
	t.Helper()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "services.yaml"), []byte(`services:
  web: {endpoints: [{address: 10.0.0.1, port: 80}, {address: 10.0.0.2, port: 80, health: draining}]}
  api: {endpoints: [{address: 10.0.0.3, port: 81}]}
`), 0o644)
	os.WriteFile(filepath.Join(dir, "policy.yaml"), []byte("services:\n  web: {protocol: http2}\n"), 0o644)
	admin := `admin: {listen: "127.0.0.1:0"}`
	if token != "" {
		testcerts.WriteFile(t, filepath.Join(dir, "admin.token"), []byte(token+"\n"))
		admin = `admin: {listen: "127.0.0.1:0", token_file: admin.token}`
	}
	cfg, err := config.Parse([]byte(`
xds: {listen: "127.0.0.1:0"}
`+admin+`
sources: [{name: files, file: {path: services.yaml}}, {name: pol, policy_file: {path: policy.yaml}}]
`), dir, SourceTypeNames())
	if err != nil {
		t.Fatal(err)
	}
	return startApp(t, cfg)
}

// The status page at / shows the app's sources, services counted by health
// with their owner, and the selected service's hosts with their rule;
// other paths stay 404.
func TestStatusPage(t *testing.T) {
	a := statusApp(t, "")
	base := "http://" + a.AdminAddr()
	code, h, body := adminGet(t, base+"/?service=web", "")
	if code != http.StatusOK || !strings.HasPrefix(h.Get("Content-Type"), "text/html") || !strings.Contains(h.Get("Content-Security-Policy"), "default-src 'none'") {
		t.Fatalf("GET /: %d %v", code, h)
	}
	for _, want := range []string{
		`<tr class="source" data-name="files">`, `<span class="badge synced">SYNCED</span>`,
		`<tr class="service sel" data-name="web">`, `<tr class="service" data-name="api">`,
		`<td>files</td>`, `<td>pol: web</td>`,
		`<tr class="host" data-host="10.0.0.2:80">`, `<span class="badge draining">DRAINING</span>`,
		"source drains the host: DRAINING wins over health checks",
		"discovered, no health check: source health stands",
		`<span id="ready" class="badge ok">READY</span>`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("GET /?service=web lacks %q", want)
		}
	}
	for _, p := range []string{"/nope", "/debug/"} {
		if code, _, _ := adminGet(t, base+p, ""); code != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", p, code)
		}
	}
}

// With admin.token_file the page needs the token, as /debug/* does.
func TestStatusPageGuarded(t *testing.T) {
	const tok = "status-token-0123456789"
	a := statusApp(t, tok)
	base := "http://" + a.AdminAddr()
	for _, auth := range []string{"", "Bearer wrong-token-0123456789"} {
		code, _, body := adminGet(t, base+"/", auth)
		if code != http.StatusUnauthorized || strings.Contains(body, "web") {
			t.Errorf("GET / with %q: %d (%d bytes), want 401 without content", auth, code, len(body))
		}
	}
	if code, _, body := adminGet(t, base+"/?fragment=1", "Bearer "+tok); code != http.StatusOK || !strings.Contains(body, `data-name="web"`) {
		t.Errorf("GET / with the token: %d\n%s", code, body)
	}
}
