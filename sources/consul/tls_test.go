package consul

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdsbridge/xdsbridge/internal/logbuf"
	"github.com/xdsbridge/xdsbridge/internal/testcerts"
	"github.com/xdsbridge/xdsbridge/sources"
	"github.com/xdsbridge/xdsbridge/sources/sourcestest"
)

// clearConsulTLSEnv keeps the test's environment's CONSUL_* TLS variables
// out of the way.
func clearConsulTLSEnv(t *testing.T) {
	for _, k := range []string{"CONSUL_CACERT", "CONSUL_CAPATH", "CONSUL_CLIENT_CERT", "CONSUL_CLIENT_KEY", "CONSUL_TLS_SERVER_NAME", "CONSUL_HTTP_SSL_VERIFY", "CONSUL_HTTP_SSL", "CONSUL_HTTP_ADDR"} {
		t.Setenv(k, "")
	}
}

// Each way a CA or client certificate can be mis-set is an error at New
// naming the field and the file.
func TestTLSLoadErrorsNameTheField(t *testing.T) {
	clearConsulTLSEnv(t)
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "agent-ca")
	leaf := ca.Issue(t, testcerts.LeafOptions{CommonName: "bridge"})
	other := ca.Issue(t, testcerts.LeafOptions{CommonName: "other"})
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("ca.pem", ca.PEM)
	certPEM, keyPEM := leaf.Write(t, dir, "bridge")
	notPEM := write("not.pem", []byte("just some text\n"))
	keyOnly := write("keyonly.pem", leaf.KeyPEM)
	badDER := write("bad-der.pem", []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"))
	otherKey := write("other.key", other.KeyPEM)
	write("cadir-bad/a.pem", ca.PEM)
	write("cadir-bad/b.txt", []byte("not a cert"))
	if err := os.MkdirAll(filepath.Join(dir, "cadir-empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	write("cadir-good/sub/a.pem", ca.PEM)
	write("big.pem", bytes.Repeat(ca.PEM, 4<<20/len(ca.PEM)+1))
	// A Kubernetes-style volume: files linked through ..data, a link to a
	// directory the walk skips.
	write("cadir-k8s/..2026/ca.crt", ca.PEM)
	if err := os.Symlink("..2026", filepath.Join(dir, "cadir-k8s", "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..data/ca.crt", filepath.Join(dir, "cadir-k8s", "ca.crt")); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct{ tls, want string }{
		{`{"ca_file": "absent.pem"}`, "tls.ca_file: open " + filepath.Join(dir, "absent.pem") + ": no such file"},
		{`{"ca_file": "not.pem"}`, "tls.ca_file: " + notPEM + ": not PEM"},
		{`{"ca_file": "keyonly.pem"}`, "tls.ca_file: " + keyOnly + ": no certificates found"},
		{`{"ca_file": "bad-der.pem"}`, "tls.ca_file: " + badDER + ": certificate 1: x509:"},
		{`{"ca_path": "absent-dir"}`, "tls.ca_path: lstat " + filepath.Join(dir, "absent-dir") + ": no such file"},
		{`{"ca_path": "cadir-empty"}`, "tls.ca_path: " + filepath.Join(dir, "cadir-empty") + ": no certificates found"},
		{`{"ca_path": "cadir-bad"}`, "tls.ca_path: " + filepath.Join(dir, "cadir-bad", "b.txt") + ": not PEM"},
		{`{"ca_file": "ca.pem", "ca_path": "cadir-bad"}`, "tls.ca_path: "}, // both are checked
		{`{"cert_file": "absent.crt", "key_file": "bridge.key"}`, "tls.cert_file: open " + filepath.Join(dir, "absent.crt")},
		{`{"cert_file": "bridge.crt", "key_file": "absent.key"}`, "tls.key_file: open " + filepath.Join(dir, "absent.key")},
		{`{"cert_file": "bridge.key", "key_file": "bridge.key"}`, "tls.cert_file: " + keyPEM + ": no certificates found"},
		{`{"cert_file": "bridge.crt", "key_file": "bridge.crt"}`, "tls.key_file: " + certPEM + ": no private key found"},
		{`{"cert_file": "bridge.crt", "key_file": "other.key"}`, "tls.cert_file, tls.key_file: " + certPEM + ", " + otherKey + ": private key does not match public key"},
		{`{"cert_file": "not.pem", "key_file": "bridge.key"}`, "tls.cert_file: " + notPEM + ": not PEM"},
		{`{"ca_file": "/dev/zero"}`, "tls.ca_file: /dev/zero: not a regular file"},
		{`{"ca_file": "cadir-good"}`, "tls.ca_file: " + filepath.Join(dir, "cadir-good") + ": not a regular file"},
		{`{"ca_file": "big.pem"}`, "tls.ca_file: " + filepath.Join(dir, "big.pem") + ": larger than 4 MiB"},
		{`{"cert_file": "bridge.crt", "key_file": "/dev/null"}`, "tls.key_file: /dev/null: not a regular file"},
	} {
		_, err := New("c", json.RawMessage(`{"tls": `+tc.tls+`}`), sources.Env{BaseDir: dir})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("tls %s: error %v; want one with %q", tc.tls, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "PRIVATE KEY-----") {
			t.Errorf("tls %s: the error shows key material: %v", tc.tls, err)
		}
	}

	// From the environment: the field says so.
	t.Setenv("CONSUL_CACERT", filepath.Join(dir, "absent.pem"))
	_, err := New("c", json.RawMessage(`{}`), sources.Env{BaseDir: dir})
	if want := "tls.ca_file (from CONSUL_CACERT): open " + filepath.Join(dir, "absent.pem"); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("CONSUL_CACERT: error %v; want %q", err, want)
	}
	t.Setenv("CONSUL_CACERT", "")

	// What loads is what the client uses.
	for _, raw := range []string{
		`{"tls": {"ca_file": "ca.pem", "cert_file": "bridge.crt", "key_file": "bridge.key", "server_name": "consul.example:8501"}}`,
		`{"tls": {"ca_path": "cadir-good", "cert_file": "bridge.crt", "key_file": "bridge.key", "server_name": "consul.example"}}`,
		`{"tls": {"ca_path": "cadir-k8s", "cert_file": "bridge.crt", "key_file": "bridge.key", "server_name": "consul.example"}}`,
	} {
		src, err := New("c", json.RawMessage(raw), sources.Env{BaseDir: dir})
		if err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		c := src.(*Source).set.tls.config
		if c.RootCAs == nil || !c.RootCAs.Equal(poolWith(ca.Cert)) || len(c.Certificates) != 1 || c.ServerName != "consul.example" {
			t.Errorf("%s: TLS config %+v", raw, c)
		}
	}
}

func poolWith(certs ...*x509.Certificate) *x509.CertPool {
	p := x509.NewCertPool()
	for _, c := range certs {
		p.AddCert(c)
	}
	return p
}

// tlsAgent is an HTTPS server standing for a Consul agent; it counts TLS
// handshakes started. The handler is never reached when a handshake fails.
func tlsAgent(t *testing.T, cfg *tls.Config) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var hellos atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "not a real agent", http.StatusInternalServerError)
	}))
	cfg.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		hellos.Add(1)
		return nil, nil
	}
	srv.TLS = cfg
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshake errors the test provokes
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, &hellos
}

// At run time, a TLS failure against the agent is logged at ERROR naming
// the source, the agent address and the field to check, once while it
// lasts, and reported to the sink with the same words; the source keeps
// retrying.
func TestTLSRunTimeFailuresNameTheField(t *testing.T) {
	clearConsulTLSEnv(t)
	dir := t.TempDir()
	agentCA := testcerts.NewCA(t, "agent-ca")
	otherCA := testcerts.NewCA(t, "other-ca")
	agentCert := agentCA.Server(t)
	serverCert, err := tls.X509KeyPair(agentCert.CertPEM, agentCert.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	agentCA.WriteCA(t, dir, "agent-ca.pem")
	otherCA.WriteCA(t, dir, "other-ca.pem")
	agentCA.Issue(t, testcerts.LeafOptions{CommonName: "bridge"}).Write(t, dir, "good-client")
	otherCA.Issue(t, testcerts.LeafOptions{CommonName: "bridge"}).Write(t, dir, "stranger")
	agentCA.Issue(t, testcerts.LeafOptions{CommonName: "bridge", NotAfter: time.Now().Add(-30 * time.Minute)}).Write(t, dir, "expired")

	for _, tc := range []struct {
		name       string
		clientAuth bool
		tls        string
		want       []string
	}{
		{"agent signed by another CA", false, `{"ca_file": "other-ca.pem"}`,
			[]string{"the agent's certificate is not signed by a CA in tls.ca_file (" + filepath.Join(dir, "other-ca.pem") + ")", "(check tls.ca_file)"}},
		{"client certificate refused", true, `{"ca_file": "agent-ca.pem", "cert_file": "stranger.crt", "key_file": "stranger.key"}`,
			[]string{"the one in tls.cert_file (" + filepath.Join(dir, "stranger.crt") + ") is not", "(check tls.cert_file)"}},
		{"client certificate expired", true, `{"ca_file": "agent-ca.pem", "cert_file": "expired.crt", "key_file": "expired.key"}`,
			[]string{"the agent refused the client certificate in tls.cert_file (" + filepath.Join(dir, "expired.crt") + "): tls: expired certificate", "(check tls.cert_file)"}},
		{"no client certificate", true, `{"ca_file": "agent-ca.pem"}`,
			[]string{"it wants a client certificate and none is set", "(check tls.cert_file)"}},
		{"wrong server name", false, `{"ca_file": "agent-ca.pem", "server_name": "consul.example"}`,
			[]string{"not valid for the name consul.example", "(check tls.server_name)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &tls.Config{Certificates: []tls.Certificate{serverCert}}
			if tc.clientAuth {
				cfg.ClientAuth, cfg.ClientCAs = tls.RequireAndVerifyClientCert, poolWith(agentCA.Cert)
			}
			srv, hellos := tlsAgent(t, cfg)
			var logs logbuf.Buffer
			raw := fmt.Sprintf(`{"address": %q, "retry_min": "5ms", "retry_max": "20ms", "tls": %s}`, srv.URL, tc.tls)
			src, err := New("edge", json.RawMessage(raw), sources.Env{BaseDir: dir, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			sink := sourcestest.Run(t, src, 10*time.Second)
			sink.WaitFor(t, 10*time.Second, "a reported error", func(_ []sources.Update, errs []error) bool { return len(errs) > 0 })
			for deadline := time.Now().Add(10 * time.Second); hellos.Load() < 6; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("the source stopped retrying after %d handshakes", hellos.Load())
				}
			}
			out := logs.String()
			lines := 0
			for _, l := range strings.Split(out, "\n") {
				if strings.Contains(l, "level=ERROR") && strings.Contains(l, "TLS with the Consul agent") {
					lines++
					for _, w := range append([]string{"consul source edge:", "at " + srv.URL + " failed", "source=edge", "address=" + srv.URL}, tc.want...) {
						if !strings.Contains(l, w) {
							t.Errorf("the ERROR lacks %q:\n%s", w, l)
						}
					}
				}
			}
			if lines != 1 {
				t.Errorf("%d ERROR lines over %d handshakes, want 1 (once while it lasts):\n%s", lines, hellos.Load(), out)
			}
			errs := sink.Errors()
			for _, w := range tc.want {
				if !strings.Contains(errs[0].Error(), w) {
					t.Errorf("the error reported to the sink lacks %q: %v", w, errs[0])
				}
			}
		})
	}
}

// An https address on a plain HTTP agent names scheme.
func TestTLSAgentWithoutTLS(t *testing.T) {
	clearConsulTLSEnv(t)
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	var logs logbuf.Buffer
	raw := fmt.Sprintf(`{"address": %q, "scheme": "https", "retry_min": "5ms", "retry_max": "20ms"}`, strings.TrimPrefix(srv.URL, "http://"))
	src, err := New("edge", json.RawMessage(raw), sources.Env{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	sink := sourcestest.Run(t, src, 10*time.Second)
	sink.WaitFor(t, 10*time.Second, "a reported error", func(_ []sources.Update, errs []error) bool { return len(errs) > 0 })
	if out := logs.String(); !strings.Contains(out, "level=ERROR") || !strings.Contains(out, "check=scheme") || !strings.Contains(out, "https://"+strings.TrimPrefix(srv.URL, "http://")) {
		t.Errorf("log:\n%s", out)
	}
}
