package xds

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/xdsbridge/xdsbridge/translate"
)

// Authorization at stream open (see Authorization in authz.go for the
// configuration). A stream is authorized by the verified certificate of
// its connection: the first certificate of the first chain the TLS
// handshake verified (credentials.TLSInfo.State.VerifiedChains[0][0]).
// A certificate the handshake did not verify (a listener that does not
// require verification) is refused like none, with its own reason.
//
// The handshake verified the certificate once, when the connection opened;
// a connection lives for hours or days, and opens streams throughout. So
// every stream open checks it again: a certificate whose NotAfter passed is
// refused (reason "expired"), and, with Options.VerifyClient (the app
// wires it when xds.tls.client_ca_file is set), the chain the client
// presented is verified again against the client CA pool current now,
// for client authentication: a certificate whose CA was taken out of
// client_ca_file is refused ("untrusted"). Either refusal also closes the
// connection, closeDelay later (conns.go): the client would retry on it,
// with the certificate of its handshake, forever; it connects again, and
// the new handshake checks its current certificate. Until a connection
// opens a stream, its open streams are not ended. These checks apply also
// without an Authorization, when the server has VerifyClient.
//
// Rules are tried in order; the first that matches one
// of the certificate's SANs (URI SANs, then DNS SANs, in certificate
// order) decides, and that SAN is the client's identity (/debug/clients).
//
// Matching:
//   - spiffe_trust_domain: a URI SAN that is a SPIFFE ID
//     spiffe://<trust domain>/<path> whose trust domain equals it. A
//     SPIFFE ID is valid when its trust domain is lower case
//     ([a-z0-9.-_]), its path non-empty, of segments of [A-Za-z0-9.-_]
//     other than "." and "..", and it has no user info, port, query,
//     fragment or percent-encoding. A URI SAN of the spiffe scheme that is
//     not a valid SPIFFE ID matches no rule (not uri nor uri_prefix
//     either).
//   - uri: the URI SAN as parsed and printed by Go's net/url equals it.
//   - uri_prefix: the URI SAN starts with it on a path boundary: the prefix
//     ends with "/", or the SAN equals it, or the SAN's next character is
//     "/" ("spiffe://td/ns/web" matches spiffe://td/ns/web/x but not
//     spiffe://td/ns/webhook).
//   - dns: the DNS SAN equals it, ignoring case and one trailing dot.
//   - dns_suffix: the DNS SAN ends with it on a label boundary, with at
//     least one more label in front, ignoring case, one leading dot of the
//     suffix and one trailing dot of either: "edge.example.org" and
//     ".edge.example.org" both match a.edge.example.org and
//     b.a.edge.example.org, and neither matches edge.example.org nor
//     badedge.example.org.

// visibility is what a client may read: the names matching one of the
// patterns (path.Match). A nil *visibility sees everything.
type visibility struct{ patterns []string }

func (v *visibility) sees(name string) bool {
	if v == nil {
		return true
	}
	// The VHDS stub of a route configuration is seen as the route
	// configuration it stands for (vhds.go).
	name = strings.TrimSuffix(name, translate.VHDSStubSuffix)
	for _, p := range v.patterns {
		if ok, _ := path.Match(p, name); ok {
			return true
		}
	}
	return false
}

// Reasons of a denial, the label of xdsbridge_xds_clients_denied_total.
const (
	deniedNoCertificate = "no_certificate" // no TLS, or no client certificate
	deniedUnverified    = "unverified"     // a certificate the handshake did not verify
	deniedNoMatch       = "no_match"       // no rule matched a SAN
	deniedExpired       = "expired"        // the certificate expired since the handshake
	deniedUntrusted     = "untrusted"      // the current client CA pool does not verify it
)

// authorize decides a stream by its context, at now, verifying the
// client's chain again with verify if set. It returns the SAN that matched
// and what the client may read (nil: everything), or the reason and a
// PermissionDenied error.
func (a *Authorization) authorize(ctx context.Context, now time.Time, verify func([]*x509.Certificate) error) (identity string, vis *visibility, reason string, err error) {
	p, _ := peer.FromContext(ctx)
	var info credentials.TLSInfo
	if p != nil {
		info, _ = p.AuthInfo.(credentials.TLSInfo)
	}
	if len(info.State.PeerCertificates) == 0 {
		return "", nil, deniedNoCertificate, status.Error(codes.PermissionDenied,
			"xds.authorization: the client presented no certificate (mTLS needed); xds.authorization.allow did not match")
	}
	if len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return "", nil, deniedUnverified, status.Errorf(codes.PermissionDenied,
			"xds.authorization: the client certificate (%s) was not verified against xds.tls.client_ca_file; xds.authorization.allow did not match", describeSANs(info.State.PeerCertificates[0]))
	}
	cert := info.State.VerifiedChains[0][0]
	if reason, err := stillValid(info.State.PeerCertificates, cert, now, verify, "xds.authorization"); err != nil {
		return "", nil, reason, err
	}
	for i := range a.Allow {
		r := &a.Allow[i]
		if san, ok := r.match(cert); ok {
			if len(r.Resources) > 0 {
				vis = &visibility{patterns: r.Resources}
			}
			return san, vis, "", nil
		}
	}
	return "", nil, deniedNoMatch, status.Errorf(codes.PermissionDenied,
		"xds.authorization.allow did not match the client certificate (%s)", describeSANs(cert))
}

// stillValid checks, at stream open, the certificate the handshake
// verified (cert) and the chain the client presented (leaf first): that
// cert has not expired since, and that verify (if set) still accepts the
// chain. field starts the message.
func stillValid(chain []*x509.Certificate, cert *x509.Certificate, now time.Time, verify func([]*x509.Certificate) error, field string) (reason string, err error) {
	if now.After(cert.NotAfter) {
		return deniedExpired, status.Errorf(codes.PermissionDenied,
			"%s: the client certificate (%s) expired at %s, after its connection's handshake; reconnect with a current one",
			field, describeSANs(cert), cert.NotAfter.UTC().Format(time.RFC3339))
	}
	if verify == nil {
		return "", nil
	}
	if err := verify(chain); err != nil {
		var inv x509.CertificateInvalidError
		if errors.As(err, &inv) && inv.Reason == x509.Expired {
			reason = deniedExpired // an intermediate or the CA
		} else {
			reason = deniedUntrusted
		}
		msg, _ := bound(err.Error(), "", 256)
		return reason, status.Errorf(codes.PermissionDenied,
			"%s: the client certificate (%s) no longer verifies against xds.tls.client_ca_file as it is now: %s",
			field, describeSANs(cert), msg)
	}
	return "", nil
}

// match returns the first SAN of cert the rule matches.
func (r *AuthRule) match(cert *x509.Certificate) (string, bool) {
	if r.SPIFFETrustDomain != "" || r.URI != "" || r.URIPrefix != "" {
		for _, u := range cert.URIs {
			s := u.String()
			if u.Scheme == "spiffe" {
				td, ok := spiffeTrustDomain(u)
				if !ok {
					continue
				}
				if r.SPIFFETrustDomain != "" && td == r.SPIFFETrustDomain {
					return s, true
				}
			}
			if r.URI != "" && s == r.URI {
				return s, true
			}
			if p := r.URIPrefix; p != "" && strings.HasPrefix(s, p) && (len(s) == len(p) || p[len(p)-1] == '/' || s[len(p)] == '/') {
				return s, true
			}
		}
		return "", false
	}
	exact := dnsNorm(r.DNS)
	suffix := strings.TrimPrefix(dnsNorm(r.DNSSuffix), ".")
	for _, d := range cert.DNSNames {
		n := dnsNorm(d)
		if exact != "" && n == exact {
			return d, true
		}
		if suffix != "" && len(n) > len(suffix)+1 && strings.HasSuffix(n, "."+suffix) && n[len(n)-len(suffix)-2] != '.' {
			return d, true
		}
	}
	return "", false
}

func dnsNorm(s string) string { return strings.ToLower(strings.TrimSuffix(s, ".")) }

// spiffeTrustDomain returns the trust domain of a valid SPIFFE ID.
func spiffeTrustDomain(u *url.URL) (string, bool) {
	if u.Scheme != "spiffe" || u.Opaque != "" || u.User != nil || u.RawQuery != "" || u.ForceQuery ||
		u.Fragment != "" || u.RawFragment != "" || u.RawPath != "" || u.Host == "" || u.Port() != "" || strings.Contains(u.Host, ":") {
		return "", false
	}
	for _, c := range u.Host {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_') {
			return "", false
		}
	}
	if len(u.Path) < 2 || u.Path[0] != '/' {
		return "", false
	}
	for _, seg := range strings.Split(u.Path[1:], "/") {
		if seg == "" || seg == "." || seg == ".." {
			return "", false
		}
		for _, c := range seg {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_') {
				return "", false
			}
		}
	}
	return u.Host, true
}

// maxSANText bounds the SANs a denial names (message and log).
const maxSANText = 512

// describeSANs names a certificate's SANs for a denial, bounded.
func describeSANs(cert *x509.Certificate) string {
	var parts []string
	for _, u := range cert.URIs {
		parts = append(parts, "URI:"+u.String())
	}
	for _, d := range cert.DNSNames {
		parts = append(parts, "DNS:"+d)
	}
	if len(parts) == 0 {
		s, _ := bound(cert.Subject.CommonName, "", 128)
		return fmt.Sprintf("no URI or DNS SAN; subject CN %q", s)
	}
	var b strings.Builder
	b.WriteString("SANs ")
	for i, p := range parts {
		p, _ = bound(p, "", 128)
		if b.Len()+len(p) > maxSANText {
			fmt.Fprintf(&b, " and %d more", len(parts)-i)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(p)
	}
	return b.String()
}

// denyLog rate-limits the WARN logged per denial (and per connection
// closed): a logLimiter of denyLogBurst lines per minute, shared by every
// stream, so under a lock.
type denyLog struct {
	mu sync.Mutex
	l  logLimiter
}

const (
	denyLogWindow = time.Minute // logLimiter's window
	denyLogBurst  = 10
)

// allow reports whether to log now, and how many were suppressed since
// the last line logged.
func (d *denyLog) allow(now time.Time) (bool, int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.l.perMinute = denyLogBurst
	return d.l.allow(now)
}

func newDeniedCounter() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "xdsbridge_xds_clients_denied_total",
		Help: "xDS streams refused at open (PermissionDenied) by xds.authorization, or because the client certificate expired or its CA left xds.tls.client_ca_file since the handshake, by reason: no_certificate, unverified, expired, untrusted, no_match.",
	}, []string{"reason"})
}

// open authorizes a new stream (when the server has an Authorization, or
// checks its certificate again with VerifyClient), records it, and tells
// the cache what its client may read, before any of its requests.
func (s *Server) open(ctx context.Context, delta bool, id int64, typeURL string) error {
	var identity string
	var vis *visibility
	var reason string
	var err error
	switch {
	case s.authz != nil:
		identity, vis, reason, err = s.authz.authorize(ctx, time.Now(), s.verifyClient)
	case s.verifyClient != nil:
		reason, err = s.recheck(ctx, time.Now())
	}
	if err != nil {
		s.denied.WithLabelValues(reason).Inc()
		if ok, suppressed := s.denyLog.allow(time.Now()); ok {
			var addr string
			if p, _ := peer.FromContext(ctx); p != nil && p.Addr != nil {
				addr = p.Addr.String()
			}
			s.log.Warn("xDS client refused", "reason", reason, "peer", addr, "mode", modeName(delta),
				"error", status.Convert(err).Message(), "denials_not_logged", suppressed)
		}
		if reason == deniedExpired || reason == deniedUntrusted {
			s.closeConn(ctx, reason)
		}
		return err
	}
	s.opened(ctx, delta, id, typeURL)
	if identity != "" {
		s.mu.Lock()
		if ci := s.clients[streamKey{delta, id}]; ci != nil {
			ci.Identity, _ = bound(identity, "", MaxClientStringBytes)
		}
		s.mu.Unlock()
	}
	if s.authz != nil {
		// Every stream, also one whose client may read everything (vis
		// nil): a stream the cache does not know then gets nothing.
		s.cache.openStream(streamKey{delta, id}, vis)
	}
	return nil
}

// recheck applies stillValid to a stream of a server without an
// Authorization (every client with a verified certificate is allowed): a
// connection whose client certificate verified at its handshake opens no
// stream once it expired or no longer verifies. A connection without a
// verified certificate is not this check's to refuse.
func (s *Server) recheck(ctx context.Context, now time.Time) (reason string, err error) {
	p, _ := peer.FromContext(ctx)
	if p == nil {
		return "", nil
	}
	info, _ := p.AuthInfo.(credentials.TLSInfo)
	if len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return "", nil
	}
	return stillValid(info.State.PeerCertificates, info.State.VerifiedChains[0][0], now, s.verifyClient, "xds.tls")
}
