package app

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/xdsbridge/xdsbridge/config"
	"github.com/xdsbridge/xdsbridge/internal/testcerts"
)

// writeWebServices writes services.yaml to dir: the service web, one
// endpoint 10.0.0.1:8080.
func writeWebServices(t *testing.T, dir string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "services.yaml"), []byte("services:\n  web:\n    endpoints:\n      - {address: 10.0.0.1, port: 8080}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// certApp writes to a temp dir a CA (ca.pem), a server certificate for
// each of servers (NAME.crt, NAME.key) and services.yaml
// (writeWebServices), and starts the app of the config doc read there.
func certApp(t *testing.T, doc string, servers ...string) (a *App, ca *testcerts.CA, dir string) {
	t.Helper()
	dir = t.TempDir()
	ca = testcerts.NewCA(t, "ca")
	ca.WriteCA(t, dir, "ca.pem")
	for _, name := range servers {
		ca.Server(t).Write(t, dir, name)
	}
	writeWebServices(t, dir)
	cfg, err := config.Parse([]byte(doc), dir, SourceTypeNames())
	if err != nil {
		t.Fatal(err)
	}
	return startApp(t, cfg), ca, dir
}

// runApp builds the app of cfg, listens, runs it and waits until it is
// ready. cancel stops it; done receives what Run returned.
func runApp(t *testing.T, cfg *config.Config) (a *App, done <-chan error, cancel context.CancelFunc) {
	t.Helper()
	a, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- a.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for !a.Cache.Ready() {
		if time.Now().After(deadline) {
			cancel()
			t.Fatal("not ready")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return a, ran, cancel
}

// startApp runs the app of cfg until the test ends (Run must return nil)
// and waits until it is ready.
func startApp(t *testing.T, cfg *config.Config) *App {
	t.Helper()
	a, done, cancel := runApp(t, cfg)
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return a
}

// adminGet GETs url with the Authorization header auth (none when
// empty) and returns the status, the headers and the body.
func adminGet(t *testing.T, url, auth string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}
