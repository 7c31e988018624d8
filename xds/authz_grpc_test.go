package xds_test

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/xdsbridge/xdsbridge/internal/logbuf"
	"github.com/xdsbridge/xdsbridge/internal/testcerts"
	"github.com/xdsbridge/xdsbridge/translate"
	"github.com/xdsbridge/xdsbridge/xds"
)

// tlsHarness runs a cache and server with mTLS credentials on 127.0.0.1:0.
type tlsHarness struct {
	t     *testing.T
	ca    *testcerts.CA
	cache *xds.Cache
	srv   *xds.Server
	reg   *prometheus.Registry
	addr  string
	logs  *logbuf.Buffer
	// clientCAs is the pool the listener's handshake verifies client
	// certificates against (at first the CA's alone); a test may swap it.
	clientCAs *atomic.Pointer[x509.CertPool]
}

func newTLSHarness(t *testing.T, auth tls.ClientAuthType, authz *xds.Authorization) *tlsHarness {
	t.Helper()
	return newTLSHarnessWith(t, auth, xds.Options{Authorization: authz})
}

// newTLSHarnessWith takes the server's options but the credentials,
// metrics and logger.
func newTLSHarnessWith(t *testing.T, auth tls.ClientAuthType, opts xds.Options) *tlsHarness {
	t.Helper()
	ca := testcerts.NewCA(t, "xds test CA")
	srvLeaf := ca.Server(t)
	srvCert, err := tls.X509KeyPair(srvLeaf.CertPEM, srvLeaf.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	clientCAs := &atomic.Pointer[x509.CertPool]{}
	clientCAs.Store(pool)
	creds := credentials.NewTLS(&tls.Config{GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
		return &tls.Config{Certificates: []tls.Certificate{srvCert}, ClientCAs: clientCAs.Load(), ClientAuth: auth, MinVersion: tls.VersionTLS12, SessionTicketsDisabled: true}, nil
	}})
	c := xds.NewCache()
	c.MarkReady()
	reg := prometheus.NewRegistry()
	logs := &logbuf.Buffer{}
	opts.Creds, opts.Metrics = creds, reg
	opts.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s := xds.NewServer(c, opts)
	addr := runServer(t, s)
	return &tlsHarness{t: t, ca: ca, cache: c, srv: s, reg: reg, addr: addr, logs: logs, clientCAs: clientCAs}
}

// client connects with the certificate (none if nil) and returns a
// harness whose delta and sotw streams use that connection.
func (th *tlsHarness) client(leaf *testcerts.Leaf) *harness {
	th.t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(th.ca.Cert)
	cfg := &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS12}
	if leaf != nil {
		cert, err := tls.X509KeyPair(leaf.CertPEM, leaf.KeyPEM)
		if err != nil {
			th.t.Fatal(err)
		}
		// Sent whatever CAs the server names (a test presents one it
		// does not trust).
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }
	}
	conn, err := grpc.NewClient(th.addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		th.t.Fatal(err)
	}
	th.t.Cleanup(func() { conn.Close() })
	return &harness{t: th.t, cache: th.cache, srv: th.srv, conn: conn}
}

func (th *tlsHarness) leaf(uris, dns []string) *testcerts.Leaf {
	l := th.ca.Issue(th.t, testcerts.LeafOptions{CommonName: "envoy", URIs: uris, DNS: dns})
	return &l
}

func (th *tlsHarness) denied(reason string) float64 {
	th.t.Helper()
	return th.counter("xdsbridge_xds_clients_denied_total", reason)
}

// closed is xdsbridge_xds_connections_closed_total{reason}.
func (th *tlsHarness) closed(reason string) float64 {
	th.t.Helper()
	return th.counter("xdsbridge_xds_connections_closed_total", reason)
}

func (th *tlsHarness) counter(name, reason string) float64 {
	th.t.Helper()
	mfs, err := th.reg.Gather()
	if err != nil {
		th.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// ended waits for the stream to end and returns its error.
func ended[Req, Resp any](t *testing.T, c *adsStream[Req, Resp]) error {
	t.Helper()
	select {
	case <-c.ended:
		return c.err
	case r := <-c.resp:
		t.Fatalf("a response to a refused client: %s", c.describe(r))
	case <-timeAfter5s():
		t.Fatal("the stream of a refused client did not end")
	}
	return nil
}

var testAuthz = &xds.Authorization{Allow: []xds.AuthRule{
	{SPIFFETrustDomain: "prod.test"},
	{DNSSuffix: "edge.test", Resources: []string{"web-*"}},
}}

// An allowed client is served and shows its identity; a refused one, on
// either variant, gets PermissionDenied naming its SANs and the config
// field, is counted, and a reconnect loop logs a bounded number of lines.
func TestAuthorizationAllowsAndRefuses(t *testing.T) {
	th := newTLSHarness(t, tls.RequireAndVerifyClientCert, testAuthz)
	h := th.client(th.leaf([]string{"spiffe://prod.test/ns/a/sa/envoy"}, nil))
	h.publish([]translate.Resources{svc("a", 1001), svc("b", 1002)})
	c := h.delta("allowed")
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: cds})
	r := c.recv()
	eq(t, "allowed client's CDS", []string{"a", "b"}, names(r))
	c.ack(r)
	cl := h.srv.ClientStatuses()
	if len(cl) != 1 || cl[0].Identity != "spiffe://prod.test/ns/a/sa/envoy" {
		t.Fatalf("clients: %+v", cl)
	}

	bad := th.client(th.leaf([]string{"spiffe://dev.test/ns/a/sa/envoy"}, []string{"envoy.other.test"}))
	const tries = 25
	for i := range tries {
		var err error
		if i%2 == 0 {
			d := bad.delta("refused")
			_ = d.sendFn(&discovery.DeltaDiscoveryRequest{TypeUrl: cds}) // the server may have ended the stream
			err = ended(t, d.adsStream)
		} else {
			s := bad.sotw()
			_ = s.sendFn(&discovery.DiscoveryRequest{TypeUrl: cds})
			err = ended(t, s.adsStream)
		}
		st := status.Convert(err)
		if st.Code() != codes.PermissionDenied {
			t.Fatalf("refused client: %v, want PermissionDenied", err)
		}
		for _, w := range []string{"xds.authorization.allow did not match", "URI:spiffe://dev.test/ns/a/sa/envoy", "DNS:envoy.other.test"} {
			if !strings.Contains(st.Message(), w) {
				t.Fatalf("message %q lacks %q", st.Message(), w)
			}
		}
	}
	if got := th.denied("no_match"); got != tries {
		t.Errorf("denied{reason=no_match} = %v, want %d", got, tries)
	}
	if n := strings.Count(th.logs.String(), "xDS client refused"); n < 1 || n > 10 {
		t.Errorf("%d refusals logged for %d denials, want 1..10:\n%s", n, tries, th.logs)
	}
	if cl := h.srv.ClientStatuses(); len(cl) != 1 {
		t.Errorf("refused streams listed: %+v", cl)
	}
	// The allowed stream is still served.
	h.publish([]translate.Resources{svc("c", 1003)})
	eq(t, "allowed client after refusals", []string{"c"}, names(c.recv()))
}

// Without a certificate the listener lets through (VerifyClientCertIfGiven),
// or with one it does not verify (RequireAnyClientCert), a client is
// refused with its own reason.
func TestAuthorizationRefusesUnverified(t *testing.T) {
	for _, tc := range []struct {
		name   string
		auth   tls.ClientAuthType
		self   bool // a self-signed certificate
		reason string
	}{
		{"no certificate", tls.VerifyClientCertIfGiven, false, "no_certificate"},
		{"unverified", tls.RequireAnyClientCert, true, "unverified"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			th := newTLSHarness(t, tc.auth, testAuthz)
			var leaf *testcerts.Leaf
			if tc.self {
				// Signed by another CA: presented, not verified.
				l := testcerts.NewCA(t, "other").Issue(t, testcerts.LeafOptions{URIs: []string{"spiffe://prod.test/ns/a/sa/envoy"}})
				leaf = &l
			}
			d := th.client(leaf).delta("x")
			_ = d.sendFn(&discovery.DeltaDiscoveryRequest{TypeUrl: cds})
			if err := ended(t, d.adsStream); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "xds.authorization") {
				t.Fatalf("got %v, want PermissionDenied naming xds.authorization", err)
			}
			if got := th.denied(tc.reason); got != 1 {
				t.Errorf("denied{reason=%s} = %v, want 1", tc.reason, got)
			}
		})
	}
}

// A client whose rule has resource patterns sees only matching names: a
// wildcard subscription gets only those, a named one is told the others
// do not exist (delta) or does not get them (sotw), and changes to the
// others send it nothing. An unrestricted client on the same server sees
// everything.
func TestAuthorizationRestrictsResources(t *testing.T) {
	th := newTLSHarness(t, tls.RequireAndVerifyClientCert, testAuthz)
	web := th.client(th.leaf(nil, []string{"envoy-1.edge.test"}))
	all := th.client(th.leaf([]string{"spiffe://prod.test/ns/a/sa/envoy"}, nil))
	web.publish([]translate.Resources{svc("web-a", 1001), svc("web-b", 1002), svc("api", 1003), svc("db", 1004)})

	d := web.delta("web-delta")
	d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: cds})
	r := d.recv()
	eq(t, "restricted wildcard CDS", []string{"web-a", "web-b"}, names(r))
	d.ack(r)
	d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: []string{"web-a", "api"}})
	r = d.recv()
	eq(t, "restricted named EDS", []string{"web-a"}, names(r))
	eq(t, "restricted named EDS removed", []string{"api"}, r.RemovedResources)
	d.ack(r)

	s := web.sotw()
	s.send(&discovery.DiscoveryRequest{TypeUrl: cds})
	sr := s.recv()
	eq(t, "restricted sotw CDS", []string{"web-a", "web-b"}, sotwNames(t, sr))
	s.send(&discovery.DiscoveryRequest{TypeUrl: cds, VersionInfo: sr.VersionInfo, ResponseNonce: sr.Nonce})
	s.send(&discovery.DiscoveryRequest{TypeUrl: eds, ResourceNames: []string{"api", "web-b"}})
	sr = s.recv()
	eq(t, "restricted sotw EDS", []string{"web-b"}, sotwNames(t, sr))
	s.send(&discovery.DiscoveryRequest{TypeUrl: eds, ResourceNames: []string{"api", "web-b"}, VersionInfo: sr.VersionInfo, ResponseNonce: sr.Nonce})

	u := all.delta("all")
	u.send(&discovery.DeltaDiscoveryRequest{TypeUrl: cds})
	r = u.recv()
	eq(t, "unrestricted CDS", []string{"api", "db", "web-a", "web-b"}, names(r))
	u.ack(r)
	web.waitWatches(3, cds)
	web.waitWatches(2, eds)

	// Hidden: changed, added, deleted. Nothing for the restricted clients.
	web.publish([]translate.Resources{svc("api", 1003, 1005), svc("db2", 1006)}, "db")
	r = u.recv()
	eq(t, "unrestricted sees the addition", []string{"db2"}, names(r))
	u.ack(r)
	r = u.recv()
	eq(t, "unrestricted sees the removal", []string{"db"}, r.RemovedResources)
	u.ack(r)
	d.none()
	s.none()

	// Visible: sent as usual.
	web.publish([]translate.Resources{svc("web-b", 1002, 1007), svc("web-c", 1008)})
	r = d.recv()
	eq(t, "restricted delta gets the new cluster", []string{"web-c"}, names(r))
	d.ack(r)
	sr = s.recv()
	eq(t, "restricted sotw CDS after a visible change", []string{"web-a", "web-b", "web-c"}, sotwNames(t, sr))
	s.send(&discovery.DiscoveryRequest{TypeUrl: cds, VersionInfo: sr.VersionInfo, ResponseNonce: sr.Nonce})
	sr = s.recv()
	eq(t, "restricted sotw EDS after a visible change", []string{"web-b"}, sotwNames(t, sr))

	// A reconnecting client claiming a hidden name is told it is removed.
	d2 := web.delta("web-delta-2")
	d2.send(&discovery.DeltaDiscoveryRequest{TypeUrl: cds, InitialResourceVersions: map[string]string{"api": "x", "web-a": "y"}})
	r = d2.recv()
	eq(t, "reconnect: visible clusters", []string{"web-a", "web-b", "web-c"}, names(r))
	eq(t, "reconnect: a hidden name claimed is removed", []string{"api"}, r.RemovedResources)
}

// A restricted client's versions say nothing of what it cannot read: a
// sotw version_info is over the resources it reads (a hash over all of
// them would change with a hidden change, and let it test guesses of
// hidden names and contents), and a delta system_version_info, the type's
// change counter, is not sent to it. A hidden change sends it nothing; a
// new stream gets the versions it had; a visible change changes them. An
// unrestricted client's versions are over everything, as before.
func TestAuthorizationHidesVersions(t *testing.T) {
	th := newTLSHarness(t, tls.RequireAndVerifyClientCert, testAuthz)
	web := th.client(th.leaf(nil, []string{"envoy-1.edge.test"}))
	all := th.client(th.leaf([]string{"spiffe://prod.test/ns/a/sa/envoy"}, nil))
	web.publish([]translate.Resources{svc("web-a", 1001), svc("web-b", 1002), svc("api", 1003), svc("db", 1004)})

	// sotwVersions opens a sotw stream, and returns it with the
	// versions of its CDS (wildcard) and EDS (web-a, api) responses.
	sotwVersions := func(h *harness, what string) (s *sotwClient, cdsVer, edsVer string) {
		t.Helper()
		s = h.sotw()
		s.send(&discovery.DiscoveryRequest{TypeUrl: cds})
		r := s.recv()
		s.send(&discovery.DiscoveryRequest{TypeUrl: cds, VersionInfo: r.VersionInfo, ResponseNonce: r.Nonce})
		cdsVer = r.VersionInfo
		s.send(&discovery.DiscoveryRequest{TypeUrl: eds, ResourceNames: []string{"web-a", "api"}})
		r = s.recv()
		s.send(&discovery.DiscoveryRequest{TypeUrl: eds, ResourceNames: []string{"web-a", "api"}, VersionInfo: r.VersionInfo, ResponseNonce: r.Nonce})
		if cdsVer == "" || r.VersionInfo == "" {
			t.Fatalf("%s: empty version_info (CDS %q, EDS %q)", what, cdsVer, r.VersionInfo)
		}
		return s, cdsVer, r.VersionInfo
	}
	s, cdsVer, edsVer := sotwVersions(web, "restricted")
	u, uCDSVer, _ := sotwVersions(all, "unrestricted")

	d := web.delta("web-delta")
	d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: cds})
	r := d.recv()
	eq(t, "restricted delta CDS", []string{"web-a", "web-b"}, names(r))
	if r.SystemVersionInfo != "" {
		t.Errorf("restricted delta client told system_version_info %q", r.SystemVersionInfo)
	}
	d.ack(r)
	ud := all.delta("all-delta")
	ud.send(&discovery.DeltaDiscoveryRequest{TypeUrl: cds})
	r = ud.recv()
	if r.SystemVersionInfo == "" {
		t.Error("unrestricted delta client told no system_version_info")
	}
	ud.ack(r)
	web.waitWatches(4, cds)
	web.waitWatches(2, eds)

	// Hidden: changed, added, deleted.
	web.publish([]translate.Resources{svc("api", 1003, 1005), svc("db2", 1006)}, "db")
	ur := u.recv()
	if ur.VersionInfo == uCDSVer {
		t.Errorf("unrestricted sotw CDS version %s unchanged by a change it sees", ur.VersionInfo)
	}
	u.send(&discovery.DiscoveryRequest{TypeUrl: cds, VersionInfo: ur.VersionInfo, ResponseNonce: ur.Nonce})
	s.none()
	d.none()
	_, cdsVer2, edsVer2 := sotwVersions(web, "restricted, after hidden changes")
	if cdsVer2 != cdsVer || edsVer2 != edsVer {
		t.Errorf("restricted sotw versions after hidden changes: CDS %s EDS %s, were %s %s", cdsVer2, edsVer2, cdsVer, edsVer)
	}

	// Visible: new versions.
	web.publish([]translate.Resources{svc("web-a", 1001, 1007), svc("web-c", 1008)})
	sr := s.recv()
	eq(t, "restricted sotw CDS after a visible change", []string{"web-a", "web-b", "web-c"}, sotwNames(t, sr))
	if sr.VersionInfo == cdsVer {
		t.Errorf("restricted sotw CDS version %s unchanged by a visible change", sr.VersionInfo)
	}
	s.send(&discovery.DiscoveryRequest{TypeUrl: cds, VersionInfo: sr.VersionInfo, ResponseNonce: sr.Nonce})
	sr = s.recv()
	eq(t, "restricted sotw EDS after a visible change", []string{"web-a"}, sotwNames(t, sr))
	if sr.VersionInfo == edsVer {
		t.Errorf("restricted sotw EDS version %s unchanged by a visible change", sr.VersionInfo)
	}
	r = d.recv()
	eq(t, "restricted delta after a visible change", []string{"web-c"}, names(r))
	if r.SystemVersionInfo != "" {
		t.Errorf("restricted delta client told system_version_info %q", r.SystemVersionInfo)
	}
}

// Each stream open checks the connection's certificate again: once it
// expired, or once its CA is out of the client CA pool (VerifyClient, the
// pool as it is now), a new stream on the same connection is refused with
// PermissionDenied and counted by reason, and the connection is closed
// (its streams opened before end with it) so that the client handshakes
// again; a still valid certificate is served, on its own connection
// untouched.
func TestAuthorizationRechecksAtStreamOpen(t *testing.T) {
	var pool atomic.Pointer[x509.CertPool]
	verify := func(chain []*x509.Certificate) error {
		inter := x509.NewCertPool()
		for _, c := range chain[1:] {
			inter.AddCert(c)
		}
		_, err := chain[0].Verify(x509.VerifyOptions{Roots: pool.Load(), Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		return err
	}
	for _, authz := range []*xds.Authorization{testAuthz, nil} {
		t.Run(fmt.Sprintf("authorization=%v", authz != nil), func(t *testing.T) {
			th := newTLSHarnessWith(t, tls.RequireAndVerifyClientCert, xds.Options{Authorization: authz, VerifyClient: verify})
			current := x509.NewCertPool()
			current.AddCert(th.ca.Cert)
			pool.Store(current)
			const id = "spiffe://prod.test/ns/a/sa/envoy"
			short := th.ca.Issue(t, testcerts.LeafOptions{URIs: []string{id}, NotAfter: time.Now().Add(2 * time.Second)})
			soon := th.client(&short)
			valid := th.client(th.leaf([]string{id}, nil))
			soon.publish([]translate.Resources{svc("a", 1001)})

			first := soon.delta("soon")
			first.send(&discovery.DeltaDiscoveryRequest{TypeUrl: cds})
			first.ack(first.recv())
			kept := valid.delta("valid")
			kept.send(&discovery.DeltaDiscoveryRequest{TypeUrl: cds})
			kept.ack(kept.recv())

			// The CA leaves the pool: no new stream, and the connection is
			// closed, its stream opened before with it.
			other := testcerts.NewCA(t, "next CA")
			rotated := x509.NewCertPool()
			rotated.AddCert(other.Cert)
			pool.Store(rotated)
			d := valid.delta("after rotation")
			_ = d.sendFn(&discovery.DeltaDiscoveryRequest{TypeUrl: cds})
			err := ended(t, d.adsStream)
			if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "no longer verifies against xds.tls.client_ca_file") {
				t.Fatalf("stream after the CA left the pool: %v, want PermissionDenied", err)
			}
			if got := th.denied("untrusted"); got != 1 {
				t.Errorf("denied{reason=untrusted} = %v, want 1", got)
			}
			if err := ended(t, kept.adsStream); status.Code(err) != codes.Unavailable {
				t.Fatalf("stream opened before the CA rotation, on the connection refused: %v, want Unavailable (connection closed)", err)
			}
			if got := th.closed("untrusted"); got != 1 {
				t.Errorf("connections_closed{reason=untrusted} = %v, want 1", got)
			}
			// The CA back (both): served again (a new connection).
			both := x509.NewCertPool()
			both.AddCert(other.Cert)
			both.AddCert(th.ca.Cert)
			pool.Store(both)
			s := valid.delta("reconnected")
			s.send(&discovery.DeltaDiscoveryRequest{TypeUrl: cds})
			r := s.recv()
			eq(t, "valid client, CA current", []string{"a"}, names(r))
			s.ack(r)

			// The certificate expires: no new stream, the connection closed.
			time.Sleep(time.Until(short.Cert.NotAfter) + 100*time.Millisecond)
			d = soon.delta("expired")
			_ = d.sendFn(&discovery.DeltaDiscoveryRequest{TypeUrl: cds})
			err = ended(t, d.adsStream)
			if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "expired at") {
				t.Fatalf("stream after the certificate expired: %v, want PermissionDenied", err)
			}
			if got := th.denied("expired"); got != 1 {
				t.Errorf("denied{reason=expired} = %v, want 1", got)
			}
			if err := ended(t, first.adsStream); status.Code(err) != codes.Unavailable {
				t.Fatalf("stream opened before the certificate expired: %v, want Unavailable (connection closed)", err)
			}
			if got := th.closed("expired"); got != 1 {
				t.Errorf("connections_closed{reason=expired} = %v, want 1", got)
			}

			// The other connection's stream goes on.
			soon.publish([]translate.Resources{svc("b", 1002)})
			eq(t, "stream of a connection not refused", []string{"b"}, names(s.recv()))
		})
	}
}

func timeAfter5s() <-chan time.Time { return time.After(5 * time.Second) }
