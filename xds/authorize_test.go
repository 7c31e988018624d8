package xds

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/xdsbridge/xdsbridge/internal/testcerts"
)

func certWith(t *testing.T, uris []string, dns []string) *x509.Certificate {
	t.Helper()
	c := &x509.Certificate{DNSNames: dns, NotAfter: time.Now().Add(time.Hour)}
	for _, s := range uris {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		c.URIs = append(c.URIs, u)
	}
	return c
}

func verifiedCtx(cert *x509.Certificate) context.Context {
	return peer.NewContext(context.Background(), &peer.Peer{
		Addr:     &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1234},
		AuthInfo: credentials.TLSInfo{State: tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}, VerifiedChains: [][]*x509.Certificate{{cert}}}},
	})
}

func TestAuthRuleMatch(t *testing.T) {
	for _, tc := range []struct {
		name string
		rule AuthRule
		uris []string
		dns  []string
		want string // the SAN matched; "" none
	}{
		{"spiffe td", AuthRule{SPIFFETrustDomain: "prod.example.org"}, []string{"spiffe://prod.example.org/ns/web/sa/envoy"}, nil, "spiffe://prod.example.org/ns/web/sa/envoy"},
		{"spiffe other td", AuthRule{SPIFFETrustDomain: "prod.example.org"}, []string{"spiffe://dev.example.org/ns/web"}, nil, ""},
		{"spiffe td is not a suffix", AuthRule{SPIFFETrustDomain: "example.org"}, []string{"spiffe://prod.example.org/ns/web"}, nil, ""},
		{"spiffe upper-case td", AuthRule{SPIFFETrustDomain: "prod.example.org"}, []string{"spiffe://PROD.example.org/ns/web"}, nil, ""},
		{"spiffe query", AuthRule{SPIFFETrustDomain: "td"}, []string{"spiffe://td/ns/web?x=1"}, nil, ""},
		{"spiffe empty query", AuthRule{SPIFFETrustDomain: "td"}, []string{"spiffe://td/ns/web?"}, nil, ""},
		{"spiffe fragment", AuthRule{SPIFFETrustDomain: "td"}, []string{"spiffe://td/ns/web#f"}, nil, ""},
		{"spiffe userinfo", AuthRule{SPIFFETrustDomain: "td"}, []string{"spiffe://u@td/ns/web"}, nil, ""},
		{"spiffe port", AuthRule{SPIFFETrustDomain: "td"}, []string{"spiffe://td:8443/ns/web"}, nil, ""},
		{"spiffe no path", AuthRule{SPIFFETrustDomain: "td"}, []string{"spiffe://td"}, nil, ""},
		{"spiffe dot segment", AuthRule{SPIFFETrustDomain: "td"}, []string{"spiffe://td/ns/../web"}, nil, ""},
		{"spiffe empty segment", AuthRule{SPIFFETrustDomain: "td"}, []string{"spiffe://td/ns//web"}, nil, ""},
		{"spiffe percent-encoded", AuthRule{SPIFFETrustDomain: "td"}, []string{"spiffe://td/ns/w%2Feb"}, nil, ""},
		{"spiffe second SAN", AuthRule{SPIFFETrustDomain: "td"}, []string{"https://td/x", "spiffe://td/a"}, nil, "spiffe://td/a"},
		{"invalid spiffe by uri", AuthRule{URI: "spiffe://td/ns/web?x=1"}, []string{"spiffe://td/ns/web?x=1"}, nil, ""},
		{"uri exact", AuthRule{URI: "spiffe://td/ns/web/sa/envoy"}, []string{"spiffe://td/ns/web/sa/envoy"}, nil, "spiffe://td/ns/web/sa/envoy"},
		{"uri exact longer", AuthRule{URI: "spiffe://td/ns/web"}, []string{"spiffe://td/ns/web/sa/envoy"}, nil, ""},
		{"uri prefix slash", AuthRule{URIPrefix: "spiffe://td/ns/web/"}, []string{"spiffe://td/ns/web/sa/envoy"}, nil, "spiffe://td/ns/web/sa/envoy"},
		{"uri prefix boundary", AuthRule{URIPrefix: "spiffe://td/ns/web"}, []string{"spiffe://td/ns/web/sa/envoy"}, nil, "spiffe://td/ns/web/sa/envoy"},
		{"uri prefix equal", AuthRule{URIPrefix: "spiffe://td/ns/web"}, []string{"spiffe://td/ns/web"}, nil, "spiffe://td/ns/web"},
		{"uri prefix not a boundary", AuthRule{URIPrefix: "spiffe://td/ns/web"}, []string{"spiffe://td/ns/webhook/sa/x"}, nil, ""},
		{"uri prefix td boundary", AuthRule{URIPrefix: "spiffe://td"}, []string{"spiffe://td.evil.org/ns/web"}, nil, ""},
		{"uri does not match dns", AuthRule{URI: "a.example.org"}, nil, []string{"a.example.org"}, ""},
		{"dns exact", AuthRule{DNS: "envoy.example.org"}, nil, []string{"x.example.org", "Envoy.Example.ORG"}, "Envoy.Example.ORG"},
		{"dns exact trailing dot", AuthRule{DNS: "envoy.example.org."}, nil, []string{"envoy.example.org"}, "envoy.example.org"},
		{"dns exact not suffix", AuthRule{DNS: "example.org"}, nil, []string{"envoy.example.org"}, ""},
		{"dns does not match uri", AuthRule{DNS: "td"}, []string{"spiffe://td/a"}, nil, ""},
		{"dns suffix dot", AuthRule{DNSSuffix: ".edge.example.org"}, nil, []string{"a.edge.example.org"}, "a.edge.example.org"},
		{"dns suffix no dot", AuthRule{DNSSuffix: "edge.example.org"}, nil, []string{"b.a.EDGE.example.org"}, "b.a.EDGE.example.org"},
		{"dns suffix itself", AuthRule{DNSSuffix: ".edge.example.org"}, nil, []string{"edge.example.org"}, ""},
		{"dns suffix label boundary", AuthRule{DNSSuffix: "edge.example.org"}, nil, []string{"badedge.example.org"}, ""},
		{"dns suffix empty label", AuthRule{DNSSuffix: "edge.example.org"}, nil, []string{".edge.example.org"}, ""},
		{"dns suffix trailing dot", AuthRule{DNSSuffix: "edge.example.org."}, nil, []string{"a.edge.example.org."}, "a.edge.example.org."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := tc.rule.match(certWith(t, tc.uris, tc.dns))
			if ok != (tc.want != "") || got != tc.want {
				t.Errorf("match = %q, %v; want %q", got, ok, tc.want)
			}
		})
	}
}

func TestAuthorizeFirstRuleDecides(t *testing.T) {
	a := &Authorization{Allow: []AuthRule{
		{URIPrefix: "spiffe://td/ns/web/", Resources: []string{"web-*"}},
		{SPIFFETrustDomain: "td"},
		{DNSSuffix: "example.org", Resources: []string{"a", "b"}},
	}}
	id, vis, reason, err := a.authorize(verifiedCtx(certWith(t, []string{"spiffe://td/ns/web/sa/e"}, []string{"x.example.org"})), time.Now(), nil)
	if err != nil || id != "spiffe://td/ns/web/sa/e" || vis == nil || !vis.sees("web-1") || vis.sees("api") || reason != "" {
		t.Fatalf("web client: %q %v %q %v", id, vis, reason, err)
	}
	id, vis, _, err = a.authorize(verifiedCtx(certWith(t, []string{"spiffe://td/ns/api/sa/e"}, nil)), time.Now(), nil)
	if err != nil || id != "spiffe://td/ns/api/sa/e" || vis != nil {
		t.Fatalf("api client: %q %v %v", id, vis, err)
	}
	id, vis, _, err = a.authorize(verifiedCtx(certWith(t, []string{"spiffe://other/x"}, []string{"x.example.org"})), time.Now(), nil)
	if err != nil || id != "x.example.org" || !vis.sees("b") || vis.sees("c") {
		t.Fatalf("dns client: %q %v %v", id, vis, err)
	}
}

func TestAuthorizeDenied(t *testing.T) {
	a := &Authorization{Allow: []AuthRule{{SPIFFETrustDomain: "td"}}}
	ca := testcerts.NewCA(t, "ca")
	leaf := ca.Issue(t, testcerts.LeafOptions{CommonName: "c", URIs: []string{"spiffe://other/ns/web"}, DNS: []string{"web.example.org"}})
	long := certWith(t, nil, nil)
	for i := range 100 {
		long.DNSNames = append(long.DNSNames, strings.Repeat("x", 60)+string(rune('a'+i%26))+".example.org")
	}
	for _, tc := range []struct {
		name, reason string
		ctx          context.Context
		want         []string // in the message
	}{
		{"no peer", deniedNoCertificate, context.Background(), []string{"no certificate", "xds.authorization.allow did not match"}},
		{"no tls", deniedNoCertificate, peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{}}), []string{"no certificate"}},
		{"no certificate", deniedNoCertificate, peer.NewContext(context.Background(), &peer.Peer{AuthInfo: credentials.TLSInfo{}}), []string{"no certificate"}},
		{"unverified", deniedUnverified, peer.NewContext(context.Background(), &peer.Peer{AuthInfo: credentials.TLSInfo{State: tls.ConnectionState{PeerCertificates: []*x509.Certificate{certWith(t, []string{"spiffe://td/a"}, nil)}}}}),
			[]string{"not verified", "xds.tls.client_ca_file", "URI:spiffe://td/a", "xds.authorization.allow did not match"}},
		{"no match", deniedNoMatch, verifiedCtx(leaf.Cert), []string{"xds.authorization.allow did not match", "URI:spiffe://other/ns/web", "DNS:web.example.org"}},
		{"no match, many SANs", deniedNoMatch, verifiedCtx(long), []string{"xds.authorization.allow did not match", "more"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, reason, err := a.authorize(tc.ctx, time.Now(), nil)
			if status.Code(err) != codes.PermissionDenied || reason != tc.reason {
				t.Fatalf("got %q %v; want %s PermissionDenied", reason, err, tc.reason)
			}
			msg := status.Convert(err).Message()
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("message %q lacks %q", msg, w)
				}
			}
			if len(msg) > maxSANText+200 {
				t.Errorf("message of %d bytes", len(msg))
			}
		})
	}
}

// verifyAgainst is a VerifyClient of a fixed pool, as certs.Watcher's.
func verifyAgainst(cas ...*x509.Certificate) func([]*x509.Certificate) error {
	pool := x509.NewCertPool()
	for _, c := range cas {
		pool.AddCert(c)
	}
	return func(chain []*x509.Certificate) error {
		_, err := chain[0].Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		return err
	}
}

// handshakeCtx is a stream's context on a connection whose handshake
// verified leaf by ca.
func handshakeCtx(leaf, ca *x509.Certificate) context.Context {
	return peer.NewContext(context.Background(), &peer.Peer{
		Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1234},
		AuthInfo: credentials.TLSInfo{State: tls.ConnectionState{
			PeerCertificates: []*x509.Certificate{leaf}, VerifiedChains: [][]*x509.Certificate{{leaf, ca}}}},
	})
}

// A stream opened on a connection whose certificate expired since the
// handshake, or whose CA left the client CA pool, is refused with its own
// reason; a still valid one is served. With and without an Authorization
// (Server.recheck).
func TestAuthorizeRechecksCertificate(t *testing.T) {
	a := &Authorization{Allow: []AuthRule{{SPIFFETrustDomain: "td"}}}
	ca, other := testcerts.NewCA(t, "ca"), testcerts.NewCA(t, "other")
	leaf := ca.Issue(t, testcerts.LeafOptions{URIs: []string{"spiffe://td/ns/web"}, NotAfter: time.Now().Add(time.Hour)})
	ctx := handshakeCtx(leaf.Cert, ca.Cert)
	now := time.Now()
	later := leaf.Cert.NotAfter.Add(time.Second)
	for _, tc := range []struct {
		name   string
		now    time.Time
		verify func([]*x509.Certificate) error
		reason string // "": served
		want   string // in the message
	}{
		{"valid, no hook", now, nil, "", ""},
		{"valid, CA current", now, verifyAgainst(ca.Cert), "", ""},
		{"valid, CA one of several", now, verifyAgainst(other.Cert, ca.Cert), "", ""},
		{"expired, no hook", later, nil, deniedExpired, "expired at"},
		{"expired, CA current", later, verifyAgainst(ca.Cert), deniedExpired, "expired at"},
		{"CA rotated away", now, verifyAgainst(other.Cert), deniedUntrusted, "no longer verifies against xds.tls.client_ca_file"},
		{"CA expired", now, func([]*x509.Certificate) error {
			return x509.CertificateInvalidError{Cert: ca.Cert, Reason: x509.Expired}
		}, deniedExpired, "no longer verifies"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			check := func(what, reason string, err error) {
				t.Helper()
				if tc.reason == "" {
					if err != nil {
						t.Fatalf("%s: refused: %s %v", what, reason, err)
					}
					return
				}
				if status.Code(err) != codes.PermissionDenied || reason != tc.reason {
					t.Fatalf("%s: got %q %v, want %s PermissionDenied", what, reason, err, tc.reason)
				}
				if msg := status.Convert(err).Message(); !strings.Contains(msg, tc.want) || !strings.Contains(msg, "URI:spiffe://td/ns/web") {
					t.Errorf("%s: message %q lacks %q or the SAN", what, msg, tc.want)
				}
			}
			id, _, reason, err := a.authorize(ctx, tc.now, tc.verify)
			if err == nil && id != "spiffe://td/ns/web" {
				t.Errorf("identity %q", id)
			}
			check("authorization", reason, err)
			if tc.verify != nil {
				s := NewServer(NewCache(), Options{VerifyClient: tc.verify})
				reason, err := s.recheck(ctx, tc.now)
				check("no authorization", reason, err)
			}
		})
	}
	// Without an authorization, a connection without a verified
	// certificate is not the recheck's to refuse.
	s := NewServer(NewCache(), Options{VerifyClient: verifyAgainst(other.Cert)})
	for _, ctx := range []context.Context{context.Background(), peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{}})} {
		if reason, err := s.recheck(ctx, now); err != nil {
			t.Errorf("recheck of a connection without a certificate: %s %v", reason, err)
		}
	}
}

func TestDenyLogRateLimited(t *testing.T) {
	var d denyLog
	now := time.Unix(1000, 0)
	logged := 0
	for range 1000 {
		if ok, _ := d.allow(now); ok {
			logged++
		}
		now = now.Add(time.Millisecond)
	}
	if logged != denyLogBurst {
		t.Fatalf("logged %d of 1000 denials in 1 s, want %d", logged, denyLogBurst)
	}
	ok, suppressed := d.allow(now.Add(denyLogWindow))
	if !ok || suppressed != 1000-denyLogBurst {
		t.Fatalf("next window: %v, %d suppressed; want true, %d", ok, suppressed, 1000-denyLogBurst)
	}
}

func TestVisibility(t *testing.T) {
	var all *visibility
	v := &visibility{patterns: []string{"web-*", "api", "*.prod"}}
	for n, want := range map[string]bool{"web-1": true, "web-": true, "api": true, "api2": false, "db.prod": true, "x/y.prod": false, "web": false} {
		if got := v.sees(n); got != want {
			t.Errorf("sees(%q) = %v", n, got)
		}
		if !all.sees(n) {
			t.Errorf("nil visibility hides %q", n)
		}
	}
}

func TestAuthorizationCheckNamesTheField(t *testing.T) {
	for rule, want := range map[string]AuthRule{
		"allow[0].dns_suffix: \".\" names no domain": {DNSSuffix: "."},
		"allow[0].spiffe_trust_domain:":              {SPIFFETrustDomain: "spiffe://td"},
		"allow[0].resources[0]:":                     {DNS: "a", Resources: []string{"["}},
	} {
		err := Authorization{Allow: []AuthRule{want}}.Check()
		if err == nil || !strings.HasPrefix(err.Error(), rule) {
			t.Errorf("Check(%+v) = %v, want %q...", want, err, rule)
		}
	}
}

// Once some stream is restricted, a watch the cache cannot tie to its
// stream is refused, not served unfiltered.
func TestRestrictedCacheRefusesUnknownStreams(t *testing.T) {
	c := NewCache()
	c.MarkReady()
	d := NewDeltaDriver(c, 4) // each watch answers at once
	cancel, err := d.Watch(&discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType})
	if err != nil {
		t.Fatalf("unrestricted cache: %v", err)
	}
	cancel()
	c.openStream(streamKey{true, 1}, &visibility{patterns: []string{"web-*"}})
	if _, err := d.Watch(&discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType}); err == nil || !strings.Contains(err.Error(), "xds.authorization") {
		t.Fatalf("restricted cache, unknown stream: %v", err)
	}
	req := &discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType}
	c.noteRequest(req, streamKey{true, 1}, ClusterType)
	if _, err := d.Watch(req); err != nil {
		t.Fatalf("restricted cache, noted stream: %v", err)
	}
}
