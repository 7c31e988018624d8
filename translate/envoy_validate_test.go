package translate

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/xdsbridge/xdsbridge/policy"
)

// requireEnvoy finds envoy on PATH, or skips; with
// XDSBRIDGE_REQUIRE_INTEGRATION=1 (CI) a missing envoy fails the test.
func requireEnvoy(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("envoy")
	if err == nil {
		return p
	}
	if os.Getenv("XDSBRIDGE_REQUIRE_INTEGRATION") == "1" {
		t.Fatal("envoy not found on PATH (run .ci/install.sh)")
	}
	t.Skip("envoy not found on PATH; run .ci/install.sh")
	return ""
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
		c, _ := PolicyCluster("bad", &policy.Service{TLS: &policy.UpstreamTLS{CAFile: filepath.Join(t.TempDir(), "none.pem")}})
		out, ok := envoyValidate(t, envoy, []*cluster.Cluster{c})
		if ok {
			t.Fatalf("envoy accepted a cluster with a missing CA file:\n%s", out)
		}
		if !strings.Contains(out, "none.pem") {
			t.Errorf("envoy's rejection does not name the file:\n%s", out)
		}
	})
}
