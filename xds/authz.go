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
	Allow []AuthRule `json:"allow"`
}

// AuthRule matches a client certificate by one of its subject alternative
// names. Exactly one of the matchers is set.
type AuthRule struct {
	// SPIFFETrustDomain matches any SPIFFE ID (URI SAN
	// spiffe://<trust domain>/<path>) of that trust domain, e.g.
	// "prod.example.org".
	SPIFFETrustDomain string `json:"spiffe_trust_domain,omitempty"`
	// URI matches a URI SAN exactly, e.g.
	// "spiffe://prod.example.org/ns/web/sa/envoy".
	URI string `json:"uri,omitempty"`
	// URIPrefix matches URI SANs that start with it, e.g.
	// "spiffe://prod.example.org/ns/web/".
	URIPrefix string `json:"uri_prefix,omitempty"`
	// DNS matches a DNS SAN exactly (case-insensitive).
	DNS string `json:"dns,omitempty"`
	// DNSSuffix matches DNS SANs that end with it (case-insensitive), e.g.
	// ".edge.example.org".
	DNSSuffix string `json:"dns_suffix,omitempty"`
	// Resources, when set, are what a client matched by this rule may read:
	// resource names (cluster, assignment, listener, route) matching one of
	// these patterns (path.Match syntax: "web-*", "api", "*.prod"). Other
	// names do not exist for it: a wildcard subscription never gets them, a
	// named one is told they do not exist. Empty: every resource.
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
	for i, p := range r.Resources {
		if _, err := path.Match(p, ""); err != nil || p == "" {
			return fmt.Errorf("resources[%d]: %q is not a pattern (path.Match syntax: \"web-*\")", i, p)
		}
	}
	return nil
}
