package xds_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"sync/atomic"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/xdsbridge/xdsbridge/internal/testcerts"
	"github.com/xdsbridge/xdsbridge/translate"
	"github.com/xdsbridge/xdsbridge/xds"
)

// rotatingClient is a grpc-go client whose TLS credentials present the
// certificate current at each handshake (as a SPIRE or cert-manager client
// does), and opens one stream at a time.
type rotatingClient struct {
	t    *testing.T
	cur  atomic.Pointer[tls.Certificate]
	conn *grpc.ClientConn
}

func (th *tlsHarness) rotatingClient(leaf testcerts.Leaf) *rotatingClient {
	th.t.Helper()
	rc := &rotatingClient{t: th.t}
	rc.rotate(leaf)
	pool := x509.NewCertPool()
	pool.AddCert(th.ca.Cert)
	cfg := &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS12,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return rc.cur.Load(), nil }}
	conn, err := grpc.NewClient(th.addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		th.t.Fatal(err)
	}
	th.t.Cleanup(func() { conn.Close() })
	rc.conn = conn
	return rc
}

func (rc *rotatingClient) rotate(leaf testcerts.Leaf) {
	rc.t.Helper()
	c, err := tls.X509KeyPair(leaf.CertPEM, leaf.KeyPEM)
	if err != nil {
		rc.t.Fatal(err)
	}
	rc.cur.Store(&c)
}

// open opens a delta stream, asks for clusters and returns the error of
// the first response (nil: served).
func (rc *rotatingClient) open() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := discovery.NewAggregatedDiscoveryServiceClient(rc.conn).DeltaAggregatedResources(ctx)
	if err != nil {
		return err
	}
	_ = st.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: xds.ClusterType})
	_, err = st.Recv()
	return err
}

// retry opens streams as a client retrying does, for up to 5 s, until
// one's error satisfies done; it returns the codes seen.
func (rc *rotatingClient) retry(done func(error) bool) ([]codes.Code, bool) {
	var seen []codes.Code
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		err := rc.open()
		seen = append(seen, status.Code(err))
		if done(err) {
			return seen, true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return seen, false
}

// A client that rotated its certificate before the old one expired keeps
// the connection of its old one; once that expired, the stream it opens
// is refused (expired) and the server closes the connection, so the
// client's retry handshakes again, with its current certificate, and is
// served within a second or so. Another client's connection and stream
// are untouched.
func TestRotatedClientServedOnNewConnection(t *testing.T) {
	th := newTLSHarnessWith(t, tls.RequireAndVerifyClientCert, xds.Options{VerifyClient: func([]*x509.Certificate) error { return nil }})
	if err := th.cache.PublishServices([]translate.Resources{svc("a", 1001)}, nil); err != nil {
		t.Fatal(err)
	}
	short := th.ca.Issue(t, testcerts.LeafOptions{URIs: []string{"spiffe://a/b"}, NotAfter: time.Now().Add(2 * time.Second)})
	long := th.ca.Issue(t, testcerts.LeafOptions{URIs: []string{"spiffe://a/b"}})
	rc := th.rotatingClient(short)
	if err := rc.open(); err != nil {
		t.Fatal(err)
	}
	// A bystander on a connection of its own, with a stream open.
	other := th.client(th.leaf([]string{"spiffe://a/c"}, nil))
	kept := other.delta("bystander")
	kept.send(&discovery.DeltaDiscoveryRequest{TypeUrl: cds})
	kept.ack(kept.recv())

	rc.rotate(long) // well before the old one expires
	time.Sleep(time.Until(short.Cert.NotAfter) + 200*time.Millisecond)
	start := time.Now()
	seen, ok := rc.retry(func(err error) bool { return err == nil })
	t.Logf("codes seen until served: %v, in %v", seen, time.Since(start).Round(time.Millisecond))
	if !ok {
		t.Fatalf("a client holding a valid rotated certificate not served within 5 s: %v", seen)
	}
	if seen[0] != codes.PermissionDenied {
		t.Errorf("first stream after the old certificate expired: %v, want PermissionDenied", seen[0])
	}
	if got := th.closed("expired"); got != 1 {
		t.Errorf("connections_closed{reason=expired} = %v, want 1", got)
	}
	if got := th.closed("untrusted"); got != 0 {
		t.Errorf("connections_closed{reason=untrusted} = %v, want 0", got)
	}

	// The bystander's stream goes on.
	if err := th.cache.PublishServices([]translate.Resources{svc("b", 1002)}, nil); err != nil {
		t.Fatal(err)
	}
	eq(t, "bystander's stream", []string{"b"}, names(kept.recv()))
	if got := th.closed("expired"); got != 1 {
		t.Errorf("connections_closed{reason=expired} = %v after, want 1", got)
	}
}

// A connection refused because its CA left the client CA pool is closed
// too; the client's reconnect then fails the handshake (the listener
// verifies against the same pool), so it is refused there, and no stream
// opens; with its CA back, it is served again.
func TestUntrustedConnectionClosedReconnectFailsHandshake(t *testing.T) {
	var pool atomic.Pointer[x509.CertPool]
	verify := func(chain []*x509.Certificate) error {
		_, err := chain[0].Verify(x509.VerifyOptions{Roots: pool.Load(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		return err
	}
	th := newTLSHarnessWith(t, tls.RequireAndVerifyClientCert, xds.Options{VerifyClient: verify})
	pool.Store(th.clientCAs.Load())
	if err := th.cache.PublishServices([]translate.Resources{svc("a", 1001)}, nil); err != nil {
		t.Fatal(err)
	}
	rc := th.rotatingClient(*th.leaf([]string{"spiffe://a/b"}, nil))
	if err := rc.open(); err != nil {
		t.Fatal(err)
	}

	// The CA leaves the bundle (the handshake's pool and VerifyClient's).
	next := testcerts.NewCA(t, "next CA")
	rotated := x509.NewCertPool()
	rotated.AddCert(next.Cert)
	pool.Store(rotated)
	original := th.clientCAs.Swap(rotated)
	seen, ok := rc.retry(func(err error) bool { return status.Code(err) == codes.Unavailable })
	t.Logf("codes seen: %v", seen)
	if !ok {
		t.Fatalf("the connection of an untrusted client was not closed, or its reconnect not refused: %v", seen)
	}
	if seen[0] != codes.PermissionDenied {
		t.Errorf("first stream after the CA left: %v, want PermissionDenied", seen[0])
	}
	if got := th.closed("untrusted"); got != 1 {
		t.Errorf("connections_closed{reason=untrusted} = %v, want 1", got)
	}
	// Refused at the handshake from now on: no stream reaches the server.
	denied := th.denied("untrusted")
	for range 3 {
		if err := rc.open(); status.Code(err) != codes.Unavailable {
			t.Fatalf("stream of an untrusted client: %v, want Unavailable (handshake refused)", err)
		}
	}
	if got := th.denied("untrusted"); got != denied {
		t.Errorf("denied{reason=untrusted} went from %v to %v: a stream reached the server", denied, got)
	}

	// The CA back: served again.
	th.clientCAs.Store(original)
	pool.Store(original)
	if seen, ok := rc.retry(func(err error) bool { return err == nil }); !ok {
		t.Fatalf("client not served with its CA back: %v", seen)
	}
}
