package e2e

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	xdsgrpc "google.golang.org/grpc/xds"

	"github.com/xdsbridge/xdsbridge/config/decode"
	"github.com/xdsbridge/xdsbridge/internal/testcerts"
	"github.com/xdsbridge/xdsbridge/policy"
	"github.com/xdsbridge/xdsbridge/sources"
	"github.com/xdsbridge/xdsbridge/translate"
	"github.com/xdsbridge/xdsbridge/xds"
)

// TestGRPCClientTakesPolicyClusters serves the clusters translate builds
// from each cluster policy to a real grpc-go (v1.85) xDS client, and
// checks what translate/POLICY.md says: grpc-go accepts every cluster
// setting the translator sends (maglev and random through their
// load_balancing_policy fallbacks), and NACKs upstream TLS, which names no
// certificate provider instance of its bootstrap.
func TestGRPCClientTakesPolicyClusters(t *testing.T) {
	u := func(v uint32) *uint32 { return &v }
	for _, tc := range []struct {
		name string
		p    policy.Service
		nack string // a substring of grpc-go's NACK; "" if it must accept
		// mutate, if set, changes the translated cluster: the controls
		// showing what the translator avoids.
		mutate func(*cluster.Cluster)
		// provider is Options.GRPCCertificateProvider.
		provider string
	}{
		{"default", policy.Service{}, "", nil, ""},
		{"grpc-timeout", policy.Service{Protocol: policy.ProtocolGRPC, ConnectTimeout: decode.Duration(2 * time.Second)}, "", nil, ""},
		{"least-request", policy.Service{LoadBalancer: &policy.LoadBalancer{Policy: policy.LBLeastRequest, LeastRequest: &policy.LeastRequest{ChoiceCount: 3}}}, "", nil, ""},
		{"ring-hash", policy.Service{LoadBalancer: &policy.LoadBalancer{Policy: policy.LBRingHash, RingHash: &policy.RingHash{MinimumRingSize: 1024, MaximumRingSize: 65536}}}, "", nil, ""},
		{"maglev", policy.Service{LoadBalancer: &policy.LoadBalancer{Policy: policy.LBMaglev}}, "", nil, ""},
		{"random", policy.Service{LoadBalancer: &policy.LoadBalancer{Policy: policy.LBRandom}}, "", nil, ""},
		{"circuit-breakers", policy.Service{CircuitBreakers: &policy.CircuitBreakers{MaxConnections: u(10), MaxPendingRequests: u(10), MaxRequests: u(10), MaxRetries: u(1)}}, "", nil, ""},
		{"outlier-detection", policy.Service{OutlierDetection: &policy.OutlierDetection{
			Consecutive5xx: u(3), ConsecutiveGatewayFailure: u(2), Interval: decode.Duration(time.Second),
			BaseEjectionTime: decode.Duration(30 * time.Second), MaxEjectionTime: decode.Duration(time.Minute),
			MaxEjectionPercent: u(50), EnforcingConsecutive5xx: u(100),
		}}, "", nil, ""},
		// Controls: maglev and random as lb_policy, which the translator
		// never sends, are NACKed.
		{"control-maglev-lb-policy", policy.Service{}, "unexpected lbPolicy MAGLEV", func(c *cluster.Cluster) { c.LbPolicy = cluster.Cluster_MAGLEV }, ""},
		{"control-random-lb-policy", policy.Service{}, "unexpected lbPolicy RANDOM", func(c *cluster.Cluster) { c.LbPolicy = cluster.Cluster_RANDOM }, ""},
		{"tls", policy.Service{TLS: &policy.UpstreamTLS{SNI: "x.internal", CAFile: "/nonexistent/ca.pem"}}, "expected field ca_certificate_provider_instance is missing", nil, ""},
		{"tls-no-ca", policy.Service{TLS: &policy.UpstreamTLS{}}, "does not contain root certificate provider instance name", nil, ""},
		// With a certificate provider instance its bootstrap defines
		// (upstream-ca, here), grpc-go takes TLS clusters (this client's
		// credentials are insecure: it ignores the TLS settings, and the
		// backend speaks plaintext); one its bootstrap lacks is NACKed.
		{"tls-provider", policy.Service{TLS: &policy.UpstreamTLS{SNI: "x.internal", CAFile: "/nonexistent/ca.pem"}}, "", nil, "upstream-ca"},
		{"tls-provider-no-ca", policy.Service{TLS: &policy.UpstreamTLS{}}, "", nil, "upstream-ca"},
		{"tls-provider-not-in-bootstrap", policy.Service{TLS: &policy.UpstreamTLS{}}, `root certificate provider instance name "other-ca" missing in bootstrap configuration`, nil, "other-ca"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := startGRPCBackend(t, "127.0.0.1:0")
			name := "pol-" + tc.name
			res, _ := translate.Options{Policy: &tc.p, GRPCCertificateProvider: tc.provider}.Service(sources.Service{Name: name, Endpoints: []sources.Endpoint{
				{Address: "127.0.0.1", Port: b.port},
			}})
			if err := res.Validate(); err != nil {
				t.Fatal(err)
			}
			if tc.mutate != nil {
				tc.mutate(res.Cluster)
			}
			cache, srv := xds.NewServing(xds.ServingConfig{})
			if err := cache.PublishServices([]translate.Resources{res}, nil); err != nil {
				t.Fatal(err)
			}
			cache.MarkReady()
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- srv.Run(ctx, lis) }()
			t.Cleanup(func() { cancel(); <-done })

			providers := ""
			if tc.provider != "" {
				caFile := testcerts.NewCA(t, "upstream CA").WriteCA(t, t.TempDir(), "ca.pem")
				providers = fmt.Sprintf(`,
  "certificate_providers": {"upstream-ca": {"plugin_name": "file_watcher", "config": {"ca_certificate_file": %q}}}`, caFile)
			}
			bootstrap := fmt.Sprintf(`{
  "xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
  "node": {"id": "policy-%s", "cluster": "e2e"}%s
}`, lis.Addr().String(), tc.name, providers)
			builder, err := xdsgrpc.NewXDSResolverWithConfigForTesting([]byte(bootstrap))
			if err != nil {
				t.Fatal(err)
			}
			conn, err := grpc.NewClient("xds:///"+name, grpc.WithResolvers(builder), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			hc := healthpb.NewHealthClient(conn)
			rpc := func(timeout time.Duration) error {
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				defer cancel()
				_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
				return err
			}
			lastNACK := func() string {
				// One ADS stream carries every type: the NACK is the
				// stream's.
				for _, c := range srv.ClientStatuses() {
					if c.LastNACK != "" {
						return c.LastNACK
					}
				}
				return ""
			}
			if tc.nack == "" {
				if err := rpc(10 * time.Second); err != nil {
					t.Fatalf("RPC through the policy cluster: %v (NACK: %q)", err, lastNACK())
				}
				if n := srv.NACKs(); n != 0 {
					t.Fatalf("grpc-go NACKed %d updates: %s", n, lastNACK())
				}
				return
			}
			// A NACK, and no RPC gets through. (The channel resolves on
			// its first RPC.)
			if err := rpc(time.Second); err == nil {
				t.Fatal("an RPC got through a cluster grpc-go must NACK")
			}
			waitFor(t, 10*time.Second, "grpc-go's NACK of the cluster", func() error {
				if n := lastNACK(); !strings.Contains(n, tc.nack) {
					return fmt.Errorf("last NACK %q", n)
				}
				return nil
			})
			t.Logf("grpc-go: %.300s", lastNACK())
		})
	}
}
