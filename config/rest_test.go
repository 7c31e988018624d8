package config

import (
	"strings"
	"testing"
	"time"

	"github.com/xdsbridge/xdsbridge/xds"
)

// TestRESTConfig: xds.rest is off unless given; its defaults; each error names
// the field.
func TestRESTConfig(t *testing.T) {
	c, err := Parse([]byte(minimal), "/etc", known)
	if err != nil {
		t.Fatal(err)
	}
	if c.XDS.REST != nil {
		t.Fatalf("xds.rest absent, got %+v", c.XDS.REST)
	}
	c, err = Parse([]byte("xds:\n  rest: {listen: \"127.0.0.1:18002\", eds_config: {cluster_name: bridge_rest}}\n"+minimal), "/etc", known)
	if err != nil {
		t.Fatal(err)
	}
	r := c.XDS.REST
	if r.MaxWait.D() != xds.DefaultRESTMaxWait || r.MaxBodyBytes != xds.DefaultRESTMaxBodyBytes || r.MaxHeldPolls != xds.DefaultRESTMaxHeldPolls {
		t.Errorf("defaults: %+v", r)
	}
	if e := r.EDSConfig; e.RefreshDelay.D() != time.Second || e.RequestTimeout.D() != xds.DefaultRESTMaxWait+5*time.Second {
		t.Errorf("eds_config defaults: %+v", e)
	}
	o := r.Options()
	if o.MaxWait != xds.DefaultRESTMaxWait || o.EDS.ClusterName != "bridge_rest" {
		t.Errorf("options: %+v", o)
	}
	for _, c := range []struct{ yaml, want string }{
		{"xds:\n  rest: {}\n", "xds.rest.listen: missing"},
		{"xds:\n  rest: {listen: nope}\n", `line 2, column 10: xds.rest.listen: expected host:port (e.g. "127.0.0.1:18000", ":18000"), got "nope"`},
		{"xds:\n  listen: 127.0.0.1:9000\n  rest: {listen: \"127.0.0.1:9000\"}\n", "xds.rest.listen: \"127.0.0.1:9000\" is also xds.listen"},
		{"admin: {listen: \"127.0.0.1:9001\"}\nxds:\n  rest: {listen: \"127.0.0.1:9001\"}\n", "is also admin.listen"},
		{"xds:\n  rest: {listen: \"127.0.0.1:18002\", bogus: 1}\n", "bogus"},
		{"xds:\n  rest: {listen: \"127.0.0.1:18002\", max_wait: 2m}\n", "xds.rest.max_wait: 2m is not in 1ms..1m"},
		{"xds:\n  rest: {listen: \"127.0.0.1:18002\", max_body_bytes: 10}\n", "xds.rest.max_body_bytes"},
		{"xds:\n  rest: {listen: \"127.0.0.1:18002\", max_held_polls: -1}\n", "xds.rest.max_held_polls"},
		{"xds:\n  rest: {listen: \"127.0.0.1:18002\", tls: {cert_file: a.pem}}\n", "xds.rest.tls.cert_file"},
		{"xds:\n  rest: {listen: \"127.0.0.1:18002\", eds_config: {refresh_delay: 1s}}\n", "xds.rest.eds_config.cluster_name: missing"},
		{"xds:\n  rest: {listen: \"127.0.0.1:18002\", max_wait: 10s, eds_config: {cluster_name: b, request_timeout: 5s}}\n", "xds.rest.eds_config.request_timeout (5s) is not longer than xds.rest.max_wait (10s)"},
		{"xds:\n  tls: {cert_file: a, key_file: b, client_ca_file: c}\n  authorization: {allow: [{dns: a}]}\n  rest: {listen: \"127.0.0.1:18002\"}\n", "xds.rest: not served with xds.authorization"},
	} {
		_, err := Parse([]byte(c.yaml+minimal), "/etc", known)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want an error containing %q", c.yaml, err, c.want)
		}
	}
}
