package consul

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/xdsbridge/xdsbridge/sources"
)

// An agent address without a port takes Consul's HTTP port 8500, as
// Consul's own clients do; trailing slashes are dropped; a reverse proxy's
// path under a URL is kept; what cannot be an address is refused with
// what was expected.
func TestAddressNormalized(t *testing.T) {
	for _, tc := range []struct{ in, want, wantErr string }{
		{in: "127.0.0.1", want: "127.0.0.1:8500"},
		{in: "127.0.0.1:8501", want: "127.0.0.1:8501"},
		{in: "127.0.0.1:", want: "127.0.0.1:8500"},
		{in: "consul.internal", want: "consul.internal:8500"},
		{in: "::1", want: "[::1]:8500"},
		{in: "[::1]", want: "[::1]:8500"},
		{in: "[::1]:8600", want: "[::1]:8600"},
		{in: "127.0.0.1:8500/", want: "127.0.0.1:8500"},
		{in: "http://127.0.0.1:8500/", want: "http://127.0.0.1:8500"},
		{in: "https://consul.internal//", want: "https://consul.internal:8500"},
		{in: "https://gw.example/consul/", want: "https://gw.example:8500/consul"},
		{in: "ftp://127.0.0.1", wantErr: `address: "ftp://127.0.0.1": the scheme is not http or https`},
		{in: "127.0.0.1:8500/consul", wantErr: `address: "127.0.0.1:8500/consul": an address with a path needs its scheme (e.g. "http://127.0.0.1:8500/consul")`},
		{in: "127.0.0.1:http", wantErr: `address: "127.0.0.1:http": port "http" is not a number in 1..65535`},
		{in: "http:///", wantErr: `address: "http:///": no host (expected host:port, e.g. "127.0.0.1:8500")`},
	} {
		raw, _ := json.Marshal(map[string]string{"address": tc.in})
		set, err := parseConfig(raw, "")
		if tc.wantErr != "" {
			if err == nil || err.Error() != tc.wantErr {
				t.Errorf("%q: error %v; want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || set.apiConfig.Address != tc.want {
			t.Errorf("%q: address %q, %v; want %q", tc.in, set.apiConfig.Address, err, tc.want)
		}
	}
}

// With a trailing slash, requests still reach the API's paths (they were
// sent to "//v1/...", a 404).
func TestAddressTrailingSlashReachesTheAPI(t *testing.T) {
	var mu sync.Mutex
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.Path)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`"127.0.0.1:8300"`))
	}))
	defer srv.Close()
	raw, _ := json.Marshal(map[string]string{"address": srv.URL + "/"})
	s, err := New("c", raw, sources.Env{})
	if err != nil {
		t.Fatal(err)
	}
	client, transport, err := s.(*Source).newClient(1, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer transport.CloseIdleConnections()
	if _, err := client.Status().Leader(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(paths) != 1 || paths[0] != "/v1/status/leader" {
		t.Errorf("request paths %q; want [/v1/status/leader]", paths)
	}
}

// A token file that cannot be read is an error of the config, naming the
// field and the resolved path, not of the first connection.
func TestTokenFileReadAtConfig(t *testing.T) {
	dir := t.TempDir()
	_, err := New("c", json.RawMessage(`{"token_file": "missing-token"}`), sources.Env{BaseDir: dir})
	want := "token_file: open " + filepath.Join(dir, "missing-token") + ": no such file or directory"
	if err == nil || err.Error() != want {
		t.Errorf("error %v; want %q", err, want)
	}
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte("secret-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New("c", json.RawMessage(`{"token_file": "token"}`), sources.Env{BaseDir: dir}); err != nil {
		t.Errorf("a readable token file: %v", err)
	}
	t.Setenv("CONSUL_HTTP_TOKEN_FILE", filepath.Join(dir, "env-missing"))
	_, err = New("c", json.RawMessage(`{}`), sources.Env{BaseDir: dir})
	if err == nil || !strings.HasPrefix(err.Error(), "token_file (from CONSUL_HTTP_TOKEN_FILE): open ") {
		t.Errorf("from the environment: error %v", err)
	}
}

// FuzzNormalizeAddress: an address the source accepts is stable under
// normalizing again, ends in no slash, and its host:port part has a port.
func FuzzNormalizeAddress(f *testing.F) {
	for _, s := range []string{"127.0.0.1", "127.0.0.1:8500/", "http://consul:8500//", "https://gw.example/consul/", "::1", "[::1]", "[::1]:x", "ftp://a", "a:0", "http:///", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, addr string) {
		out, err := normalizeAddress(addr)
		if err != nil {
			return
		}
		again, err := normalizeAddress(out)
		if err != nil || again != out {
			t.Fatalf("%q -> %q -> %q, %v", addr, out, again, err)
		}
		if strings.HasSuffix(out, "/") {
			t.Fatalf("%q -> %q ends in a slash", addr, out)
		}
		_, rest, ok := strings.Cut(out, "://")
		if !ok {
			rest = out
		}
		hostPort, _, _ := strings.Cut(rest, "/")
		if _, port, err := net.SplitHostPort(hostPort); err != nil || port == "" {
			t.Fatalf("%q -> %q: host:port %q has no port (%v)", addr, out, hostPort, err)
		}
	})
}
