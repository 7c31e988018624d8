package app

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	healthv3 "github.com/envoyproxy/go-control-plane/envoy/service/health/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/xdsbridge/xdsbridge/config"
	"github.com/xdsbridge/xdsbridge/internal/testcerts"
)

// health_checks.hds is read at start: a reload that changes it is refused
// with the field named, and one that leaves it alone is not.
func TestReloadRefusesHDSChange(t *testing.T) {
	parse := func(extra string) *config.Config {
		t.Helper()
		c, err := config.Parse([]byte("sources: [{name: s, file: {path: s.yaml}}]\n"+extra), t.TempDir(), SourceTypeNames())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	running := parse("health_checks: {hds: {enabled: true, k: 2}}\n")
	if err := needsRestart(running, parse("health_checks: {hds: {enabled: true}}\n")); err != nil {
		t.Errorf("the same HDS config written otherwise: %v", err)
	}
	for _, next := range []string{"", "health_checks: {hds: {enabled: true, k: 3}}\n", "health_checks: {hds: {enabled: true, fallback: source}}\n"} {
		err := needsRestart(running, parse(next))
		if err == nil || !strings.Contains(err.Error(), "health_checks.hds: changed, and read at start only") {
			t.Errorf("%q: %v", next, err)
		}
	}
}

// hdsStream opens an HDS stream with cfg and returns the first
// specifier's endpoints (address:port), or the stream's error.
func hdsStream(t *testing.T, addr string, cfg *tls.Config) ([]string, error) {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := healthv3.NewHealthDiscoveryServiceClient(cc).StreamHealthCheck(ctx)
	if err != nil {
		return nil, err
	}
	err = st.Send(&healthv3.HealthCheckRequestOrEndpointHealthResponse{RequestType: &healthv3.HealthCheckRequestOrEndpointHealthResponse_HealthCheckRequest{
		HealthCheckRequest: &healthv3.HealthCheckRequest{
			Node:       &core.Node{Id: "checker"},
			Capability: &healthv3.Capability{HealthCheckProtocols: []healthv3.Capability_Protocol{healthv3.Capability_HTTP, healthv3.Capability_TCP}},
		},
	}})
	if err == io.EOF {
		// The server ended the stream (a refusal): its status comes with
		// the next receive.
		_, err = st.Recv()
	}
	if err != nil {
		return nil, err
	}
	for {
		spec, err := st.Recv()
		if err != nil {
			return nil, err
		}
		var eps []string
		for _, c := range spec.GetClusterHealthChecks() {
			for _, le := range c.GetLocalityEndpoints() {
				for _, e := range le.GetEndpoints() {
					sa := e.GetAddress().GetSocketAddress()
					eps = append(eps, fmt.Sprintf("%s:%d", sa.GetAddress(), sa.GetPortValue()))
				}
			}
		}
		if len(eps) > 0 {
			return eps, nil
		}
	}
}

// With health_checks.hds, the bridge serves HDS on the xDS listener with
// its mTLS and xds.authorization: an allowed checker is assigned the
// checked hosts, another is refused as an xDS client is, and HDS's
// metrics are on the app's registry.
func TestHDSServedWithXDSAuthorization(t *testing.T) {
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "ca")
	ca.WriteCA(t, dir, "ca.pem")
	ca.Server(t).Write(t, dir, "xds")
	if err := os.WriteFile(filepath.Join(dir, "services.yaml"), []byte("services:\n  web:\n    endpoints:\n      - {address: 127.0.0.1, port: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse([]byte(`
xds:
  listen: "127.0.0.1:0"
  tls: {cert_file: xds.crt, key_file: xds.key, client_ca_file: ca.pem}
  authorization: {allow: [{uri: "spiffe://example.org/checker"}]}
admin: {listen: "127.0.0.1:0"}
logging: {level: error}
sources:
  - name: static
    file: {path: services.yaml}
health_checks:
  services:
    web: {type: tcp}
  hds: {enabled: true}
`), dir, SourceTypeNames())
	if err != nil {
		t.Fatal(err)
	}
	a := startApp(t, cfg)
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	client := func(uri string) *tls.Config {
		l := ca.Issue(t, testcerts.LeafOptions{CommonName: "envoy", URIs: []string{uri}})
		pair, err := tls.X509KeyPair(l.CertPEM, l.KeyPEM)
		if err != nil {
			t.Fatal(err)
		}
		return &tls.Config{RootCAs: roots, ServerName: "localhost", Certificates: []tls.Certificate{pair}}
	}
	eps, err := hdsStream(t, a.XDSAddr(), client("spiffe://example.org/checker"))
	if err != nil || fmt.Sprint(eps) != "[127.0.0.1:1]" {
		t.Errorf("allowed checker: %v, %v; want [127.0.0.1:1]", eps, err)
	}
	if _, err := hdsStream(t, a.XDSAddr(), client("spiffe://example.org/other")); status.Code(err) != codes.PermissionDenied {
		t.Errorf("refused checker: %v, want PermissionDenied", err)
	}
	mfs, err := a.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "xdsbridge_hds_") {
			names = append(names, mf.GetName())
		}
	}
	if len(names) != 6 {
		t.Errorf("HDS metrics on the registry: %v, want 6", names)
	}
}
