package xds

import (
	"errors"
	"fmt"
	"path"
	"strings"
)

// Authorization decides which xDS clients may connect, by the certificate
// they presented and the listener verified (mTLS), and what each may read.
// The JSON names are the config file's (`xds.authorization:` block).
type Authorization struct {
	// Allow: a client is allowed when one rule matches its certificate
	// (the first that matches decides what it may read). A client that
	// matches none, or presents no certificate, is refused with
	// PermissionDenied and counted in xdsbridge_xds_clients_denied_total.
	//
	// The certificate is checked at every stream open, not only at the
	// connection's handshake: once it expired (reason "expired"), or once
	// the client CA pool no longer verifies its chain (Options.VerifyClient,
	// which the app sets from xds.tls.client_ca_file as reloaded: a CA
	// taken out of the file; reason "untrusted"), the connection opens no
	// more streams: the stream is refused, and the connection closed
	// shortly after (conns.go), its other streams with it, so that the
	// client handshakes again with the certificate it holds now. A
	// connection that opens no new stream is not closed.
	Allow []AuthRule `json:"allow"`
}

// AuthRule matches a client certificate by one of its subject alternative
// names. Exactly one of the matchers is set.
type AuthRule struct {
	// SPIFFETrustDomain matches any SPIFFE ID (URI SAN
	// spiffe://<trust domain>/<path>) of that trust domain, e.g.
	// "prod.example.org". A spiffe URI with user info, a port, a query, a
	// fragment, percent-encoding, an upper-case trust domain or an empty,
	// "." or ".." path segment is not a SPIFFE ID and matches no rule.
	SPIFFETrustDomain string `json:"spiffe_trust_domain,omitempty"`
	// URI matches a URI SAN exactly, e.g.
	// "spiffe://prod.example.org/ns/web/sa/envoy".
	URI string `json:"uri,omitempty"`
	// URIPrefix matches URI SANs that start with it on a path boundary:
	// the prefix ends with "/", or the SAN equals it or goes on with "/"
	// ("spiffe://prod.example.org/ns/web" matches .../ns/web/sa/envoy,
	// not .../ns/webhook), e.g. "spiffe://prod.example.org/ns/web/".
	URIPrefix string `json:"uri_prefix,omitempty"`
	// DNS matches a DNS SAN exactly (case-insensitive).
	DNS string `json:"dns,omitempty"`
	// DNSSuffix matches DNS SANs that end with it on a label boundary,
	// with at least one label in front (case-insensitive; a leading dot
	// is optional): ".edge.example.org" and "edge.example.org" both match
	// a.edge.example.org, neither matches edge.example.org or
	// badedge.example.org.
	DNSSuffix string `json:"dns_suffix,omitempty"`
	// Resources, when set, are what a client matched by this rule may read:
	// resource names (cluster, assignment, listener, route) matching one of
	// these patterns (path.Match syntax: "web-*", "api", "*.prod"). Other
	// names do not exist for it, exactly as names that exist for no one: a
	// wildcard subscription never gets them, a delta subscription naming
	// one is told in removed_resources, a sotw one never gets it (the
	// client's does-not-exist timer tells). Empty: every resource.
	Resources []string `json:"resources,omitempty"`
}

// Check reports the first invalid rule; the error starts with the rule's
// path under the block ("allow[2].uri_prefix: ...").
func (a Authorization) Check() error {
	if len(a.Allow) == 0 {
		return errors.New("allow: at least one rule is needed (without an authorization block, every client with a verified certificate is allowed)")
	}
	for i, r := range a.Allow {
		if err := r.check(); err != nil {
			return fmt.Errorf("allow[%d].%w", i, err)
		}
	}
	return nil
}

func (r AuthRule) check() error {
	var set []string
	for _, m := range []struct{ name, v string }{
		{"spiffe_trust_domain", r.SPIFFETrustDomain}, {"uri", r.URI}, {"uri_prefix", r.URIPrefix},
		{"dns", r.DNS}, {"dns_suffix", r.DNSSuffix},
	} {
		if m.v != "" {
			set = append(set, m.name)
		}
	}
	if len(set) != 1 {
		field := "matcher"
		if len(set) > 0 {
			field = strings.Join(set, ", ")
		}
		return fmt.Errorf("%s: want exactly one of spiffe_trust_domain, uri, uri_prefix, dns, dns_suffix", field)
	}
	if td := r.SPIFFETrustDomain; td != "" {
		if strings.ContainsAny(td, "/:@ ") || strings.ToLower(td) != td {
			return fmt.Errorf("spiffe_trust_domain: %q is not a trust domain name (lower case, no scheme or path: \"prod.example.org\")", td)
		}
	}
	if r.DNSSuffix != "" && strings.Trim(r.DNSSuffix, ".") == "" {
		return fmt.Errorf("dns_suffix: %q names no domain (e.g. \".edge.example.org\")", r.DNSSuffix)
	}
	for i, p := range r.Resources {
		if _, err := path.Match(p, ""); err != nil || p == "" {
			return fmt.Errorf("resources[%d]: %q is not a pattern (path.Match syntax: \"web-*\")", i, p)
		}
	}
	return nil
}
