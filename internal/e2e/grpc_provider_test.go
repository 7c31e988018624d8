package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/xdsbridge/xdsbridge/internal/testcerts"
)

// raTLSPolicy gives greeter upstream TLS.
const raTLSPolicy = `services:
  greeter:
    protocol: grpc
    tls: {sni: greeter.internal, ca_file: /nonexistent/ca.pem}
`

// raStartTLSBridge runs the bridge with greeter on backend b, the policy
// raTLSPolicy, and xds (an xds block, "" for none).
func raStartTLSBridge(t *testing.T, b grpcBackend, xds string) *bridge {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "services.yaml"), []byte(grpcServicesYAML("greeter", b)), 0o644); err != nil {
		t.Fatal(err)
	}
	br, _ := startPolicyBridge(t, dir, xds, staticSource, raTLSPolicy)
	return br
}

// raServedCluster fetches the named cluster from the bridge's xDS server
// as an xDS client does (SotW ADS, wildcard CDS) and returns its upstream
// TLS context.
func raServedCluster(t *testing.T, br *bridge, name string) (*cluster.Cluster, *tlsv3.UpstreamTlsContext) {
	t.Helper()
	conn, err := grpc.NewClient(br.app.XDSAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const cdsType = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	if err := st.Send(&discovery.DiscoveryRequest{Node: &core.Node{Id: "ra-cds"}, TypeUrl: cdsType}); err != nil {
		t.Fatal(err)
	}
	resp, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range resp.Resources {
		var c cluster.Cluster
		if err := r.UnmarshalTo(&c); err != nil {
			t.Fatal(err)
		}
		names = append(names, c.Name)
		if c.Name != name {
			continue
		}
		ts := c.GetTransportSocket()
		if ts == nil {
			t.Fatalf("cluster %s has no transport socket", name)
		}
		var tc tlsv3.UpstreamTlsContext
		if err := ts.GetTypedConfig().UnmarshalTo(&tc); err != nil {
			t.Fatalf("cluster %s: transport socket %s: %v", name, ts.Name, err)
		}
		return &c, &tc
	}
	t.Fatalf("no cluster %s served (got %v)", name, names)
	return nil, nil
}

// raProviderBootstrap is a grpc-go bootstrap for the bridge whose
// certificate_providers defines the instance upstream-ca (a file_watcher
// with a CA bundle).
func raProviderBootstrap(t *testing.T, br *bridge, node string) []byte {
	t.Helper()
	caFile := testcerts.NewCA(t, "upstream CA").WriteCA(t, t.TempDir(), "ca.pem")
	return []byte(fmt.Sprintf(`{
  "xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
  "node": {"id": %q, "cluster": "e2e"},
  "certificate_providers": {"upstream-ca": {"plugin_name": "file_watcher", "config": {"ca_certificate_file": %q}}}
}`, br.app.XDSAddr(), node, caFile))
}

// TestGRPCCertificateProviderFromConfig: with xds.grpc_certificate_provider
// in the bridge's config, the cluster it serves for a service with policy
// tls names that instance in its validation context (besides the CA file
// Envoy reads), and a grpc-go xDS client whose bootstrap defines it takes
// the cluster (no NACK; its credentials are insecure, so it speaks
// plaintext to the backend). Without the field, the served cluster names
// no instance and the same client NACKs it.
func TestGRPCCertificateProviderFromConfig(t *testing.T) {
	b := startGRPCBackend(t, "127.0.0.1:0")

	br := raStartTLSBridge(t, b, "xds: {grpc_certificate_provider: upstream-ca}\n")
	_, tc := raServedCluster(t, br, "greeter")
	vc := tc.GetCommonTlsContext().GetValidationContext()
	t.Logf("served greeter: sni %q, validation context %v", tc.GetSni(), vc)
	if got := vc.GetCaCertificateProviderInstance().GetInstanceName(); got != "upstream-ca" {
		t.Errorf("validation_context.ca_certificate_provider_instance.instance_name = %q, want upstream-ca", got)
	}
	if got := vc.GetTrustedCa().GetFilename(); got != "/nonexistent/ca.pem" || tc.GetSni() != "greeter.internal" {
		t.Errorf("sni %q, trusted_ca %q; want the policy's greeter.internal, /nonexistent/ca.pem", tc.GetSni(), got)
	}
	c := xdsClientFrom(t, br, raProviderBootstrap(t, br, "ra-provider"), "greeter")
	var n int
	waitFor(t, 20*time.Second, "an RPC through the TLS cluster", func() error {
		assertNoNACKs(t, br)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		n++
		_, err := c.health.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
		return err
	})
	for range 20 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := c.health.Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err != nil {
			t.Fatalf("RPC through the TLS cluster: %v", err)
		}
	}
	t.Logf("grpc-go took the cluster: ready after %d poll(s), then 20 RPCs, 0 failed", n)
	assertNoNACKs(t, br)

	// Without the field: no instance, and a NACK.
	bare := raStartTLSBridge(t, b, "")
	_, tc = raServedCluster(t, bare, "greeter")
	if p := tc.GetCommonTlsContext().GetValidationContext().GetCaCertificateProviderInstance(); p != nil {
		t.Errorf("without xds.grpc_certificate_provider, the cluster names instance %v", p)
	}
	// The channel resolves on its first RPC, which cannot get through.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_, err := xdsClientFrom(t, bare, raProviderBootstrap(t, bare, "ra-no-provider"), "greeter").health.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
	cancel()
	if err == nil {
		t.Error("an RPC got through the cluster grpc-go must NACK")
	}
	var nack string
	waitFor(t, 10*time.Second, "grpc-go's NACK of the cluster without an instance", func() error {
		for _, cl := range bare.app.XDS.ClientStatuses() {
			if strings.Contains(cl.LastNACK, "ca_certificate_provider_instance") {
				nack = cl.LastNACK
				return nil
			}
		}
		return fmt.Errorf("no NACK naming ca_certificate_provider_instance (NACKs: %d)", bare.app.XDS.NACKs())
	})
	t.Logf("without the field, grpc-go: %.200s", nack)
}
