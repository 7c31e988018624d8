package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/xdsbridge/xdsbridge/internal/testcerts"
)

// dialXDSTLS is dialXDS with examples/grpc-bootstrap-mtls.json: grpc-go's
// xDS client talks to the bridge over mTLS (gRFC A65 "tls" channel
// credentials), presenting a certificate with SPIFFE ID id from ca.
func dialXDSTLS(t *testing.T, br *bridge, ca *testcerts.CA, id, service string) *xdsClient {
	t.Helper()
	dir := t.TempDir()
	writeCert(t, dir, "client", spiffeCert(t, ca, id))
	ca.WriteCA(t, dir, "ca.pem")
	bootstrap := rewriteExample(t, "grpc-bootstrap-mtls.json",
		`"xdsbridge.example.org:18000"`, strconv.Quote(br.app.XDSAddr()),
		`"certs/`, `"`+dir+`/`)
	return xdsClientFrom(t, br, bootstrap, service) // only the xDS channel is TLS
}

// fails checks that an RPC does not get through within a few seconds.
func (c *xdsClient) fails(t *testing.T) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err := c.health.Check(ctx, &healthpb.HealthCheckRequest{})
	if err == nil {
		t.Fatal("the RPC got through")
	}
	return err
}

// twoServices is a services file of greeter and api.
func twoServices(greeter, api grpcBackend) string {
	return grpcServicesYAML("greeter", greeter) + strings.TrimPrefix(grpcServicesYAML("api", api), "services:\n")
}

// TestGRPCXDSClientTLS: grpc-go's real xDS client, with the mTLS bootstrap
// of examples/, resolves xds:///greeter through the bridge of
// examples/xdsbridge-mtls.yaml and follows a change; a partner's client is
// served only the api services; a client of another trust domain is
// denied and gets no service.
func TestGRPCXDSClientTLS(t *testing.T) {
	ca := testcerts.NewCA(t, "example CA")
	bs := startGRPCBackends(t, 3)
	br := startMTLSBridge(t, ca, twoServices(bs[0], bs[2]), nil)

	t.Run("allowed", func(t *testing.T) {
		c := dialXDSTLS(t, br.bridge, ca, clientID, "greeter")
		c.expect(t, bs[0])
		br.writeServices(t, twoServices(bs[1], bs[2]))
		c.expect(t, bs[1])
	})
	t.Run("restricted", func(t *testing.T) {
		dialXDSTLS(t, br.bridge, ca, partnerID, "api").expect(t, bs[2])
		err := dialXDSTLS(t, br.bridge, ca, partnerID, "greeter").fails(t)
		t.Logf("partner's RPC to xds:///greeter: %v", err)
	})
	t.Run("denied", func(t *testing.T) {
		before := metricSum(t, br.bridge, "xdsbridge_xds_clients_denied_total")
		c := dialXDSTLS(t, br.bridge, ca, strangerID, "greeter")
		// The client is told why: its RPCs fail with the resolver's error,
		// the stream's PermissionDenied and the bridge's message.
		waitFor(t, 10*time.Second, "the stranger's RPC to fail with PermissionDenied", func() error {
			err := c.fails(t)
			if !strings.Contains(err.Error(), "PermissionDenied") || !strings.Contains(err.Error(), "xds.authorization") {
				return err
			}
			t.Logf("stranger's RPC: %v", err)
			return nil
		})
		waitFor(t, 10*time.Second, "the bridge to count the denied client", func() error {
			if n := metricSum(t, br.bridge, "xdsbridge_xds_clients_denied_total"); n <= before {
				return fmt.Errorf("xdsbridge_xds_clients_denied_total = %v, was %v", n, before)
			}
			return nil
		})
	})
	assertNoNACKs(t, br.bridge)
}
