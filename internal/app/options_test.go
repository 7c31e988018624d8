package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xdsbridge/xdsbridge/bridge"
	"github.com/xdsbridge/xdsbridge/config"
	"github.com/xdsbridge/xdsbridge/translate"
	"github.com/xdsbridge/xdsbridge/xds"
)

const minimalConfig = "sources:\n  - name: static\n    file: {path: services.yaml}\n"

// parseOptions parses a config document and resolves its options as
// check does.
func parseOptions(doc string) (*config.Config, error) {
	c, err := config.Parse([]byte(doc), "", SourceTypeNames())
	if err != nil {
		return nil, err
	}
	if err := ResolveOptions(c); err != nil {
		return nil, err
	}
	return c, nil
}

// TestConfigOptionDefaults: the blocks other packages own get their
// defaults: the merge loop's debounce, translate's limits, the server's
// limits.
func TestConfigOptionDefaults(t *testing.T) {
	c, err := parseOptions(minimalConfig)
	if err != nil {
		t.Fatal(err)
	}
	if c.Debounce.Quiet.D() != bridge.DefaultDebounceQuiet || c.Debounce.Max.D() != bridge.DefaultDebounceMax {
		t.Errorf("debounce defaults: %+v", c.Debounce)
	}
	if translate.Limits(c.Limits) != translate.DefaultLimits() {
		t.Errorf("limits defaults: %+v", c.Limits)
	}
	if got := c.XDS.Limits; got.MaxStreams != xds.DefaultMaxStreams || got.MaxNodeBytes != xds.DefaultMaxNodeBytes {
		t.Errorf("xds.limits: %+v", got)
	}
	// max defaults to no less than an explicit quiet.
	c, err = parseOptions(`{"sources": [{"name": "s", "file": {"path": "x"}}], "debounce": {"quiet": "1s"}}`)
	if err != nil {
		t.Fatal(err)
	}
	if c.Debounce.Quiet.D() != time.Second || c.Debounce.Max.D() != time.Second {
		t.Errorf("debounce %+v", c.Debounce)
	}
}

// TestConfigOptionErrors: a block out of its package's ranges is refused,
// the error naming the field.
func TestConfigOptionErrors(t *testing.T) {
	src := "\nsources: [{name: s, file: {}}]\n"
	const mtls = "xds: {tls: {cert_file: c, key_file: k, client_ca_file: ca}, "
	for _, tc := range []struct {
		name, doc string
		want      []string // substrings of the error
	}{
		{"max shorter than quiet", "debounce: {quiet: 1s, max: 100ms}" + src, []string{"debounce.max", "shorter than debounce.quiet"}},
		{"max shorter than default quiet", "debounce: {max: 10ms}" + src, []string{"debounce.max (10ms)", "debounce.quiet (50ms)"}},
		{"metadata depth over what Envoy unpacks", "limits: {max_metadata_depth: 33}" + src, []string{"limits.max_metadata_depth: 33 is not in 1..32", "Envoy"}},
		{"negative limit", "limits: {max_metadata_depth: -1}" + src, []string{"limits.max_metadata_depth: -1 is not in 1..32"}},
		{"name over what sources accept", "limits: {max_name_bytes: 300}" + src, []string{"limits.max_name_bytes: 300 is not in 1..255"}},
		{"resource over grpc-go's limit", "limits: {max_resource_bytes: 4194304}" + src, []string{"limits.max_resource_bytes: 4194304 is not in 4096..4177920", "grpc-go"}},
		{"resource limit too small", "limits: {max_resource_bytes: 100}" + src, []string{"limits.max_resource_bytes: 100 is not in 4096..4177920"}},
		{"metadata over the resource limit", "limits: {max_resource_bytes: 10000, max_metadata_bytes: 20000}" + src, []string{"limits.max_metadata_bytes: 20000 is not in 1..10000"}},
		{"hostname over the resource limit", "limits: {max_hostname_bytes: 2000000}" + src, []string{"limits.max_hostname_bytes: 2000000 is not in 1..1048576"}},
		{"authorization without rules", mtls + "authorization: {allow: []}}" + src, []string{"xds.authorization.allow: at least one rule"}},
		{"rule with two matchers", mtls + "authorization: {allow: [{dns: a, uri: 'spiffe://td/x'}]}}" + src, []string{"xds.authorization.allow[0].uri, dns: want exactly one of"}},
		{"rule without matcher", mtls + "authorization: {allow: [{resources: [a]}]}}" + src, []string{"xds.authorization.allow[0].matcher: want exactly one of"}},
		{"bad trust domain", mtls + "authorization: {allow: [{dns: a}, {spiffe_trust_domain: 'spiffe://td'}]}}" + src, []string{"xds.authorization.allow[1].spiffe_trust_domain"}},
		{"bad resource pattern", mtls + "authorization: {allow: [{dns: a, resources: ['web-[']}]}}" + src, []string{"xds.authorization.allow[0].resources[0]", "web-["}},
		{"xds limit out of range", "xds: {limits: {max_streams_per_connection: -1}}" + src, []string{"xds.limits.max_streams_per_connection: -1 is not in 1..65536"}},
		{"resumes_decoding out of range", "xds: {limits: {resumes_decoding: -2}}" + src, []string{"xds.limits.resumes_decoding: -2 is not in 1..65536"}},
		{"xds limit too small", "xds: {limits: {max_node_bytes: 10}}" + src, []string{"xds.limits.max_node_bytes: 10 is not in 1024.."}},
		{"xds header limit too small", "xds: {limits: {max_header_bytes: 1000}}" + src, []string{"xds.limits.max_header_bytes: 1000 is not in 4096..1048576"}},
		{"xds total name bytes too small", "xds: {limits: {max_name_bytes_total: 1000}}" + src, []string{"xds.limits.max_name_bytes_total: 1000 is not in 1048576..1099511627776"}},
		{"request rate", "xds: {limits: {requests_per_second: -2}}" + src, []string{"xds.limits.requests_per_second"}},
		{"unanswered responses too few", "xds: {limits: {max_unanswered_responses: 8}}" + src, []string{"xds.limits.max_unanswered_responses: 8 is not in 16..1048576"}},
		{"unanswered responses too many", "xds: {limits: {max_unanswered_responses: 2000000}}" + src, []string{"xds.limits.max_unanswered_responses: 2000000 is not in 16..1048576"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseOptions(tc.doc)
			if err == nil {
				t.Fatalf("%q accepted", tc.doc)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// TestConfigOptionErrorsNameLineAndColumn: an error of a block's range
// names the config file, and the field's line and column in it.
func TestConfigOptionErrorsNameLineAndColumn(t *testing.T) {
	path := filepath.Join(t.TempDir(), "xdsbridge.yaml")
	if err := os.WriteFile(path, []byte(minimalConfig+"limits:\n  max_name_bytes: 300\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(path, SourceTypeNames())
	if err != nil {
		t.Fatal(err)
	}
	err = ResolveOptions(c)
	if want := path + ": line 5, column 3: limits.max_name_bytes: 300 is not in 1..255"; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error %v, want %q", err, want)
	}
}

func TestConfigLimits(t *testing.T) {
	c, err := parseOptions(minimalConfig + "limits: {max_metadata_depth: 32, max_metadata_bytes: 1000, max_hostname_bytes: 63, max_name_bytes: 100, max_resource_bytes: 4177920, max_assignment_endpoints: 500, max_failover_endpoints: 20000}\n")
	if err != nil {
		t.Fatal(err)
	}
	want := translate.Limits{MaxMetadataDepth: 32, MaxMetadataBytes: 1000, MaxHostnameBytes: 63, MaxNameBytes: 100, MaxResourceBytes: 4177920, MaxAssignmentEndpoints: 500, MaxFailoverEndpoints: 20000}
	if translate.Limits(c.Limits) != want {
		t.Errorf("limits %+v, want %+v", c.Limits, want)
	}
	// Absent fields are defaults; the metadata default is no more than a
	// lower resource limit.
	c, err = parseOptions(minimalConfig + "limits: {max_resource_bytes: 8192}\n")
	if err != nil {
		t.Fatal(err)
	}
	want = translate.DefaultLimits()
	want.MaxResourceBytes, want.MaxMetadataBytes = 8192, 8192
	if translate.Limits(c.Limits) != want {
		t.Errorf("limits %+v, want %+v", c.Limits, want)
	}
	if _, err := parseOptions(minimalConfig + "limits: {max_failover_endpoints: -1}\n"); err == nil || !strings.Contains(err.Error(), "limits.max_failover_endpoints: -1 is not in 1..100000000") {
		t.Errorf("max_failover_endpoints -1: %v", err)
	}
}

func TestConfigEgress(t *testing.T) {
	c, err := parseOptions(minimalConfig + "egress: {listener: {port: 10001}, include: {tags: [public]}}\n")
	if err != nil {
		t.Fatal(err)
	}
	e := c.Egress
	if e.RouteConfigName != translate.DefaultEgressName || e.Listener.Name != translate.DefaultEgressName ||
		e.Listener.Address != "127.0.0.1" || e.Listener.Port != 10001 ||
		len(e.DomainSuffixes) != 1 || e.DomainSuffixes[0] != ".service.consul" || e.Include.Tags[0] != "public" {
		t.Errorf("egress %+v, listener %+v", e, e.Listener)
	}
	if o := egressOptions(c.Egress); o.RouteConfigName != e.RouteConfigName || *o.Listener != translate.EgressListener(*e.Listener) || o.Include.Tags[0] != "public" {
		t.Errorf("egress options %+v, listener %+v", o, o.Listener)
	}
	c, err = parseOptions(minimalConfig + "egress: {domain_suffixes: []}\n")
	if err != nil {
		t.Fatal(err)
	}
	if c.Egress.Listener != nil || len(c.Egress.DomainSuffixes) != 0 {
		t.Errorf("egress %+v, want no listener and no suffixes", c.Egress)
	}
	for doc, want := range map[string]string{
		"egress: {listener: {address: 127.0.0.1}}\n":    "egress.listener.port: 0 is not in 1..65535",
		"egress: {domain_suffixes: [service.consul]}\n": "egress.domain_suffixes[0]",
		"egress: {vhds: true, fallback: other}\n":       "egress.fallback: not available with vhds: true",
	} {
		if _, err := parseOptions(minimalConfig + doc); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", doc, err, want)
		}
	}
}

// TestRESTOptions: xds.rest's defaults are the REST handler's
// (xds.RESTOptions.WithDefaults) and eds_config's; each range error names
// the field.
func TestRESTOptions(t *testing.T) {
	c, err := parseOptions("xds:\n  rest: {listen: \"127.0.0.1:18002\", eds_config: {cluster_name: bridge_rest}}\n" + minimalConfig)
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
	o := restOptions(r)
	if o.MaxWait != xds.DefaultRESTMaxWait || o.EDS.ClusterName != "bridge_rest" {
		t.Errorf("options: %+v", o)
	}
	for _, c := range []struct{ yaml, want string }{
		{"xds:\n  rest: {listen: \"127.0.0.1:18002\", max_wait: 2m}\n", "xds.rest.max_wait: 2m is not in 1ms..1m"},
		{"xds:\n  rest: {listen: \"127.0.0.1:18002\", max_body_bytes: 10}\n", "xds.rest.max_body_bytes"},
		{"xds:\n  rest: {listen: \"127.0.0.1:18002\", max_held_polls: -1}\n", "xds.rest.max_held_polls"},
		{"xds:\n  rest: {listen: \"127.0.0.1:18002\", max_wait: 10s, eds_config: {cluster_name: b, request_timeout: 5s}}\n", "xds.rest.eds_config.request_timeout (5s) is not longer than xds.rest.max_wait (10s)"},
	} {
		_, err := parseOptions(c.yaml + minimalConfig)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want an error containing %q", c.yaml, err, c.want)
		}
	}
}

// TestConfigFilesystem: outputs.filesystem gets fileout's defaults, and
// its errors name the field.
func TestConfigFilesystem(t *testing.T) {
	for _, tc := range []struct{ block, want string }{
		{`{format: yaml}`, "outputs.filesystem.dir: missing"},
		{`{dir: out, format: xml}`, `outputs.filesystem.format: "xml" is not one of yaml, json, proto`},
		{`{dir: out, mode: rename}`, `outputs.filesystem.mode: "rename" is not one of path, watched_directory`},
		{`{dir: out, debounce: 2m}`, "outputs.filesystem.debounce: 2m is not in 1ms..1m"},
		{`{dir: out, envoy_dir: rel}`, `outputs.filesystem.envoy_dir: "rel" is not an absolute path`},
		{`{dir: out, intervall: 1s}`, "intervall"},
	} {
		y := "sources: [{name: s, file: {path: s.yaml}}]\noutputs:\n  filesystem: " + tc.block + "\n"
		_, err := parseOptions(y)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v; want one containing %q", tc.block, err, tc.want)
		}
	}
	c, err := parseOptions("sources: [{name: s, file: {path: s.yaml}}]\noutputs: {filesystem: {dir: out}}\n")
	if err != nil {
		t.Fatal(err)
	}
	if f := c.Outputs.Filesystem; f.Format != "yaml" || f.Mode != "path" || f.Debounce.D() != 100*time.Millisecond {
		t.Fatalf("defaults: %+v", f)
	}
}
