package e2e

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	xdsgrpc "google.golang.org/grpc/xds"
)

// grpcBackend is a real gRPC server (the health service is the RPC).
type grpcBackend struct {
	port uint32
	addr string
}

func startGRPCBackends(t *testing.T, n int) []grpcBackend {
	t.Helper()
	var out []grpcBackend
	for i := 0; i < n; i++ {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s := grpc.NewServer()
		healthpb.RegisterHealthServer(s, health.NewServer())
		go s.Serve(lis)
		t.Cleanup(s.Stop)
		out = append(out, grpcBackend{port: uint32(lis.Addr().(*net.TCPAddr).Port), addr: lis.Addr().String()})
	}
	return out
}

func grpcServicesYAML(name string, bs ...grpcBackend) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "services:\n  %s:\n    endpoints:\n", name)
	for _, b := range bs {
		fmt.Fprintf(&sb, "      - {address: 127.0.0.1, port: %d, locality: {region: r1}}\n", b.port)
	}
	return sb.String()
}

// TestProxylessGRPCClient resolves xds:///greeter through grpc-go's own xDS
// client (SotW ADS: LDS → RDS → CDS → EDS) and follows endpoint changes.
func TestProxylessGRPCClient(t *testing.T) {
	bs := startGRPCBackends(t, 3)
	br := startBridge(t, grpcServicesYAML("greeter", bs[0], bs[1]), "")
	bootstrap := fmt.Sprintf(`{
  "xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
  "node": {"id": "grpc-client-1", "cluster": "e2e"}
}`, br.app.XDSAddr())
	builder, err := xdsgrpc.NewXDSResolverWithConfigForTesting([]byte(bootstrap))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("xds:///greeter", grpc.WithResolvers(builder), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)

	reached := func(n int) ([]string, error) {
		set := map[string]bool{}
		for i := 0; i < n; i++ {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			var p peer.Peer
			_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Peer(&p), grpc.WaitForReady(true))
			cancel()
			if err != nil {
				return nil, err
			}
			set[p.Addr.String()] = true
		}
		out := make([]string, 0, len(set))
		for a := range set {
			out = append(out, a)
		}
		sort.Strings(out)
		return out, nil
	}
	expect := func(want ...grpcBackend) {
		t.Helper()
		var ws []string
		for _, b := range want {
			ws = append(ws, b.addr)
		}
		sort.Strings(ws)
		waitFor(t, 20*time.Second, fmt.Sprintf("RPCs to exactly %v", ws), func() error {
			got, err := reached(20)
			if err != nil {
				return err
			}
			if strings.Join(got, ",") != strings.Join(ws, ",") {
				return fmt.Errorf("reached %v", got)
			}
			return nil
		})
	}
	expect(bs[0], bs[1])
	br.writeServices(t, grpcServicesYAML("greeter", bs[2]))
	expect(bs[2])
	if n := br.app.XDS.NACKs(); n != 0 {
		t.Fatalf("grpc-go NACKed %d updates", n)
	}
}
