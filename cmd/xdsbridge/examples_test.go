package main

import (
	"bytes"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/xdsbridge/xdsbridge/config"
	"github.com/xdsbridge/xdsbridge/fileout"
	"github.com/xdsbridge/xdsbridge/internal/testcerts"
)

// exampleDump is what `dump -format json` prints: per type, the resources
// with their encoded form.
type exampleDump map[string][]struct {
	Name     string         `json:"name"`
	Resource map[string]any `json:"resource"`
}

// resource returns the named resource of a type, failing the test if
// there is none.
func (d exampleDump) resource(t *testing.T, typ, name string) map[string]any {
	t.Helper()
	for _, r := range d[typ] {
		if r.Name == name {
			return r.Resource
		}
	}
	t.Fatalf("dump has no %s resource %q", typ, name)
	return nil
}

func (d exampleDump) names(typ string) []string {
	var names []string
	for _, r := range d[typ] {
		names = append(names, r.Name)
	}
	return names
}

// dig walks a decoded JSON document by keys and list indexes.
func dig(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			l, _ := v.([]any)
			if k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

// readExampleYAML decodes examples/<name> (YAML) into a generic document.
func readExampleYAML(t *testing.T, name string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("../../examples", name))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("examples/%s: %v", name, err)
	}
	return doc
}

// bootstrapClusterPort is the port of the first host of a static cluster
// of an Envoy bootstrap in examples/.
func bootstrapClusterPort(t *testing.T, bootstrap, cluster string) string {
	t.Helper()
	doc := readExampleYAML(t, bootstrap)
	clusters, _ := dig(doc, "static_resources", "clusters").([]any)
	for _, c := range clusters {
		if dig(c, "name") == cluster {
			port := dig(c, "load_assignment", "endpoints", 0, "lb_endpoints", 0, "endpoint", "address", "socket_address", "port_value")
			b, _ := json.Marshal(port)
			return string(b)
		}
	}
	t.Fatalf("examples/%s has no cluster %q", bootstrap, cluster)
	return ""
}

func listenPort(t *testing.T, addr string) string {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// mtlsExampleDir copies examples/xdsbridge-mtls.yaml and services.yaml to
// a directory with the certificates examples/certs/README.md makes (here
// from testcerts) in its certs/, and returns the directory.
func mtlsExampleDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"xdsbridge-mtls.yaml", "services.yaml"} {
		b, err := os.ReadFile(filepath.Join("../../examples", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	certs := filepath.Join(dir, "certs")
	if err := os.Mkdir(certs, 0o755); err != nil {
		t.Fatal(err)
	}
	ca := testcerts.NewCA(t, "example CA")
	ca.WriteCA(t, certs, "ca.pem")
	srv := ca.Issue(t, testcerts.LeafOptions{CommonName: "xdsbridge", DNS: []string{"xdsbridge.example.org"}})
	testcerts.WriteFile(t, filepath.Join(certs, "xdsbridge.pem"), srv.CertPEM)
	testcerts.WriteFile(t, filepath.Join(certs, "xdsbridge-key.pem"), srv.KeyPEM)
	testcerts.WriteFile(t, filepath.Join(certs, "admin-token"), []byte("0123456789abcdef0123456789abcdef\n"))
	return dir
}

// exampleChecks says, for each examples/xdsbridge*.yaml, what it is there
// to show, checked on its loaded config and on what `dump` prints.
var exampleChecks = map[string]func(t *testing.T, cfg *config.Config, d exampleDump){
	"xdsbridge.yaml": func(t *testing.T, cfg *config.Config, d exampleDump) {
		// The services of examples/services.yaml, each a cluster, an
		// assignment, and gRPC clients' listener and route.
		for _, typ := range []string{"cds", "eds", "lds", "rds"} {
			if got := d.names(typ); !slices.Equal(got, []string{"api", "legacy", "web"}) {
				t.Errorf("%s: %v; want api, legacy, web", typ, got)
			}
		}
		// The quick start's backends: web on 8081 and 8082.
		var ports []string
		for _, lb := range dig(d.resource(t, "eds", "web"), "endpoints").([]any) {
			for _, e := range dig(lb, "lb_endpoints").([]any) {
				b, _ := json.Marshal(dig(e, "endpoint", "address", "socket_address", "port_value"))
				ports = append(ports, string(b))
			}
		}
		if slices.Sort(ports); !slices.Equal(ports, []string{"8081", "8082"}) {
			t.Errorf("web's endpoints on ports %v; want 8081, 8082 (the quick start's backends)", ports)
		}
	},
	"xdsbridge-policy.yaml": func(t *testing.T, cfg *config.Config, d exampleDump) {
		// web: a 90/10 weighted split over its subsets, which select its
		// hosts by the metadata of examples/services.yaml, and retries.
		web := dig(d.resource(t, "rds", "web"), "virtual_hosts", 0, "routes").([]any)
		last := web[len(web)-1]
		wc := dig(last, "route", "weighted_clusters", "clusters")
		b, _ := json.Marshal(wc)
		// Weights in hundredths of a percent (the policy's two decimals).
		if got := string(b); got != `[{"name":"web/stable","weight":9000},{"name":"web/canary","weight":1000}]` {
			t.Errorf("web's default route: weighted clusters %s; want web/stable 90 %%, web/canary 10 %%", got)
		}
		if dig(last, "route", "retry_policy", "num_retries") != float64(3) || dig(last, "route", "retry_policy", "retry_on") != "5xx,connect-failure,reset" {
			t.Errorf("web's default route: retry policy %v", dig(last, "route", "retry_policy"))
		}
		if got := dig(web[0], "route", "cluster"); got != "web/canary" {
			t.Errorf("web's x-canary route goes to %v; want web/canary", got)
		}
		for subset, port := range map[string]float64{"web/stable": 8081, "web/canary": 8082} {
			eps := dig(d.resource(t, "eds", subset), "endpoints").([]any)
			if len(eps) != 1 || len(dig(eps[0], "lb_endpoints").([]any)) != 1 ||
				dig(eps[0], "lb_endpoints", 0, "endpoint", "address", "socket_address", "port_value") != port {
				t.Errorf("%s's endpoints %v; want the one on %v", subset, eps, port)
			}
		}
		// api: ring hash with hash policies, retries on UNAVAILABLE, and
		// legacy's hosts as its failover (priority 1).
		if got := dig(d.resource(t, "cds", "api"), "lb_policy"); got != "RING_HASH" {
			t.Errorf("api's lb_policy %v; want RING_HASH", got)
		}
		api := dig(d.resource(t, "rds", "api"), "virtual_hosts", 0, "routes", 0, "route")
		if dig(api, "hash_policy", 0, "header", "header_name") != "x-user-id" || dig(api, "retry_policy", "retry_on") != "unavailable,resource-exhausted" {
			t.Errorf("api's route %v; want a hash policy on x-user-id and retries on unavailable", api)
		}
		if got := dig(d.resource(t, "eds", "api"), "endpoints", 1, "priority"); got != float64(1) {
			t.Errorf("api's failover group has priority %v; want 1", got)
		}
		// legacy, by the pattern legacy*: least request, outlier detection.
		legacy := d.resource(t, "cds", "legacy")
		if dig(legacy, "lb_policy") != "LEAST_REQUEST" || dig(legacy, "outlier_detection", "consecutive_5xx") != float64(5) {
			t.Errorf("legacy's cluster %v; want LEAST_REQUEST and outlier detection", legacy)
		}
	},
	"xdsbridge-egress.yaml": func(t *testing.T, cfg *config.Config, d exampleDump) {
		// The egress listener where the guide curls it, routed by the
		// egress table: a virtual host per service with the policy's
		// routes, and the 404 catch-all last.
		e := cfg.Egress
		if e == nil || e.Listener == nil || e.Listener.Port != 10000 {
			t.Fatalf("egress %+v: want a listener on port 10000", e)
		}
		lis := d.resource(t, "lds", e.Listener.Name)
		if got := dig(lis, "address", "socket_address", "port_value"); got != float64(10000) {
			t.Errorf("egress listener on port %v; want 10000", got)
		}
		hcm := dig(lis, "filter_chains", 0, "filters", 0, "typed_config")
		// codec_type AUTO is the enum's zero: absent from the JSON.
		if c := dig(hcm, "codec_type"); dig(hcm, "rds", "route_config_name") != e.RouteConfigName || (c != nil && c != "AUTO") {
			t.Errorf("egress listener's connection manager %v; want codec AUTO and RDS %s", hcm, e.RouteConfigName)
		}
		vhs := dig(d.resource(t, "rds", e.RouteConfigName), "virtual_hosts").([]any)
		var names []string
		for _, vh := range vhs {
			names = append(names, dig(vh, "name").(string))
		}
		if want := []string{"api", "legacy", "web", "xdsbridge-unknown-host"}; !slices.Equal(names, want) {
			t.Fatalf("egress virtual hosts %v; want %v", names, want)
		}
		b, _ := json.Marshal(dig(vhs[2], "domains"))
		if got := string(b); got != `["web","web:*","web.service.consul","web.service.consul:*","web.service.dc1.consul","web.service.dc1.consul:*"]` {
			t.Errorf("web's domains %s", got)
		}
		own, _ := json.Marshal(dig(d.resource(t, "rds", "web"), "virtual_hosts", 0, "routes"))
		if got, _ := json.Marshal(dig(vhs[2], "routes")); string(got) != string(own) {
			t.Errorf("web's egress routes %s; want its own route configuration's %s", got, own)
		}
		if got := dig(vhs[3], "routes", 0, "direct_response", "status"); got != float64(404) {
			t.Errorf("catch-all %v; want a 404", vhs[3])
		}
		// The Envoy bootstrap has only the bridge's address, and LDS and
		// CDS from ADS.
		boot := readExampleYAML(t, "envoy-egress.yaml")
		if got := bootstrapClusterPort(t, "envoy-egress.yaml", "xdsbridge"); got != listenPort(t, cfg.XDS.Listen) {
			t.Errorf("envoy-egress.yaml dials port %s; xds.listen is %s", got, cfg.XDS.Listen)
		}
		if dig(boot, "dynamic_resources", "lds_config", "ads") == nil || dig(boot, "dynamic_resources", "cds_config", "ads") == nil || dig(boot, "static_resources", "listeners") != nil {
			t.Errorf("envoy-egress.yaml: want LDS and CDS over ADS and no static listener")
		}
	},
	"xdsbridge-rest.yaml": func(t *testing.T, cfg *config.Config, d exampleDump) {
		// REST-JSON polling, on the listener and through the cluster
		// examples/envoy-rest.yaml polls.
		r := cfg.XDS.REST
		if r == nil || r.EDSConfig == nil {
			t.Fatal("no xds.rest with an eds_config")
		}
		if got := bootstrapClusterPort(t, "envoy-rest.yaml", r.EDSConfig.ClusterName); got != listenPort(t, r.Listen) {
			t.Errorf("envoy-rest.yaml's cluster %s polls port %s; xds.rest.listen is %s", r.EDSConfig.ClusterName, got, r.Listen)
		}
		timeout, _ := dig(readExampleYAML(t, "envoy-rest.yaml"), "dynamic_resources", "cds_config", "api_config_source", "request_timeout").(string)
		if timeout != r.EDSConfig.RequestTimeout.D().String() || r.EDSConfig.RequestTimeout <= r.MaxWait {
			t.Errorf("envoy-rest.yaml's request_timeout %q, the bridge's %s, max_wait %s: want equal, and longer than max_wait", timeout, r.EDSConfig.RequestTimeout.D(), r.MaxWait.D())
		}
		if len(d["cds"]) != 3 {
			t.Errorf("cds: %v", d.names("cds"))
		}
	},
	"xdsbridge-files.yaml": func(t *testing.T, cfg *config.Config, d exampleDump) {
		// The filesystem output, where examples/envoy-files.yaml reads it.
		fs := cfg.Outputs.Filesystem
		if fs == nil {
			t.Fatal("no outputs.filesystem")
		}
		path := dig(readExampleYAML(t, "envoy-files.yaml"), "dynamic_resources", "cds_config", "path_config_source", "path")
		if want := filepath.Join(fs.Dir, "clusters"+fileout.Ext(fs.Format)); path != want {
			t.Errorf("envoy-files.yaml reads CDS from %v; the bridge writes %s", path, want)
		}
		var out, errOut bytes.Buffer
		dir := t.TempDir()
		if err := run([]string{"dump", "-config", "../../examples/xdsbridge-files.yaml", "-out", dir}, &out, &errOut); err != nil {
			t.Fatalf("dump -out: %v\n%s", err, errOut.String())
		}
		b, err := os.ReadFile(filepath.Join(dir, "clusters.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if want := "path: " + filepath.Join(dir, "endpoints", "web.yaml"); !strings.Contains(string(b), want) {
			t.Errorf("clusters.yaml: web's eds_config is not %q:\n%s", want, b)
		}
	},
	"xdsbridge-mtls.yaml": func(t *testing.T, cfg *config.Config, d exampleDump) {
		// mTLS, and authorization by SPIFFE ID.
		tls := cfg.XDS.TLS
		if tls == nil || tls.ClientCAFile == "" || cfg.XDS.Authorization == nil || len(cfg.XDS.Authorization.Allow) == 0 {
			t.Fatalf("xds.tls %+v, authorization %+v: want mTLS with rules", tls, cfg.XDS.Authorization)
		}
		if got := bootstrapClusterPort(t, "envoy-mtls.yaml", "xdsbridge"); got != listenPort(t, cfg.XDS.Listen) {
			t.Errorf("envoy-mtls.yaml dials port %s; xds.listen is %s", got, cfg.XDS.Listen)
		}
		if len(d["cds"]) != 3 {
			t.Errorf("cds: %v", d.names("cds"))
		}
	},
}

// TestExampleConfigs: every examples/xdsbridge*.yaml validates and dumps
// through the commands' own code, and shows what it is there to show.
func TestExampleConfigs(t *testing.T) {
	paths, err := filepath.Glob("../../examples/xdsbridge*.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	for _, p := range paths {
		name := filepath.Base(p)
		t.Run(name, func(t *testing.T) {
			check, ok := exampleChecks[name]
			if !ok {
				t.Fatalf("no check of what examples/%s shows: add one to exampleChecks", name)
			}
			if name == "xdsbridge-mtls.yaml" {
				p = filepath.Join(mtlsExampleDir(t), name)
			}
			var out, errOut bytes.Buffer
			if err := run([]string{"validate", "-config", p}, &out, &errOut); err != nil || strings.TrimSpace(out.String()) != "config ok" {
				t.Fatalf("validate: %v, %q\n%s", err, out.String(), errOut.String())
			}
			cfg, err := loadConfig(p)
			if err != nil {
				t.Fatal(err)
			}
			// The Envoy bootstraps in examples/ dial the xDS server on
			// 127.0.0.1:18000.
			if cfg.XDS.Listen != "127.0.0.1:18000" {
				t.Errorf("xds.listen %q; the Envoy examples dial 127.0.0.1:18000", cfg.XDS.Listen)
			}
			out.Reset()
			if err := run([]string{"dump", "-config", p, "-format", "json"}, &out, &errOut); err != nil {
				t.Fatalf("dump: %v\n%s", err, errOut.String())
			}
			var d exampleDump
			if err := json.Unmarshal(out.Bytes(), &d); err != nil {
				t.Fatal(err)
			}
			check(t, cfg, d)
		})
	}
}
