package config

import (
	"strings"
	"testing"
)

// TestRESTConfig: xds.rest is off unless given; each error of the block's
// own rules names the field (its defaults and ranges are the app's:
// internal/app TestRESTOptions).
func TestRESTConfig(t *testing.T) {
	c, err := Parse([]byte(minimal), "/etc", known)
	if err != nil {
		t.Fatal(err)
	}
	if c.XDS.REST != nil {
		t.Fatalf("xds.rest absent, got %+v", c.XDS.REST)
	}
	for _, c := range []struct{ yaml, want string }{
		{"xds:\n  rest: {}\n", "xds.rest.listen: missing"},
		{"xds:\n  rest: {listen: nope}\n", `line 2, column 10: xds.rest.listen: expected host:port (e.g. "127.0.0.1:18000", ":18000"), got "nope"`},
		{"xds:\n  listen: 127.0.0.1:9000\n  rest: {listen: \"127.0.0.1:9000\"}\n", "xds.rest.listen: \"127.0.0.1:9000\" is also xds.listen"},
		{"admin: {listen: \"127.0.0.1:9001\"}\nxds:\n  rest: {listen: \"127.0.0.1:9001\"}\n", "is also admin.listen"},
		{"xds:\n  rest: {listen: \"127.0.0.1:18002\", bogus: 1}\n", "bogus"},
		{"xds:\n  rest: {listen: \"127.0.0.1:18002\", tls: {cert_file: a.pem}}\n", "xds.rest.tls.cert_file"},
		{"xds:\n  rest: {listen: \"127.0.0.1:18002\", eds_config: {refresh_delay: 1s}}\n", "xds.rest.eds_config.cluster_name: missing"},
		{"xds:\n  tls: {cert_file: a, key_file: b, client_ca_file: c}\n  authorization: {allow: [{dns: a}]}\n  rest: {listen: \"127.0.0.1:18002\"}\n", "xds.rest: not served with xds.authorization"},
	} {
		_, err := Parse([]byte(c.yaml+minimal), "/etc", known)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want an error containing %q", c.yaml, err, c.want)
		}
	}
}
