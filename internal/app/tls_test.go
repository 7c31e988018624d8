package app

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net/http"
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

// tlsApp starts the app with xds.tls (mTLS, reloaded every 100ms) and
// admin.tls (TLS), certificates in a temp dir (certApp).
func tlsApp(t *testing.T) (a *App, ca *testcerts.CA, dir string) {
	t.Helper()
	return certApp(t, `
xds:
  listen: "127.0.0.1:0"
  tls: {cert_file: xds.crt, key_file: xds.key, client_ca_file: ca.pem, reload_interval: 100ms}
admin:
  listen: "127.0.0.1:0"
  tls: {cert_file: admin.crt, key_file: admin.key}
logging: {level: error}
sources:
  - name: static
    file: {path: services.yaml}
`, "xds", "admin")
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
	if err := st.Send(&discovery.DeltaDiscoveryRequest{Node: &core.Node{Id: "n1"}, TypeUrl: clusterType}); err != nil && err != io.EOF {
		return nil, err
	}
	// (io.EOF: the server ended the stream; its status comes with the
	// receive.)
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
	a, ca, _ := tlsApp(t)
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
	a, ca, _ := tlsApp(t)
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

func clientCert(t *testing.T, ca *testcerts.CA) tls.Certificate {
	t.Helper()
	l := ca.Issue(t, testcerts.LeafOptions{CommonName: "envoy"})
	pair, err := tls.X509KeyPair(l.CertPEM, l.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return pair
}

// A rotation of the xDS certificate and client CA leaves an open stream
// serving updates; new connections get the new certificate and CA.
func TestXDSStreamSurvivesRotation(t *testing.T) {
	a, ca, dir := tlsApp(t)
	ca2 := testcerts.NewCA(t, "ca2")
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	roots.AddCert(ca2.Cert)
	c1 := clientCert(t, ca)
	cc, err := grpc.NewClient(a.XDSAddr(), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots, ServerName: "localhost", Certificates: []tls.Certificate{c1}})))
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
	if err := st.Send(&discovery.DeltaDiscoveryRequest{Node: &core.Node{Id: "n1"}, TypeUrl: clusterType}); err != nil {
		t.Fatal(err)
	}
	resp, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: clusterType, ResponseNonce: resp.Nonce}); err != nil {
		t.Fatal(err)
	}

	// Rotate: a server certificate from ca2, and only ca2 for clients.
	next := ca2.Server(t)
	next.Write(t, dir, "xds")
	ca2.WriteCA(t, dir, "ca.pem")
	for !a.XDSTLS.Certificate().Equal(next.Cert) {
		if ctx.Err() != nil {
			t.Fatal("rotation not loaded")
		}
		time.Sleep(20 * time.Millisecond)
	}

	// The open stream still serves a change.
	testcerts.WriteFile(t, filepath.Join(dir, "services.yaml"), []byte("services:\n  web:\n    endpoints:\n      - {address: 10.0.0.1, port: 8080}\n  api:\n    endpoints:\n      - {address: 10.0.0.2, port: 8080}\n"))
	resp, err = st.Recv()
	if err != nil {
		t.Fatalf("stream after rotation: %v", err)
	}
	if len(resp.Resources) != 1 || resp.Resources[0].Name != "api" {
		t.Errorf("update after rotation: %v", resp.Resources)
	}

	// New connections: the new certificate; ca2 clients in, ca clients out.
	var state tls.ConnectionState
	cfg := &tls.Config{RootCAs: roots, ServerName: "localhost", Certificates: []tls.Certificate{clientCert(t, ca2)},
		VerifyConnection: func(cs tls.ConnectionState) error { state = cs; return nil }}
	if names, err := clusters(t, a.XDSAddr(), cfg); err != nil || len(names) != 2 {
		t.Fatalf("ca2 client after rotation: %v %v", names, err)
	}
	if !state.PeerCertificates[0].Equal(next.Cert) {
		t.Errorf("new connection served %v, want the rotated certificate", state.PeerCertificates[0].SerialNumber)
	}
	if _, err := clusters(t, a.XDSAddr(), &tls.Config{RootCAs: roots, ServerName: "localhost", Certificates: []tls.Certificate{c1}}); status.Code(err) != codes.Unavailable {
		t.Errorf("client of the retired CA: %v, want Unavailable", err)
	}
}

// With client_ca_file, each stream open verifies the client's chain again
// against the bundle as it is now: once the client's CA is rotated out of
// the file, a connection made before opens no new stream.
func TestXDSRechecksClientCAAtStreamOpen(t *testing.T) {
	a, ca, dir := tlsApp(t)
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	client := ca.Issue(t, testcerts.LeafOptions{CommonName: "envoy"})
	pair, err := tls.X509KeyPair(client.CertPEM, client.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(a.XDSAddr(), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots, ServerName: "localhost", Certificates: []tls.Certificate{pair}})))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	open := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st, err := discovery.NewAggregatedDiscoveryServiceClient(cc).DeltaAggregatedResources(ctx)
		if err != nil {
			return err
		}
		// A refused stream's Send may see it ended (io.EOF); Recv has
		// its status.
		_ = st.Send(&discovery.DeltaDiscoveryRequest{Node: &core.Node{Id: "n1"}, TypeUrl: clusterType})
		_, err = st.Recv()
		return err
	}
	if err := open(); err != nil {
		t.Fatalf("before the rotation: %v", err)
	}
	testcerts.NewCA(t, "next").WriteCA(t, dir, "ca.pem")
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := open()
		if status.Code(err) == codes.PermissionDenied {
			if !strings.Contains(err.Error(), "xds.tls.client_ca_file") {
				t.Errorf("refusal %v does not name xds.tls.client_ca_file", err)
			}
			break
		}
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("after the client CA rotated away: %v, want PermissionDenied", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
