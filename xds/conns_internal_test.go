package xds

import (
	"context"
	"net"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Each connection the listener accepts has an accounting of its own, which
// every call on the connection finds from its context, and whose conn is
// the connection: also for connections that share their addresses (unix
// sockets, whose clients are unnamed).
func TestConnAccountingPerConnection(t *testing.T) {
	lis, err := net.Listen("unix", filepath.Join(t.TempDir(), "xds.sock"))
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan *connAcct, 4)
	gs := grpc.NewServer(grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		seen <- connAcctOf(ctx)
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(gs, health.NewServer())
	go gs.Serve(acctListener{lis})
	defer gs.Stop()

	var accts [2][2]*connAcct // per connection, per call
	var ccs [2]*grpc.ClientConn
	for i := range ccs {
		cc, err := grpc.NewClient("unix://"+lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		ccs[i] = cc
		for j := range 2 {
			if _, err := healthpb.NewHealthClient(cc).Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil {
				t.Fatal(err)
			}
			accts[i][j] = <-seen
		}
	}
	for i, a := range accts {
		if a[0] == nil || a[0] != a[1] {
			t.Fatalf("connection %d: calls found accountings %p and %p, want one, the same", i, a[0], a[1])
		}
		if a[0].conn == nil {
			t.Fatalf("connection %d: its accounting holds no connection", i)
		}
	}
	if accts[0][0] == accts[1][0] {
		t.Fatal("two connections share one accounting")
	}
	// Closing the connection an accounting holds ends that connection only.
	if err := accts[0][0].conn.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := healthpb.NewHealthClient(ccs[1]).Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("the other connection: %v", err)
	}
	if got := <-seen; got != accts[1][0] {
		t.Fatalf("the other connection's call found accounting %p, want %p", got, accts[1][0])
	}
	if connAcctOf(context.Background()) != nil {
		t.Fatal("an accounting found without a connection")
	}
}
