package translate

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/xdsbridge/xdsbridge/internal/testbin"
	"github.com/xdsbridge/xdsbridge/internal/testcerts"
	"github.com/xdsbridge/xdsbridge/policy"
)

// requireEnvoy finds envoy on PATH, or skips (see testbin.Envoy).
func requireEnvoy(t *testing.T) string {
	t.Helper()
	return testbin.Envoy(t)
}

// writeCA writes a self-signed CA certificate (PEM) for clusters whose
// trusted_ca Envoy reads while validating.
func writeCA(t *testing.T, dir string) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "xdsbridge test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// envoyValidate runs `envoy --mode validate` on a bootstrap with an ADS
// config source and clusters as its static clusters (EDS clusters over ADS
// are accepted there). It returns Envoy's output and whether it accepted.
func envoyValidate(t *testing.T, envoy string, clusters []*cluster.Cluster) (string, bool) {
	t.Helper()
	dir := t.TempDir()
	xds := json.RawMessage(`{
		"name": "xds", "type": "STATIC", "connect_timeout": "1s",
		"typed_extension_protocol_options": {"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
			"@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
			"explicit_http_config": {"http2_protocol_options": {}}}},
		"load_assignment": {"cluster_name": "xds", "endpoints": [{"lb_endpoints": [{"endpoint": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": 18000}}}}]}]}
	}`)
	all := []json.RawMessage{xds}
	for _, c := range clusters {
		b, err := protojson.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, b)
	}
	boot, err := json.Marshal(map[string]any{
		"node": map[string]any{"id": "validate", "cluster": "validate"},
		"dynamic_resources": map[string]any{"ads_config": map[string]any{
			"api_type": "GRPC", "transport_api_version": "V3",
			"grpc_services": []any{map[string]any{"envoy_grpc": map[string]any{"cluster_name": "xds"}}},
		}},
		"static_resources": map[string]any{"clusters": all},
	})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "bootstrap.json")
	if err := os.WriteFile(path, boot, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(envoy, "--mode", "validate", "-c", path, "--log-level", "warn", "--disable-hot-restart").CombinedOutput()
	if err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			t.Fatalf("running envoy: %v", err)
		}
	}
	return string(out), err == nil
}

// TestEnvoyValidatesPolicyClusters: Envoy 1.40's own config validation
// accepts every cluster the golden policy cases generate, subsets' too.
func TestEnvoyValidatesPolicyClusters(t *testing.T) {
	envoy := requireEnvoy(t)
	ca := writeCA(t, t.TempDir())
	for _, tc := range policyCases() {
		t.Run(tc.name, func(t *testing.T) {
			opts := tc.opts
			if p := opts.Policy; p.TLS != nil && p.TLS.CAFile != "" {
				// Envoy reads the CA file while validating: point at a real one.
				cp := *p
				tlsCopy := *p.TLS
				tlsCopy.CAFile = ca
				cp.TLS = &tlsCopy
				opts.Policy = &cp
			}
			res, _ := opts.Service(tc.in)
			clusters := []*cluster.Cluster{res.Cluster}
			for _, sub := range res.Subsets {
				clusters = append(clusters, sub.Cluster)
			}
			if out, ok := envoyValidate(t, envoy, clusters); !ok {
				t.Errorf("envoy rejected the clusters:\n%s", out)
			}
		})
	}
	// The check can fail: a CA file that does not exist is rejected.
	t.Run("missing-ca-file-rejected", func(t *testing.T) {
		c, _ := Options{Policy: &policy.Service{TLS: &policy.UpstreamTLS{CAFile: filepath.Join(t.TempDir(), "none.pem")}}}.ServiceCluster("bad")
		out, ok := envoyValidate(t, envoy, []*cluster.Cluster{c})
		if ok {
			t.Fatalf("envoy accepted a cluster with a missing CA file:\n%s", out)
		}
		if !strings.Contains(out, "none.pem") {
			t.Errorf("envoy's rejection does not name the file:\n%s", out)
		}
	})
}

// TestEnvoyUpstreamTLSWithGRPCProvider runs a real Envoy proxying TCP to a
// TLS host through clusters built with Options.GRPCCertificateProvider:
// the ca_certificate_provider_instance named for gRPC clients (which Envoy
// 1.40 does not implement) leaves Envoy verifying with trusted_ca and the
// SNI as SAN, as without it: the right CA connects, another CA or another
// name does not.
func TestEnvoyUpstreamTLSWithGRPCProvider(t *testing.T) {
	envoy := requireEnvoy(t)
	dir := t.TempDir()
	ca, other := testcerts.NewCA(t, "upstream CA"), testcerts.NewCA(t, "other CA")
	caFile, otherFile := ca.WriteCA(t, dir, "ca.pem"), other.WriteCA(t, dir, "other.pem")
	certFile, keyFile := ca.Issue(t, testcerts.LeafOptions{CommonName: "secure.internal", DNS: []string{"secure.internal"}}).Write(t, dir, "host")
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.Write([]byte("hello\n"))
				c.SetReadDeadline(time.Now().Add(time.Second))
				c.Read(make([]byte, 1))
			}()
		}
	}()
	host := lis.Addr().(*net.TCPAddr)

	type tcase struct {
		name, sni, ca string
		ok            bool
		port          int
	}
	cases := []*tcase{
		{name: "right-ca", sni: "secure.internal", ca: caFile, ok: true},
		{name: "other-ca", sni: "secure.internal", ca: otherFile},
		{name: "other-name", sni: "other.internal", ca: caFile},
	}
	var listeners, clusters []json.RawMessage
	for _, tc := range cases {
		o := Options{GRPCCertificateProvider: "upstream-ca", Policy: &policy.Service{TLS: &policy.UpstreamTLS{SNI: tc.sni, CAFile: tc.ca}}}
		c, _ := o.ServiceCluster(tc.name)
		if !strings.Contains(c.GetTransportSocket().GetTypedConfig().String(), "upstream-ca") {
			t.Fatalf("%s: no provider instance in %v", tc.name, c.GetTransportSocket())
		}
		// A static copy of the EDS cluster, with the TLS host as endpoint.
		c.ClusterDiscoveryType = &cluster.Cluster_Type{Type: cluster.Cluster_STATIC}
		c.EdsClusterConfig = nil
		c.LoadAssignment = &endpoint.ClusterLoadAssignment{ClusterName: tc.name, Endpoints: []*endpoint.LocalityLbEndpoints{{
			LbEndpoints: []*endpoint.LbEndpoint{{HostIdentifier: &endpoint.LbEndpoint_Endpoint{Endpoint: &endpoint.Endpoint{
				Address: &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
					Address: "127.0.0.1", PortSpecifier: &core.SocketAddress_PortValue{PortValue: uint32(host.Port)},
				}}},
			}}}},
		}}}
		b, err := protojson.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		clusters = append(clusters, b)
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		tc.port = l.Addr().(*net.TCPAddr).Port
		l.Close()
		listeners = append(listeners, json.RawMessage(fmt.Sprintf(`{"name": %q,
			"address": {"socket_address": {"address": "127.0.0.1", "port_value": %d}},
			"filter_chains": [{"filters": [{"name": "envoy.filters.network.tcp_proxy", "typed_config": {
				"@type": "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy",
				"stat_prefix": %q, "cluster": %q}}]}]}`, tc.name, tc.port, tc.name, tc.name)))
	}
	boot, err := json.Marshal(map[string]any{
		"node":             map[string]any{"id": "tls", "cluster": "tls"},
		"admin":            map[string]any{"address": map[string]any{"socket_address": map[string]any{"address": "127.0.0.1", "port_value": 0}}},
		"static_resources": map[string]any{"listeners": listeners, "clusters": clusters},
	})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "envoy.json")
	if err := os.WriteFile(path, boot, 0o644); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	cmd := exec.Command(envoy, "-c", path, "--log-level", "warn", "--disable-hot-restart", "--concurrency", "1")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })

	read := func(port int) (string, error) {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err != nil {
			return "", err
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(3 * time.Second))
		b := make([]byte, 16)
		n, _ := c.Read(b)
		return string(b[:n]), nil
	}
	// Envoy is up when the right CA's listener answers.
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, err := read(cases[0].port)
		if err == nil && got == "hello\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no answer through %s: %q, %v\nenvoy:\n%s", cases[0].name, got, err, out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, tc := range cases[1:] {
		got, err := read(tc.port)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got != "" {
			t.Errorf("%s: Envoy connected to the host (%q): trusted_ca or the SAN was not enforced", tc.name, got)
		}
	}
}
