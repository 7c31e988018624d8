package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/xdsbridge/xdsbridge/internal/testcerts"
)

func TestValidateExampleConfigs(t *testing.T) {
	for _, cfg := range []string{"../../examples/xdsbridge.yaml", "../../examples/consul.yaml", "../../examples/consul-egress.yaml", "../../examples/xdsbridge-policy.yaml"} {
		var out, errOut bytes.Buffer
		if err := run([]string{"validate", "-config", cfg}, &out, &errOut); err != nil {
			t.Fatalf("%s: %v", cfg, err)
		}
		// No warning either: the example policy is for services the
		// example sources publish.
		if out.String() != "config ok\n" || errOut.String() != "" {
			t.Errorf("%s: stdout %q, stderr %q", cfg, out.String(), errOut.String())
		}
	}
}

// TestValidateMTLSExample: examples/xdsbridge-mtls.yaml, with the
// certificates examples/certs/README.md makes (here from testcerts) beside
// it, is a valid config.
func TestValidateMTLSExample(t *testing.T) {
	dir := mtlsExampleDir(t)
	for _, uncomment := range []bool{false, true} {
		p := filepath.Join(dir, "xdsbridge-mtls.yaml")
		if uncomment {
			// The commented-out options (xds.limits, admin.token_file,
			// admin.tls) are valid too.
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			b = regexp.MustCompile(`(?m)^  # (limits|token_file|tls):|^  #   (cert_file|key_file):`).ReplaceAllFunc(b, func(m []byte) []byte {
				return bytes.Replace(m, []byte("# "), nil, 1)
			})
			for _, want := range []string{"\n  limits:", "\n  token_file:", "\n  tls:\n    cert_file:"} {
				if !bytes.Contains(b, []byte(want)) {
					t.Fatalf("uncommented example has no %q:\n%s", want, b)
				}
			}
			p = filepath.Join(dir, "uncommented.yaml")
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		var out bytes.Buffer
		if err := run([]string{"validate", "-config", p}, &out, &out); err != nil {
			t.Fatalf("examples/xdsbridge-mtls.yaml (uncommented %v): %v\n%s", uncomment, err, out.String())
		}
		if strings.TrimSpace(out.String()) != "config ok" {
			t.Fatalf("output %q", out.String())
		}
	}
}

func TestValidateNamesTheField(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ config, want string }{
		{"xds: {lisen: x}\nsources: [{name: s, file: {path: s.yaml}}]\n", `unknown field "lisen"`},
		{"sources: [{name: s, file: {path: bad.yaml}}]\n", "bad.yaml"}, // the services file is invalid
		{"xds: {listen: not-an-addr}\nsources: [{name: s, file: {path: ok.yaml}}]\n", `line 1, column 7: xds.listen: expected host:port (e.g. "127.0.0.1:18000", ":18000"), got "not-an-addr"`},
		{"admin: {listen: \"127.0.0.1:99999\"}\nsources: [{name: s, file: {path: ok.yaml}}]\n", `admin.listen: "127.0.0.1:99999": port "99999" is not a number in 0..65535`},
		{"xds: {listen: \"127.0.0.1:http\"}\nsources: [{name: s, file: {path: ok.yaml}}]\n", `xds.listen: "127.0.0.1:http": port "http"`},
		{"xds: {listen: \"127.0.0.1:7000\"}\nadmin: {listen: \"127.0.0.1:7000\"}\nsources: [{name: s, file: {path: ok.yaml}}]\n", `admin.listen: "127.0.0.1:7000" is also xds.listen`},
		{"sources: [{name: s, fil: {path: s.yaml}}]\n", `unknown source type "fil"`},
		{"sources: [{name: s, dns: {services: [{name: a, hosts: [{name: '', port: 80}]}]}}]\n", "hosts[0].name"},
		{"sources: [{name: s, file: {path: ok.yaml}, health_check: {type: htp}}]\n", "sources[0].health_check"},
		{"default_locality: {zon: a}\nsources: [{name: s, file: {path: ok.yaml}}]\n", `unknown field "zon" in default_locality`},
		{"sources: [{name: s, file: {path: ok.yaml}, default_locality: {zon: a}}]\n", `line 1, column 63: unknown field "zon" in sources[0].default_locality (did you mean "zone"?)`},
		{"sources: [{name: c, consul: {tls: {ca_file: ok.yaml}}}]\n", "sources[0] (c).consul: tls.ca_file: " + filepath.Join(dir, "ok.yaml") + ": not PEM"},
	} {
		os.WriteFile(filepath.Join(dir, "ok.yaml"), []byte("services: {}\n"), 0o644)
		os.WriteFile(filepath.Join(dir, "bad.yaml"), []byte("services: {web: {endpoints: [{address: x, port: 80}]}}\n"), 0o644)
		p := filepath.Join(dir, "c.yaml")
		os.WriteFile(p, []byte(tc.config), 0o644)
		var out bytes.Buffer
		err := run([]string{"validate", "-config", p}, &out, &out)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("config %q: error %v, want it to mention %q", tc.config, err, tc.want)
		}
	}
}

// A services file that does not exist yet is allowed at start (the source
// waits for it, not yet synced), in validate as in run, with a warning
// naming its absolute path; dump says so at once instead of waiting for
// its timeout.
func TestValidateMissingServicesFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "c.yaml")
	os.WriteFile(p, []byte("sources: [{name: s, file: {path: later.yaml}}]\n"), 0o644)
	var out, errOut bytes.Buffer
	if err := run([]string{"validate", "-config", p}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	want := "warning: sources[0] (s): services file " + filepath.Join(dir, "later.yaml") + " does not exist (yet): it may appear later; until it does, this source serves nothing and the bridge is not ready\n"
	if out.String() != "config ok\n" || errOut.String() != want {
		t.Errorf("validate: stdout %q, stderr %q; want stderr %q", out.String(), errOut.String(), want)
	}
	out.Reset()
	errOut.Reset()
	err := run([]string{"dump", "-config", p, "-timeout", "1m"}, &out, &errOut)
	wantErr := "source s has not synced: stat " + filepath.Join(dir, "later.yaml") + ": no such file or directory"
	if err == nil || err.Error() != wantErr {
		t.Errorf("dump: error %v; want %q", err, wantErr)
	}
}

// The config file is the -config flag; a positional argument is refused
// with the flag to use, not taken for something else.
func TestPositionalConfigArgument(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "bridge.yaml"}, `unexpected argument "bridge.yaml": use -config bridge.yaml`},
		{[]string{"validate", "bridge.yaml"}, `unexpected argument "bridge.yaml": use -config bridge.yaml`},
		{[]string{"dump", "-format", "json", "b.yaml"}, `unexpected argument "b.yaml": use -config b.yaml`},
		{[]string{"run", "-config", "a.yaml", "b.yaml"}, `unexpected arguments ["b.yaml"] (the config file is given with -config FILE)`},
		{[]string{"run", "a.yaml", "b.yaml"}, `unexpected arguments ["a.yaml" "b.yaml"] (the config file is given with -config FILE)`},
		{[]string{"bridge.yaml"}, `unknown command "bridge.yaml" (to serve this config: xdsbridge run -config bridge.yaml)`},
		{[]string{"valdate"}, `unknown command "valdate" (did you mean "validate"?)`},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
	} {
		var out bytes.Buffer
		err := run(tc.args, &out, &out)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%q: error %v; want %q", tc.args, err, tc.want)
		}
	}
}

func TestDumpPrintsResources(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := run([]string{"dump", "-config", "../../examples/xdsbridge.yaml"}, &out, &errOut); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	var got map[string][]struct {
		Name    string         `json:"name"`
		Version string         `json:"version"`
		Res     map[string]any `json:"resource"`
	}
	if err := yaml.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range got["eds"] {
		names = append(names, r.Name)
		if r.Version == "" {
			t.Errorf("%s has no version", r.Name)
		}
	}
	if strings.Join(names, ",") != "api,legacy,web" {
		t.Fatalf("eds resources %v, want api,legacy,web (examples/services.yaml)", names)
	}
	if len(got["cds"]) != 3 || len(got["lds"]) != 3 || len(got["rds"]) != 3 {
		t.Fatalf("cds %d lds %d rds %d, want 3 each", len(got["cds"]), len(got["lds"]), len(got["rds"]))
	}
}

// TestDumpDefaultLocality: endpoints without a locality are served in the
// source's default locality, else the config's; others keep theirs.
func TestDumpDefaultLocality(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"a.yaml": "services: {a: {endpoints: [{address: 10.0.0.1, port: 80}, {address: 10.0.0.2, port: 80, locality: {zone: own}}]}}\n",
		"b.yaml": "services: {b: {endpoints: [{address: 10.0.0.1, port: 80}]}}\n",
		"c.yaml": `
default_locality: {region: r0, zone: z0}
sources:
  - {name: a, file: {path: a.yaml}}
  - {name: b, file: {path: b.yaml}, default_locality: {sub_zone: s9}}
`,
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var out, errOut bytes.Buffer
	if err := run([]string{"dump", "-format", "json", "-config", filepath.Join(dir, "c.yaml")}, &out, &errOut); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	var got map[string][]struct {
		Name string `json:"name"`
		Res  struct {
			Endpoints []struct {
				Locality map[string]string `json:"locality"`
			} `json:"endpoints"`
		} `json:"resource"`
	}
	if err := yaml.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	localities := map[string][]map[string]string{}
	for _, r := range got["eds"] {
		for _, g := range r.Res.Endpoints {
			localities[r.Name] = append(localities[r.Name], g.Locality)
		}
	}
	want := map[string][]map[string]string{
		"a": {{"zone": "own"}, {"region": "r0", "zone": "z0"}},
		"b": {{"sub_zone": "s9"}},
	}
	if d := cmp.Diff(want, localities); d != "" {
		t.Errorf("localities (-want +got):\n%s\n%s", d, out.String())
	}
}

// A secret planted in any source type's config (and a health check's) is
// not echoed by the error that refuses it: config errors end up in logs.
func TestConfigErrorsDoNotEchoSecrets(t *testing.T) {
	const secret = "s3cr3tPASSw0rd"
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "ok.yaml"), []byte("services: {}\n"), 0o644)
	for _, src := range []string{
		// consul: userinfo in the address, as a URL and as host:port
		"consul: {address: \"http://user:" + secret + "@127.0.0.1:8500\"}",
		"consul: {address: \"user:" + secret + "@127.0.0.1:8500\"}",
		"consul: {address: \"https://user:" + secret + "@consul.internal\", scheme: https}",
		// consul: a token next to a broken field, and an unknown field holding one
		"consul: {token: " + secret + ", token_file: t}",
		"consul: {tokn: " + secret + "}",
		"consul: {token: {value: " + secret + "}}",
		// a secret where a mapping, a number or a list is expected
		"consul: {tls: " + secret + "}",
		"consul: {max_concurrent_queries: " + secret + "}",
		"consul: {services: {include: " + secret + "}}",
		// dns: userinfo in a resolver, an unknown field holding a secret
		"dns: {resolvers: [\"user:" + secret + "@127.0.0.1:53\"], services: [{name: a, hosts: [{name: a.example, port: 80}]}]}",
		"dns: {password: " + secret + ", services: []}",
		// file: an unknown field holding a secret
		"file: {path: ok.yaml, password: " + secret + "}",
		"file: {path: {secret: " + secret + "}}",
		// a health check's HTTP host with userinfo, and an unknown field
		"file: {path: ok.yaml}, health_check: {type: http, http: {path: /, host: \"user:" + secret + "@h\"}}",
		"file: {path: ok.yaml}, health_check: {type: grpc, grpc: {authority: \"user:" + secret + "@h\"}}",
		"file: {path: ok.yaml}, health_check: {type: tcp, password: " + secret + "}",
	} {
		p := filepath.Join(dir, "c.yaml")
		cfg := "sources: [{name: s, " + src + "}]\n"
		os.WriteFile(p, []byte(cfg), 0o644)
		var out bytes.Buffer
		err := run([]string{"validate", "-config", p}, &out, &out)
		if err == nil {
			t.Errorf("%s: validate passed", cfg)
			continue
		}
		if strings.Contains(err.Error(), secret) || strings.Contains(out.String(), secret) {
			t.Errorf("%s: the error shows the secret: %v", cfg, err)
		}
	}
}

// validate and run both load the TLS files and name the field of one that
// does not load; good files validate.
func TestValidateTLSFiles(t *testing.T) {
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "ca")
	ca.Server(t).Write(t, dir, "a")
	ca.WriteCA(t, dir, "ca.pem")
	testcerts.WriteFile(t, filepath.Join(dir, "b.key"), ca.Server(t).KeyPEM)
	testcerts.WriteFile(t, filepath.Join(dir, "junk.pem"), []byte("not pem\n"))
	os.WriteFile(filepath.Join(dir, "ok.yaml"), []byte("services: {}\n"), 0o644)
	const tail = "sources: [{name: s, file: {path: ok.yaml}}]\n"
	p := filepath.Join(dir, "c.yaml")
	for _, tc := range []struct{ config, want string }{
		{`xds: {listen: "127.0.0.1:0", tls: {cert_file: a.crt, key_file: b.key}}`, "xds.tls.key_file: does not match xds.tls.cert_file"},
		{`xds: {listen: "127.0.0.1:0", tls: {cert_file: a.crt, key_file: a.key, client_ca_file: junk.pem}}`, "xds.tls.client_ca_file: " + filepath.Join(dir, "junk.pem") + " holds no PEM certificate"},
		{`admin: {listen: "127.0.0.1:0", tls: {cert_file: missing.crt, key_file: a.key}}`, "admin.tls.cert_file: " + filepath.Join(dir, "missing.crt") + " does not exist"},
	} {
		os.WriteFile(p, []byte(tc.config+"\n"+tail), 0o644)
		for _, cmd := range []string{"validate", "serve"} {
			var out bytes.Buffer
			err := run([]string{cmd, "-config", p}, &out, &out)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s %q: error %v, want it to mention %q", cmd, tc.config, err, tc.want)
			}
		}
	}
	os.WriteFile(p, []byte(`xds: {listen: "127.0.0.1:0", tls: {cert_file: a.crt, key_file: a.key, client_ca_file: ca.pem}}
admin: {listen: "127.0.0.1:0", tls: {cert_file: a.crt, key_file: a.key}}
`+tail), 0o644)
	var out bytes.Buffer
	if err := run([]string{"validate", "-config", p}, &out, &out); err != nil || strings.TrimSpace(out.String()) != "config ok" {
		t.Errorf("good TLS files: %v, output %q", err, out.String())
	}
}

// validate reads admin.token_file as the server does: a bad token is an
// error naming the field that does not show the token; a good one passes.
func TestValidateAdminTokenFile(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "ok.yaml"), []byte("services: {}\n"), 0o644)
	p := filepath.Join(dir, "c.yaml")
	os.WriteFile(p, []byte("admin: {token_file: tok}\nsources: [{name: s, file: {path: ok.yaml}}]\n"), 0o644)
	for _, tc := range []struct{ token, want string }{
		{"", "admin.token_file: stat " + filepath.Join(dir, "tok") + ": no such file"},
		{"s3cr3t\n", "admin.token_file: " + filepath.Join(dir, "tok") + ": the token is 6 bytes; at least 16"},
		{"s3cr3t s3cr3t s3cr3t\n", "whitespace inside the token"},
		{"0123456789abcdef\n", ""},
	} {
		os.Remove(filepath.Join(dir, "tok"))
		if tc.token != "" {
			os.WriteFile(filepath.Join(dir, "tok"), []byte(tc.token), 0o600)
		}
		var out bytes.Buffer
		err := run([]string{"validate", "-config", p}, &out, &out)
		if tc.want == "" {
			if err != nil || strings.TrimSpace(out.String()) != "config ok" {
				t.Errorf("token %q: %v %q", tc.token, err, out.String())
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("token %q: error %v, want it to mention %q", tc.token, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error()+out.String(), "s3cr3t") {
			t.Errorf("token %q: the error shows the token: %v", tc.token, err)
		}
	}
}

// validate names each service that two sources publish (a file and a DNS
// name here) and the source that owns it; the config stays valid.
func TestValidateWarnsOfOwnershipConflicts(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "s.yaml"), []byte("services: {api: {endpoints: [{address: 10.0.0.1, port: 80}]}, web: {endpoints: [{address: 10.0.0.2, port: 80}]}}\n"), 0o644)
	for _, tc := range []struct{ priority, want string }{
		{"", `warning: service "api" is published by sources "files", "names": "files" owns it (listed first in sources)`},
		{", priority: 5", `warning: service "api" is published by sources "names", "files": "names" owns it (priority 5)`},
	} {
		p := filepath.Join(dir, "c.yaml")
		os.WriteFile(p, []byte("sources:\n- {name: files, file: {path: s.yaml}}\n- {name: names, dns: {services: [{name: api, hosts: [{name: localhost, port: 80}]}]}"+tc.priority+"}\n"), 0o644)
		var stdout, stderr bytes.Buffer
		if err := run([]string{"validate", "-config", p}, &stdout, &stderr); err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(stderr.String()); got != tc.want {
			t.Errorf("priority %q: stderr %q, want %q", tc.priority, got, tc.want)
		}
		if stdout.String() != "config ok\n" {
			t.Errorf("stdout %q", stdout.String())
		}
	}
	// Two policy files giving api a policy by name (a pattern is no
	// conflict: the most specific one is used).
	os.WriteFile(filepath.Join(dir, "p1.yaml"), []byte("services: {api: {connect_timeout: 1s}, \"w*\": {connect_timeout: 1s}}\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "p2.yaml"), []byte("services: {api: {connect_timeout: 2s}, \"w*\": {connect_timeout: 2s}}\n"), 0o644)
	p := filepath.Join(dir, "c.yaml")
	os.WriteFile(p, []byte("sources:\n- {name: files, file: {path: s.yaml}}\n- {name: pol2, policy_file: {path: p2.yaml}}\n- {name: pol1, policy_file: {path: p1.yaml}, priority: 9}\n"), 0o644)
	var stdout, stderr bytes.Buffer
	if err := run([]string{"validate", "-config", p}, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.TrimSpace(stderr.String()), `warning: service "api" is given a policy by sources "pol2", "pol1": the policy of "pol2" is used (listed first in sources)`; got != want {
		t.Errorf("policy conflict: stderr %q, want %q", got, want)
	}
}

func TestValidateSourcePriorityRange(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "ok.yaml"), []byte("services: {}\n"), 0o644)
	for _, tc := range []struct{ priority, want string }{
		{"1001", "priority: 1001 is not in -1000..1000"},
		{"high", `priority: want a whole number in -1000..1000, not "high"`},
		{"1.5", "priority: want a whole number in -1000..1000, not 1.5"},
	} {
		p := filepath.Join(dir, "c.yaml")
		os.WriteFile(p, []byte("sources: [{name: s, file: {path: ok.yaml}, priority: "+tc.priority+"}]\n"), 0o644)
		var out bytes.Buffer
		err := run([]string{"validate", "-config", p}, &out, &out)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("priority %s: error %v, want it to mention %q", tc.priority, err, tc.want)
		}
	}
}

// validate names the file, line and column of errors found after the
// config decoded: in a source's block, a health check, a TLS file.
func TestValidateErrorsNameLineAndColumn(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "ok.yaml"), []byte("services: {}\n"), 0o644)
	p := filepath.Join(dir, "c.yaml")
	for _, tc := range []struct{ config, want string }{
		{"sources:\n  - name: s\n    file: {path: ok.yaml}\n    health_check: {type: tcp, interval: [1]}\n",
			"line 4, column 31: sources[0].health_check.interval: invalid duration: expected a duration like 5s (or a number of seconds), got a list"},
		{"sources:\n  - name: c\n    consul:\n      address: 127.0.0.1\n      token_file: tok\n",
			"line 5, column 7: sources[0] (c).consul: token_file: open " + filepath.Join(dir, "tok") + ": no such file or directory"},
		{"sources:\n  - name: c\n    consul: {adress: x}\n",
			`line 3, column 14: sources[0] (c).consul: unknown field "adress" (did you mean "address"?)`},
		{"sources:\n  - name: s\n    file: {path: ok.yaml, settle: 1h}\n",
			"line 3, column 27: sources[0] (s).file: settle: 1h is not in 0s..10s"},
		{"sources: [{name: s, file: {path: ok.yaml}}]\nhealth_checks:\n  services:\n    \"w\\x1b[2J\":\n      type: htp\n",
			`line 5, column 7: health_checks.services."w\x1b[2J".type: "htp" is not one of tcp, http, grpc`},
		{"admin:\n  token_file: missing-token\nsources: [{name: s, file: {path: ok.yaml}}]\n",
			"line 2, column 3: admin.token_file: "},
	} {
		os.WriteFile(p, []byte(tc.config), 0o644)
		var out bytes.Buffer
		err := run([]string{"validate", "-config", p}, &out, &out)
		if want := p + ": " + tc.want; err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%q:\n got %v\nwant %s", tc.config, err, want)
		}
	}
}
