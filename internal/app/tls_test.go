package app

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/xdsbridge/xdsbridge/config"
	"github.com/xdsbridge/xdsbridge/internal/testcerts"
)

const clusterType = "type.googleapis.com/envoy.config.cluster.v3.Cluster"

// tlsApp writes a CA, server certificates and a one-service file to a temp
// dir and starts the app with xds.tls (mTLS) and admin.tls (TLS).
func tlsApp(t *testing.T) (a *App, ca *testcerts.CA) {
	t.Helper()
	dir := t.TempDir()
	ca = testcerts.NewCA(t, "ca")
	ca.WriteCA(t, dir, "ca.pem")
	ca.Server(t).Write(t, dir, "xds")
	ca.Server(t).Write(t, dir, "admin")
	if err := os.WriteFile(filepath.Join(dir, "services.yaml"), []byte("services:\n  web:\n    endpoints:\n      - {address: 10.0.0.1, port: 8080}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse([]byte(`
xds:
  listen: "127.0.0.1:0"
  tls: {cert_file: xds.crt, key_file: xds.key, client_ca_file: ca.pem}
admin:
  listen: "127.0.0.1:0"
  tls: {cert_file: admin.crt, key_file: admin.key}
logging: {level: error}
sources:
  - name: static
    file: {path: services.yaml}
`), dir, SourceTypeNames())
	if err != nil {
		t.Fatal(err)
	}
	a, err = New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
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
	deadline := time.Now().Add(10 * time.Second)
	for !a.Cache.Ready() {
		if time.Now().After(deadline) {
			t.Fatal("not ready")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return a, ca
}

// clusters asks for every cluster over a delta ADS stream and returns
// their names.
func clusters(t *testing.T, addr string, cfg *tls.Config) ([]string, error) {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := discovery.NewAggregatedDiscoveryServiceClient(cc).DeltaAggregatedResources(ctx)
	if err != nil {
		return nil, err
	}
	if err := st.Send(&discovery.DeltaDiscoveryRequest{Node: &core.Node{Id: "n1"}, TypeUrl: clusterType}); err != nil {
		return nil, err
	}
	resp, err := st.Recv()
	if err != nil {
		return nil, err
	}
	var names []string
	for _, r := range resp.Resources {
		names = append(names, r.Name)
	}
	return names, nil
}

func TestXDSOverMTLS(t *testing.T) {
	a, ca := tlsApp(t)
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	client := ca.Issue(t, testcerts.LeafOptions{CommonName: "envoy", URIs: []string{"spiffe://example.org/envoy"}})
	pair, err := tls.X509KeyPair(client.CertPEM, client.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	names, err := clusters(t, a.XDSAddr(), &tls.Config{RootCAs: roots, ServerName: "localhost", Certificates: []tls.Certificate{pair}})
	if err != nil {
		t.Fatalf("client with a certificate: %v", err)
	}
	if fmt.Sprint(names) != "[web]" {
		t.Errorf("clusters %v, want [web]", names)
	}

	_, err = clusters(t, a.XDSAddr(), &tls.Config{RootCAs: roots, ServerName: "localhost"})
	if status.Code(err) != codes.Unavailable {
		t.Errorf("client without a certificate: %v, want Unavailable (handshake refused)", err)
	}
	other := testcerts.NewCA(t, "other")
	foreign := other.Issue(t, testcerts.LeafOptions{CommonName: "envoy"})
	fpair, err := tls.X509KeyPair(foreign.CertPEM, foreign.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	_, err = clusters(t, a.XDSAddr(), &tls.Config{RootCAs: roots, ServerName: "localhost", GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &fpair, nil }})
	if status.Code(err) != codes.Unavailable {
		t.Errorf("client with a certificate of another CA: %v, want Unavailable", err)
	}
}

func TestAdminOverTLS(t *testing.T) {
	a, ca := tlsApp(t)
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("https://" + a.AdminAddr() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != "ok" {
		t.Errorf("healthz: %d %q", resp.StatusCode, body)
	}
	// Plain HTTP is not served.
	if resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + a.AdminAddr() + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("plain HTTP served")
		}
	}
	// The expiry of both listeners' certificates is exported.
	resp, err = hc.Get("https://" + a.AdminAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, l := range []string{"xds", "admin"} {
		if !strings.Contains(string(body), `xdsbridge_tls_certificate_expiry_timestamp_seconds{listener="`+l+`"}`) {
			t.Errorf("no expiry metric for %s", l)
		}
	}
}

// New fails, naming the field, when a TLS file does not load.
func TestNewTLSErrorsNameTheField(t *testing.T) {
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "ca")
	ca.Server(t).Write(t, dir, "a")
	b := ca.Server(t)
	testcerts.WriteFile(t, filepath.Join(dir, "b.key"), b.KeyPEM)
	for _, c := range []struct{ yaml, want string }{
		{`xds: {listen: "127.0.0.1:0", tls: {cert_file: a.crt, key_file: b.key}}`, "xds.tls.key_file: does not match xds.tls.cert_file"},
		{`admin: {listen: "127.0.0.1:0", tls: {cert_file: a.crt, key_file: a.key, client_ca_file: missing.pem}}`, "admin.tls.client_ca_file: "},
	} {
		cfg, err := config.Parse([]byte(c.yaml+"\nsources: [{name: s, file: {path: s.yaml}}]\n"), dir, SourceTypeNames())
		if err != nil {
			t.Fatal(err)
		}
		_, err = New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("New: %v, want %q", err, c.want)
		}
	}
}
