package xds_test

import (
	"context"
	"crypto/tls"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/xdsbridge/xdsbridge/xds"
)

// A service registered through Options.Services is served on the xDS
// listener, and each of its calls and streams is authorized as an xDS
// stream: an allowed client is served, another refused with
// PermissionDenied and counted.
func TestServicesAuthorizedAsXDS(t *testing.T) {
	hs := health.NewServer()
	th := newTLSHarnessWith(t, tls.RequireAndVerifyClientCert, xds.Options{
		Authorization: testAuthz,
		Services:      func(r grpc.ServiceRegistrar) { healthpb.RegisterHealthServer(r, hs) },
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	ok := healthpb.NewHealthClient(th.client(th.leaf([]string{"spiffe://prod.test/ns/a/sa/envoy"}, nil)).conn)
	if r, err := ok.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("allowed client's unary call: %v, %v", r, err)
	}
	w, err := ok.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := w.Recv(); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("allowed client's stream: %v, %v", r, err)
	}

	bad := healthpb.NewHealthClient(th.client(th.leaf([]string{"spiffe://dev.test/ns/a/sa/envoy"}, nil)).conn)
	if _, err := bad.Check(ctx, &healthpb.HealthCheckRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("refused client's unary call: %v, want PermissionDenied", err)
	}
	bw, err := bad.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err == nil {
		_, err = bw.Recv()
	}
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("refused client's stream: %v, want PermissionDenied", err)
	}
	if got := th.denied("no_match"); got != 2 {
		t.Errorf("denied{reason=no_match} = %v, want 2", got)
	}
}
