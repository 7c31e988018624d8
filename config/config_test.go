package config

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xdsbridge/xdsbridge/config/decode"
)

var known = []string{"dns", "file"}

const minimal = "sources:\n  - name: static\n    file: {path: services.yaml}\n"

func TestDefaults(t *testing.T) {
	c, err := Parse([]byte(minimal), "/etc/xdsbridge", known)
	if err != nil {
		t.Fatal(err)
	}
	if c.XDS.Listen != DefaultXDSListen || c.Admin.Listen != DefaultAdminListen {
		t.Errorf("listen defaults: %+v %+v", c.XDS, c.Admin)
	}
	if c.Logging.Format != "text" || c.Logging.Level != "info" {
		t.Errorf("logging defaults: %+v", c.Logging)
	}
	if c.BaseDir != "/etc/xdsbridge" {
		t.Errorf("BaseDir %q", c.BaseDir)
	}
	if len(c.Sources) != 1 || c.Sources[0].Name != "static" || c.Sources[0].Type != "file" {
		t.Fatalf("sources: %+v", c.Sources)
	}
	var fc struct {
		Path string `json:"path"`
	}
	if err := decode.JSONStrict(c.Sources[0].Raw, &fc); err != nil || fc.Path != "services.yaml" {
		t.Errorf("raw block %s: %v %+v", c.Sources[0].Raw, err, fc)
	}
}

func TestFullConfig(t *testing.T) {
	doc := `
xds: {listen: "0.0.0.0:18000"}
admin: {listen: ":9901"}
debounce: {quiet: 10ms, max: 2}
logging: {format: json, level: DEBUG}
sources:
  - name: a
    file: {path: a.yaml}
  - dns: {services: []}
    name: b
`
	c, err := Parse([]byte(doc), "", known)
	if err != nil {
		t.Fatal(err)
	}
	if c.XDS.Listen != "0.0.0.0:18000" || c.Admin.Listen != ":9901" {
		t.Errorf("listeners %+v %+v", c.XDS, c.Admin)
	}
	if c.Debounce.Quiet.D() != 10*time.Millisecond || c.Debounce.Max.D() != 2*time.Second {
		t.Errorf("debounce %+v", c.Debounce)
	}
	if c.Logging.Format != "json" || c.Logging.Level != "DEBUG" {
		t.Errorf("logging %+v", c.Logging)
	}
	if c.Sources[1].Name != "b" || c.Sources[1].Type != "dns" || string(c.Sources[1].Raw) != `{"services":[]}` {
		t.Errorf("source b: %+v %s", c.Sources[1], c.Sources[1].Raw)
	}
	// Sources marshal back to the file's form and decode the same.
	b, err := json.Marshal(c.Sources)
	if err != nil {
		t.Fatal(err)
	}
	var again []Source
	if err := decode.JSONStrict(b, &again); err != nil || again[1].Type != "dns" || again[0].Name != "a" {
		t.Errorf("round trip %s: %v %+v", b, err, again)
	}
}

func TestJSONConfig(t *testing.T) {
	c, err := Parse([]byte(`{"sources": [{"name": "s", "file": {"path": "x"}}], "debounce": {"quiet": "1s"}}`), "", known)
	if err != nil {
		t.Fatal(err)
	}
	if c.Debounce.Quiet.D() != time.Second || c.Debounce.Max != 0 {
		t.Errorf("debounce %+v", c.Debounce)
	}
}

func TestErrors(t *testing.T) {
	src := "\nsources: [{name: s, file: {}}]\n"
	const mtls = "xds: {tls: {cert_file: c, key_file: k, client_ca_file: ca}, "
	for _, tc := range []struct {
		name, doc string
		want      []string // substrings of the error
	}{
		{"unknown top-level field", "xdss: {}" + src, []string{`unknown field "xdss"`}},
		{"unknown nested field", "xds: {lisen: ':1'}" + src, []string{`unknown field "lisen"`, "xds"}},
		{"unknown debounce field", "debounce: {quite: 1s}" + src, []string{`unknown field "quite" in debounce`}},
		{"unknown logging field", "logging: {formt: json}" + src, []string{`unknown field "formt" in logging`}},
		{"wrong type of scalar", "xds: {listen: 18000}" + src, []string{"line 1, column 7: xds.listen: expected host:port, got 18000"}},
		{"wrong type of block", "admin: [1]" + src, []string{"line 1, column 1: admin: expected a mapping, got a list"}},
		{"wrong type of sources", "sources: {a: 1}", []string{"line 1, column 1: sources: expected a list, got a mapping"}},
		{"source name not a string", "sources: [{name: [1], file: {}}]", []string{"sources[0]", "name"}},
		{"source entry not a mapping", "sources: [file]", []string{"line 1, column 11: sources[0]: expected a mapping with a name and one source type"}},
		{"bogus duration", "debounce: {quiet: bogus}" + src, []string{"debounce.quiet", `invalid duration "bogus"`}},
		{"negative duration", "debounce: {quiet: -5ms}" + src, []string{"debounce.quiet", "negative duration"}},
		{"negative seconds", "debounce: {max: -1}" + src, []string{"debounce.max", "negative duration"}},
		{"duration of wrong type", "debounce: {max: [1]}" + src, []string{"debounce.max", "invalid duration"}},
		{"logging format", "logging: {format: xml}" + src, []string{"logging.format", `"xml"`}},
		{"logging level", "logging: {level: verbose}" + src, []string{"logging.level", `"verbose"`}},
		{"no sources", "xds: {listen: ':1'}", []string{"sources: at least one source"}},
		{"empty sources", "sources: []", []string{"sources: at least one source"}},
		{"empty document", "", []string{"sources: at least one source"}},
		{"source without type", "sources: [{name: s}]", []string{"sources[0]", "no source type given"}},
		{"source with two types", "sources: [{name: s, file: {}, dns: {}}]", []string{"sources[0]", "more than one source type given (dns, file)"}},
		{"source without name", "sources: [{file: {}}]", []string{"sources[0].name: missing"}},
		{"duplicate source names", "sources: [{name: s, file: {}}, {name: s, dns: {}}]", []string{"sources[1].name", `"s" used twice`}},
		{"unknown source type", "sources: [{name: s, consul: {}}]", []string{"sources[0] (s)", `unknown source type "consul"`, "known: dns, file"}},
		{"yaml syntax error", "xds:\n  listen: [\n", []string{"line"}},
		{"unknown limits field", "limits: {max_depth: 3}" + src, []string{`unknown field "max_depth" in limits`}},
		{"limit of wrong type", "limits: {max_metadata_depth: deep}" + src, []string{`line 1, column 10: limits.max_metadata_depth: expected a whole number, got a string`}},
		{"fractional limit", "limits: {max_hostname_bytes: 2.5}" + src, []string{"line 1, column 10: limits.max_hostname_bytes: expected a whole number, got 2.5"}},
		{"unknown default_locality field", "default_locality: {regoin: r}" + src, []string{`unknown field "regoin" in default_locality`}},
		{"default_locality of wrong type", "default_locality: {zone: 1}" + src, []string{"line 1, column 20: default_locality.zone: expected a string, got 1"}},
		{"unknown source default_locality field", "sources: [{name: s, file: {}, default_locality: {subzone: a}}]", []string{"sources[0]", "default_locality", `unknown field "subzone"`}},
		{"source default_locality not a mapping", "sources: [{name: s, file: {}, default_locality: r1}]", []string{"sources[0]", "default_locality"}},
		// Security (#12).
		{"tls without key", "xds: {tls: {cert_file: c.pem}}" + src, []string{"xds.tls.cert_file, xds.tls.key_file: both are needed"}},
		{"admin tls without cert", "admin: {tls: {key_file: k.pem}}" + src, []string{"admin.tls.cert_file, admin.tls.key_file"}},
		{"unknown tls field", "xds: {tls: {cert: c.pem}}" + src, []string{`unknown field "cert" in xds.tls`}},
		{"tls min_version", "xds: {tls: {cert_file: c, key_file: k, min_version: '1.1'}}" + src, []string{"xds.tls.min_version", `"1.1"`}},
		{"tls reload_interval", "xds: {tls: {cert_file: c, key_file: k, reload_interval: 1ms}}" + src, []string{"xds.tls.reload_interval: 1ms is not in 100ms..1h"}},
		{"authorization without mTLS", "xds: {tls: {cert_file: c, key_file: k}, authorization: {allow: [{dns: a}]}}" + src, []string{"xds.authorization: needs xds.tls.client_ca_file"}},
		{"authorization without tls", "xds: {authorization: {allow: [{dns: a}]}}" + src, []string{"xds.authorization: needs xds.tls.client_ca_file"}},
		{"unknown rule field", mtls + "authorization: {allow: [{dns_prefix: a}]}}" + src, []string{`unknown field "dns_prefix"`}},
		{"unknown xds limit", "xds: {limits: {max_conns: 3}}" + src, []string{`unknown field "max_conns" in xds.limits`}},
		{"keepalive range", "xds: {keepalive: {time: 48h}}" + src, []string{"xds.keepalive.time: 48h is not in 0s..24h"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc), "", known)
			if err == nil {
				t.Fatalf("Parse(%q) succeeded", tc.doc)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "conf", "xdsbridge.yaml")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(minimal), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path, known)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "conf"); c.BaseDir != want {
		t.Errorf("BaseDir %q, want %q", c.BaseDir, want)
	}

	// A relative path gives an absolute BaseDir.
	t.Chdir(dir)
	c, err = Load(filepath.Join("conf", "xdsbridge.yaml"), known)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "conf"); c.BaseDir != want {
		t.Errorf("BaseDir %q, want %q", c.BaseDir, want)
	}

	// Errors name the file.
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("xds: {lisen: x}\n"+minimal), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(bad, known); err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), `unknown field "lisen"`) {
		t.Errorf("error %v", err)
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml"), known); !os.IsNotExist(err) {
		t.Errorf("missing file: %v", err)
	}
}

func TestDefaultLocality(t *testing.T) {
	c, err := Parse([]byte(minimal), "", known)
	if err != nil {
		t.Fatal(err)
	}
	if l := c.Locality(c.Sources[0]); l != (Locality{}) {
		t.Errorf("default locality %+v, want the empty one", l)
	}

	doc := `
default_locality: {region: r1, zone: z1, sub_zone: s1}
sources:
  - name: inherits
    file: {path: a.yaml}
  - name: own
    default_locality: {zone: z2}
    dns: {services: []}
  - name: none
    default_locality: {}
    file: {path: b.yaml}
`
	if c, err = Parse([]byte(doc), "", known); err != nil {
		t.Fatal(err)
	}
	want := []Locality{{Region: "r1", Zone: "z1", SubZone: "s1"}, {Zone: "z2"}, {}}
	for i, w := range want {
		if l := c.Locality(c.Sources[i]); l != w {
			t.Errorf("%s: locality %+v, want %+v", c.Sources[i].Name, l, w)
		}
	}
	if c.Sources[1].Type != "dns" || string(c.Sources[1].Raw) != `{"services":[]}` {
		t.Errorf("source own: %+v %s", c.Sources[1], c.Sources[1].Raw)
	}
	// Sources marshal back to the file's form and decode the same.
	b, err := json.Marshal(c.Sources)
	if err != nil {
		t.Fatal(err)
	}
	var again []Source
	if err := decode.JSONStrict(b, &again); err != nil {
		t.Fatalf("round trip %s: %v", b, err)
	}
	for i, w := range want[1:] {
		if l := c.Locality(again[i+1]); l != w {
			t.Errorf("round trip %s: locality %+v, want %+v", b, l, w)
		}
	}
}

func TestDuplicateKeys(t *testing.T) {
	for _, tc := range []struct{ name, doc, want string }{
		{"yaml top level", "sources:\n  - name: a\n    file: {path: a.yaml}\nsources:\n  - name: b\n    file: {path: b.yaml}\n", `duplicate key "sources": lines 1 and 4`},
		{"yaml nested", minimal + "debounce:\n  quiet: 1s\n  quiet: 2s\n", `duplicate key in debounce "quiet": lines 5 and 6`},
		{"yaml flow", minimal + "xds: {listen: \"127.0.0.1:1\", listen: \"127.0.0.1:2\"}\n", `duplicate key in xds "listen": lines 4 and 4`},
		{"yaml in source block", "sources:\n  - name: a\n    file:\n      path: a.yaml\n      path: b.yaml\n", `duplicate key in sources[0].file "path": lines 4 and 5`},
		{"json", "{\"sources\": [{\"name\": \"a\", \"file\": {\"path\": \"a\"}}],\n \"logging\": {\"level\": \"info\"},\n \"logging\": {\"level\": \"debug\"}}", `duplicate key "logging": lines 2 and 3`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc), "/", known)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

func TestRanges(t *testing.T) {
	src := "\nsources: [{name: s, file: {path: s.yaml}}]\n"
	for _, tc := range []struct{ doc, want string }{
		{"debounce: {quiet: 1e10}", "out of range"},
		{"debounce: {quiet: 9223372036.854775807}", "out of range"},
		{"debounce: {quiet: 1h}", "debounce.quiet: 1h is not in 1ms..5s"},
		{"debounce: {quiet: 1us}", "debounce.quiet: 1µs is not in 1ms..5s"},
		{"debounce: {max: 1h}", "debounce.max: 1h is not in 1ms..30s"},
		{"debounce: {quiet: \"3000000h\"}", "debounce.quiet"},
		{"health_checks: {max_retention: 1000h}", "health_checks.max_retention: 1000h is not in 0s..168h"},
		{"health_checks: {workers: -1}", "health_checks.workers: -1 is not in 0..4096"},
		{"health_checks: {workers: 100000}", "health_checks.workers: 100000 is not in 0..4096"},
	} {
		_, err := Parse([]byte(tc.doc+src), "/", known)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.doc, err, tc.want)
		}
	}
	for _, ok := range []string{"debounce: {quiet: 5s, max: 30s}", "debounce: {quiet: 1ms, max: 1ms}", "health_checks: {max_retention: 168h, workers: 4096}"} {
		if _, err := Parse([]byte(ok+src), "/", known); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
}

// The security blocks (#12): defaults applied, a full block accepted,
// relative paths resolved against the config's directory.
func TestSecurityConfig(t *testing.T) {
	c, err := Parse([]byte(`
xds:
  tls: {cert_file: certs/s.pem, key_file: /abs/s.key, client_ca_file: certs/ca.pem}
  authorization:
    allow:
      - spiffe_trust_domain: prod.example.org
      - uri_prefix: spiffe://partner.example.org/ns/pay/
        resources: ["pay-*", ledger]
  limits: {max_streams_per_connection: 4, resumes_decoding: 3}
  keepalive: {min_time: 20s}
admin:
  tls: {cert_file: a.pem, key_file: a.key}
  token_file: tok
sources: [{name: s, file: {path: s.yaml}}]
`), "/etc/xdsbridge", known)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.XDS.TLS; got.ReloadInterval.D() != DefaultTLSReloadInterval || got.MinVersion != "1.2" {
		t.Errorf("xds.tls defaults: %+v", got)
	}
	if got := c.XDS.Limits; got.MaxStreamsPerConnection != 4 || got.ResumesDecoding != 3 {
		t.Errorf("xds.limits: %+v", got)
	}
	if c.XDS.Keepalive.MinTime.D() != 20*time.Second || len(c.XDS.Authorization.Allow) != 2 || c.XDS.Authorization.Allow[1].Resources[1] != "ledger" {
		t.Errorf("keepalive %+v, authorization %+v", c.XDS.Keepalive, c.XDS.Authorization)
	}
	for in, want := range map[string]string{c.XDS.TLS.CertFile: "/etc/xdsbridge/certs/s.pem", c.XDS.TLS.KeyFile: "/abs/s.key", c.Admin.TokenFile: "/etc/xdsbridge/tok", "": ""} {
		if got := c.Path(in); got != want {
			t.Errorf("Path(%q) = %q, want %q", in, got, want)
		}
	}
	if c.Admin.TLS.ReloadInterval.D() != DefaultTLSReloadInterval || c.Admin.TLS.ClientCAFile != "" {
		t.Errorf("admin.tls: %+v", c.Admin.TLS)
	}
}

func TestGRPCCertificateProvider(t *testing.T) {
	for doc, want := range map[string]string{
		minimal: "",
		"xds: {grpc_certificate_provider: upstream-ca}\n" + minimal:                            "upstream-ca",
		"xds: {grpc_certificate_provider: 'spiffe://td/ca#1'}\n" + minimal:                     "spiffe://td/ca#1",
		`{"xds": {"grpc_certificate_provider": "ca"}, "sources": [{"name": "s", "file": {}}]}`: "ca",
		"xds:\n  grpc_certificate_provider:\n" + minimal:                                       "", // null: absent
	} {
		c, err := Parse([]byte(doc), "", known)
		if err != nil {
			t.Errorf("Parse(%q): %v", doc, err)
			continue
		}
		if got := c.XDS.CertificateProvider(); got != want {
			t.Errorf("Parse(%q): grpc_certificate_provider %q, want %q", doc, got, want)
		}
	}
	for doc, want := range map[string][]string{
		"xds: {grpc_certificate_provider: ''}":            {"xds.grpc_certificate_provider: empty"},
		"xds: {grpc_certificate_provider: 'upstream ca'}": {"xds.grpc_certificate_provider", `"upstream ca"`, "whitespace"},
		"xds: {grpc_certificate_provider: ' ca'}":         {"xds.grpc_certificate_provider", "whitespace"},
		"xds: {grpc_certificate_provider: \"ca\\t\"}":     {"xds.grpc_certificate_provider", "whitespace"},
		"xds: {grpc_certificate_provider: \"c\\x01a\"}":   {"xds.grpc_certificate_provider", "control characters"},
		"xds: {grpc_certificate_provider: 7}":             {"line 1, column 7: xds.grpc_certificate_provider: expected a string, got 7"},
		"xds: {grpc_certificate_provider: [ca]}":          {"line 1, column 7: xds.grpc_certificate_provider: expected a string, got a list"},
		"xds: {grpc_certificate_providers: ca}":           {`unknown field "grpc_certificate_providers" in xds`},
	} {
		_, err := Parse([]byte(doc+"\nsources: [{name: s, file: {}}]\n"), "", known)
		if err == nil {
			t.Errorf("Parse(%q) succeeded", doc)
			continue
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("Parse(%q): error %q does not contain %q", doc, err, w)
			}
		}
	}
}

// Keys are case-sensitive in the config, a source's block and a health
// check, each naming the key and its spelling.
func TestParseKeysCaseSensitive(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"Sources:\n  - name: static\n    file: {path: services.yaml}\n", `unknown field "Sources" (keys are case-sensitive: did you mean "sources"?)`},
		{minimal + "debounce: {Quiet: 1s}\n", `unknown field "Quiet" in debounce (keys are case-sensitive: did you mean "quiet"?)`},
		{minimal + "xds: {tls: {Cert_File: a}}\n", `unknown field "Cert_File" in xds.tls (keys are case-sensitive: did you mean "cert_file"?)`},
		{"sources:\n  - name: static\n    file: {path: s.yaml}\n    default_locality: {Zone: a}\n", `line 4, column 24: unknown field "Zone" in sources[0].default_locality (keys are case-sensitive: did you mean "zone"?)`},
	} {
		_, err := Parse([]byte(tc.in), "/etc", known)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.in, err, tc.want)
		}
	}
}

// Errors of the config file, from decoding or from its checks, name the
// line and column of the field and say what was expected in YAML terms.
func TestConfigErrorsNameLineAndColumn(t *testing.T) {
	const src = "sources:\n  - name: s\n    file: {}\n"
	for _, tc := range []struct{ in, want string }{
		{"xds:\n  listen: 18000\n" + src, "line 2, column 3: xds.listen: expected host:port, got 18000"},
		{"xds:\n  listen: localhost\n" + src, `line 2, column 3: xds.listen: expected host:port (e.g. "127.0.0.1:18000", ":18000"), got "localhost"`},
		{"- xds: {}\n", "line 1, column 1: expected a mapping, got a list"},
		{src + "logging:\n  format: xml\n", `line 5, column 3: logging.format: "xml" is not one of text, json`},
		{src + "debounce: {quiet: 1h}\n", "line 4, column 12: debounce.quiet: 1h is not in 1ms..5s"},
		{"sources:\n  - name: s\n    fiel: {}\n", `line 2, column 5: sources[0] (s): unknown source type "fiel" (did you mean "file"? known: dns, file)`},
		{"sources:\n  - name: [s]\n    file: {}\n", "line 2, column 5: sources[0].name: expected a string, got a list"},
		{"xds:\n  lisen: ':1'\n" + src, `line 2, column 3: unknown field "lisen" in xds (did you mean "listen"?)`},
		{src + "health_checks: {workers: 1e99}\n", "line 4, column 17: health_checks.workers: expected a whole number, got 1e+99"},
		{"sources:\n  - name: \"a\\x1b[31mX\"\n    file: {}\n", `line 2, column 5: sources[0].name: "a\x1b[31mX": expected a name without control characters`},
		{src + "health_checks: {workers: .nan}\n", "line 4, column 17: health_checks.workers: expected a finite number, got .nan"},
	} {
		_, err := Parse([]byte(tc.in), "/etc", known)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%q:\n got %v\nwant %s", tc.in, err, tc.want)
		}
	}
}

func TestEgressConfig(t *testing.T) {
	c, err := Parse([]byte(minimal), "", known)
	if err != nil {
		t.Fatal(err)
	}
	if c.Egress != nil {
		t.Fatalf("egress %+v without a block, want off", c.Egress)
	}
	if _, err := Parse([]byte(minimal+"egress: {include: {name: [a]}}\n"), "", known); err == nil || !strings.Contains(err.Error(), `unknown field "name"`) {
		t.Errorf("error %v, want an unknown field", err)
	}
}

// health_checks.hds: defaults, a full block, and each error naming the
// field, its line and what was expected.
func TestHealthChecksHDSConfig(t *testing.T) {
	const src = "sources:\n  - name: s\n    file: {}\n"
	c, err := Parse([]byte(src), "/etc", known)
	if err != nil {
		t.Fatal(err)
	}
	want := HDS{K: 2, Rule: "majority", ReportInterval: decode.Duration(5 * time.Second), Silence: decode.Duration(15 * time.Second), Fallback: "local"}
	if c.HealthChecks.HDS != want {
		t.Errorf("defaults: %+v, want %+v", c.HealthChecks.HDS, want)
	}
	c, err = Parse([]byte(src+"health_checks:\n  hds: {enabled: true, k: 3, rule: any, report_interval: 1s, fallback: source}\n"), "/etc", known)
	if err != nil {
		t.Fatal(err)
	}
	want = HDS{Enabled: true, K: 3, Rule: "any", ReportInterval: decode.Duration(time.Second), Silence: decode.Duration(3 * time.Second), Fallback: "source"}
	if c.HealthChecks.HDS != want {
		t.Errorf("full block: %+v, want %+v", c.HealthChecks.HDS, want)
	}
	for _, tc := range []struct{ in, want string }{
		{"health_checks:\n  hds:\n    k: 17\n", "line 6, column 5: health_checks.hds.k: 17 is not in 1..16"},
		{"health_checks:\n  hds:\n    rule: most\n", `line 6, column 5: health_checks.hds.rule: "most" is not one of majority, any, all`},
		{"health_checks:\n  hds:\n    fallback: discovery\n", `line 6, column 5: health_checks.hds.fallback: "discovery" is not one of local, source`},
		{"health_checks:\n  hds:\n    report_interval: 1ms\n", "line 6, column 5: health_checks.hds.report_interval: 1ms is not in 50ms..10m"},
		{"health_checks:\n  hds:\n    report_interval: 2s\n    silence: 2s\n", "line 7, column 5: health_checks.hds.silence: 2s is not longer than health_checks.hds.report_interval (2s): every checker would go silent between its reports"},
		{"health_checks:\n  hds:\n    enabeld: true\n", `line 6, column 5: unknown field "enabeld" in health_checks.hds (did you mean "enabled"?)`},
	} {
		_, err := Parse([]byte(src+tc.in), "/etc", known)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%q:\n got %v\nwant %s", tc.in, err, tc.want)
		}
	}
}
