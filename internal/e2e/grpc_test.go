package e2e

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strconv"
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
		out = append(out, startGRPCBackend(t, "127.0.0.1:0"))
	}
	return out
}

// startGRPCBackend starts a gRPC server on addr (port 0 for any).
func startGRPCBackend(t *testing.T, addr string) grpcBackend {
	t.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	healthpb.RegisterHealthServer(s, health.NewServer())
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return grpcBackend{port: uint32(lis.Addr().(*net.TCPAddr).Port), addr: lis.Addr().String()}
}

func grpcServicesYAML(name string, bs ...grpcBackend) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "services:\n  %s:\n    endpoints:\n", name)
	for _, b := range bs {
		fmt.Fprintf(&sb, "      - {address: 127.0.0.1, port: %d, locality: {region: r1}}\n", b.port)
	}
	return sb.String()
}

// xdsClient is a grpc-go client of xds:///<service>, resolved by grpc-go's
// own xDS client (SotW ADS: LDS → RDS → CDS → EDS) against the bridge.
type xdsClient struct {
	br     *bridge
	health healthpb.HealthClient
}

func dialXDS(t *testing.T, br *bridge, service string) *xdsClient {
	t.Helper()
	bootstrap := rewriteExample(t, "grpc-bootstrap.json", `"127.0.0.1:18000"`, strconv.Quote(br.app.XDSAddr()))
	return xdsClientFrom(t, br, bootstrap, service)
}

// xdsClientFrom is a grpc-go client of xds:///service through an xDS
// resolver made from bootstrap. The data plane (to the backends) is
// plaintext, whatever the xDS channel is.
func xdsClientFrom(t *testing.T, br *bridge, bootstrap []byte, service string) *xdsClient {
	t.Helper()
	builder, err := xdsgrpc.NewXDSResolverWithConfigForTesting(bootstrap)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("xds:///"+service, grpc.WithResolvers(builder), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &xdsClient{br: br, health: healthpb.NewHealthClient(conn)}
}

// reached sends n RPCs and returns the backend addresses that answered.
func (c *xdsClient) reached(n int) ([]string, error) {
	set := map[string]bool{}
	for i := 0; i < n; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		var p peer.Peer
		_, err := c.health.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Peer(&p), grpc.WaitForReady(true))
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

// expect waits until RPCs reach exactly the backends given. A NACK from
// the client fails the test at once, with grpc-go's reason.
func (c *xdsClient) expect(t *testing.T, want ...grpcBackend) {
	t.Helper()
	var ws []string
	for _, b := range want {
		ws = append(ws, b.addr)
	}
	sort.Strings(ws)
	waitFor(t, 20*time.Second, fmt.Sprintf("RPCs to exactly %v", ws), func() error {
		assertNoNACKs(t, c.br)
		got, err := c.reached(20)
		if err != nil {
			return err
		}
		if strings.Join(got, ",") != strings.Join(ws, ",") {
			return fmt.Errorf("reached %v", got)
		}
		return nil
	})
	assertNoNACKs(t, c.br)
}

// assertNoNACKs fails the test if any xDS client rejected an update.
func assertNoNACKs(t *testing.T, br *bridge) {
	t.Helper()
	if n := br.app.XDS.NACKs(); n != 0 {
		var reasons []string
		for _, c := range br.app.XDS.ClientStatuses() {
			if c.LastNACK != "" {
				reasons = append(reasons, c.TypeURL+": "+c.LastNACK)
			}
		}
		t.Fatalf("xDS clients NACKed %d updates: %s", n, strings.Join(reasons, "; "))
	}
}

// TestProxylessGRPCClient resolves xds:///greeter through grpc-go's own xDS
// client and follows endpoint changes.
func TestProxylessGRPCClient(t *testing.T) {
	bs := startGRPCBackends(t, 3)
	br := startBridge(t, grpcServicesYAML("greeter", bs[0], bs[1]), "")
	c := dialXDS(t, br, "greeter")
	c.expect(t, bs[0], bs[1])
	br.writeServices(t, grpcServicesYAML("greeter", bs[2]))
	c.expect(t, bs[2])
	if n := br.app.XDS.NACKs(); n != 0 {
		t.Fatalf("grpc-go NACKed %d updates", n)
	}
}
