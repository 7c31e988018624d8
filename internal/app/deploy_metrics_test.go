package app

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"sigs.k8s.io/yaml"

	"github.com/xdsbridge/xdsbridge/config"
	"github.com/xdsbridge/xdsbridge/internal/testcerts"
)

// metricName matches the metric names a PromQL expression uses: the
// bridge's own and the Go and process collectors'.
var metricName = regexp.MustCompile(`\b(?:xdsbridge|process|go)_[a-zA-Z0-9_]+`)

// dashboardMetrics returns the metric names of every query of the Grafana
// dashboard (panel targets and template variables).
func dashboardMetrics(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var names []string
	var walk func(any, string)
	walk = func(v any, key string) {
		switch v := v.(type) {
		case map[string]any:
			for k, c := range v {
				walk(c, k)
			}
		case []any:
			for _, c := range v {
				walk(c, key)
			}
		case string:
			if key == "expr" || key == "query" || key == "definition" {
				names = append(names, metricName.FindAllString(v, -1)...)
			}
		}
	}
	walk(v, "")
	return names
}

// ruleMetrics returns the metric names of every expression of the
// Prometheus rule file.
func ruleMetrics(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Rules []struct {
				Expr string `json:"expr"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var names []string
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			names = append(names, metricName.FindAllString(r.Expr, -1)...)
		}
	}
	return names
}

// exported is every series name the registry exposes: each family's name,
// with _bucket, _sum and _count for histograms and summaries.
func exported(t *testing.T, a *App) map[string]bool {
	t.Helper()
	mfs, err := a.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, mf := range mfs {
		n := mf.GetName()
		out[n] = true
		switch mf.GetType() {
		case dto.MetricType_HISTOGRAM:
			out[n+"_bucket"], out[n+"_sum"], out[n+"_count"] = true, true, true
		case dto.MetricType_SUMMARY:
			out[n+"_sum"], out[n+"_count"] = true, true
		}
	}
	return out
}

// Every metric the Grafana dashboard and the Prometheus alert rules query
// is exported by a running bridge, once a client connected, ACKed and
// NACKed (some series appear only then).
func TestDeployAssetsUseExportedMetrics(t *testing.T) {
	used := map[string][]string{}
	for _, n := range dashboardMetrics(t, "../../deploy/grafana/xdsbridge.json") {
		used[n] = append(used[n], "deploy/grafana/xdsbridge.json")
	}
	for _, n := range ruleMetrics(t, "../../deploy/prometheus/xdsbridge-rules.yaml") {
		used[n] = append(used[n], "deploy/prometheus/xdsbridge-rules.yaml")
	}
	if len(used) < 20 {
		t.Fatalf("only %d metric names found in the dashboard and rules: %v", len(used), used)
	}

	dir := t.TempDir()
	ca := testcerts.NewCA(t, "ca")
	ca.Server(t).Write(t, dir, "admin")
	services := filepath.Join(dir, "services.yaml")
	writeServices := func(names ...string) {
		s := "services:\n"
		for i, n := range names {
			s += "  " + n + ":\n    endpoints:\n      - {address: 10.0.0." + string(rune('1'+i)) + ", port: 8080"
			if n == "db" {
				s += ", hostname: " + strings.Repeat("h", 300)
			}
			s += "}\n"
		}
		if err := os.WriteFile(services, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeServices("web")
	cfg, err := config.Parse([]byte(`
xds:
  listen: "127.0.0.1:0"
  rest: {listen: "127.0.0.1:0"}
admin:
  listen: "127.0.0.1:0"
  tls: {cert_file: admin.crt, key_file: admin.key}
logging: {level: error}
health_checks:
  services:
    web: {type: tcp}
sources:
  - name: static
    file: {path: services.yaml}
`), dir, SourceTypeNames())
	if err != nil {
		t.Fatal(err)
	}
	a := startApp(t, cfg)

	// A delta client that NACKs the response carrying the cluster "api"
	// and ACKs every other.
	cc, err := grpc.NewClient(a.XDSAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := discovery.NewAggregatedDiscoveryServiceClient(cc).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&discovery.DeltaDiscoveryRequest{Node: &core.Node{Id: "metrics-envoy", Cluster: "edge"}, TypeUrl: clusterType}); err != nil {
		t.Fatal(err)
	}
	responses := make(chan struct{}, 100)
	go func() {
		for {
			r, err := st.Recv()
			if err != nil {
				return
			}
			req := &discovery.DeltaDiscoveryRequest{TypeUrl: clusterType, ResponseNonce: r.Nonce}
			if slices.ContainsFunc(r.Resources, func(res *discovery.Resource) bool { return res.Name == "api" }) {
				req.ErrorDetail = &status.Status{Code: 3, Message: "rejected by the test"}
			}
			if st.Send(req) != nil {
				return
			}
			responses <- struct{}{}
		}
	}()
	waitResponse := func() {
		t.Helper()
		select {
		case <-responses:
		case <-ctx.Done():
			t.Fatal("no xDS response")
		}
	}
	waitResponse()
	writeServices("web", "api") // NACKed
	waitResponse()
	// ACKed, and a hostname over limits.max_hostname_bytes (dropped).
	writeServices("web", "api", "db")
	var missing []string
	for deadline, broken := time.Now().Add(10*time.Second), false; ; time.Sleep(50 * time.Millisecond) {
		have := exported(t, a)
		if have["xdsbridge_xds_change_ack_seconds_bucket"] && !broken {
			// A source error, once the ACK is counted (its last good
			// state stays served).
			if err := os.WriteFile(services, []byte("services: [not, a, map"), 0o644); err != nil {
				t.Fatal(err)
			}
			broken = true
		}
		missing = missing[:0]
		for n := range used {
			if !have[n] {
				missing = append(missing, n)
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
	}
	slices.Sort(missing)
	for _, n := range missing {
		t.Errorf("%s (used in %v) is not exported", n, slices.Compact(used[n]))
	}
}
