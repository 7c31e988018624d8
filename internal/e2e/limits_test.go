package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	xdsgrpc "google.golang.org/grpc/xds"
)

// nestedJSON is a metadata namespace nested depth levels deep (the
// namespace's own object is level 1), as a JSON flow mapping YAML reads.
func nestedJSON(depth int) string {
	return strings.Repeat(`{"k": `, depth) + `"v"` + strings.Repeat("}", depth)
}

// TestEnvoyDeepMetadataDoesNotBlankNeighbours: a service whose metadata
// nests 48 levels deep used to pass validation and make Envoy reject the
// whole EDS response, so its neighbours in that response got no endpoints.
// Now the namespace is dropped; with max_metadata_depth at its ceiling
// (32), Envoy takes the deepest metadata the bridge sends, over delta and
// SotW.
func TestEnvoyDeepMetadataDoesNotBlankNeighbours(t *testing.T) {
	for _, bootstrap := range []string{"envoy-delta.yaml", "envoy-sotw.yaml"} {
		t.Run(strings.TrimSuffix(bootstrap, ".yaml"), func(t *testing.T) {
			bs := startBackends(t, 3)
			// One file, one first response: web and its neighbours arrive
			// together.
			svcs := servicesYAML("web", bs[0]) + fmt.Sprintf(`  edge:
    endpoints:
      - {address: 127.0.0.1, port: %d, metadata: {edge: %s}}
  deep:
    endpoints:
      - {address: 127.0.0.1, port: %d, metadata: {bad: %s, envoy.lb: {canary: true}}}
`, bs[1].port, nestedJSON(32), bs[2].port, nestedJSON(48))
			br := startBridge(t, svcs, "limits: {max_metadata_depth: 32}\n")
			ev := startEnvoy(t, bootstrap, br.app.XDSAddr())

			ev.waitTraffic(t, "b1")
			for name, b := range map[string]*backend{"edge": bs[1], "deep": bs[2]} {
				waitFor(t, 10*time.Second, name+" in Envoy's /clusters", func() error {
					if got := ev.clusterHosts(t, name); !cmp.Equal(got, hostsOf(b)) {
						return fmt.Errorf("hosts %v", got)
					}
					return nil
				})
			}
			// Envoy holds edge's 32 levels and deep's other namespace.
			dump, err := ev.Get("/config_dump?include_eds&resource=dynamic_endpoint_configs")
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(dump, `"edge"`) || !strings.Contains(dump, `"canary": true`) || strings.Contains(dump, `"bad"`) {
				t.Errorf("Envoy's endpoint config lacks edge's or deep's kept metadata, or has the dropped one:\n%.2000s", dump)
			}
			ev.assertNoRejections(t)
			if n := br.app.XDS.NACKs(); n != 0 {
				t.Fatalf("bridge counted %d NACKs", n)
			}
			var st struct {
				Diagnostics map[string][]struct{ Service, Field, Message string } `json:"diagnostics"`
			}
			br.debugJSON(t, "/debug/sources", &st)
			d := st.Diagnostics["deep"]
			if len(d) != 1 || d[0].Field != fmt.Sprintf("endpoints[127.0.0.1:%d].metadata", bs[2].port) || !strings.Contains(d[0].Message, `namespace "bad" dropped`) || len(st.Diagnostics) != 1 {
				t.Errorf("diagnostics %+v", st.Diagnostics)
			}
			metricAtLeast(t, br, `xdsbridge_translate_limit_exceeded_total{limit="max_metadata_depth"}`, 1)
		})
	}
}

// TestEnvoyOverSizeServiceKeepsLastPublished: an update that makes a
// service's assignment larger than max_resource_bytes is refused; Envoy
// keeps routing to the last published endpoints, and the next update
// within the limit goes through.
func TestEnvoyOverSizeServiceKeepsLastPublished(t *testing.T) {
	bs := startBackends(t, 2)
	br := startBridge(t, servicesYAML("web", bs[0]), "limits: {max_resource_bytes: 4096}\n")
	ev := startEnvoy(t, "envoy-delta.yaml", br.app.XDSAddr())
	ev.waitTraffic(t, "b1")

	// b2 and 300 hosts that do not listen: over 4 KiB.
	var sb strings.Builder
	sb.WriteString(servicesYAML("web", bs[1]))
	for i := range 300 {
		fmt.Fprintf(&sb, "      - {address: 127.0.1.%d, port: %d}\n", i%250+1, 20000+i)
	}
	br.writeServices(t, sb.String())
	metricAtLeast(t, br, "xdsbridge_translate_refused_total", 1)
	metricAtLeast(t, br, `xdsbridge_translate_limit_exceeded_total{limit="max_resource_bytes"}`, 1)
	metricAtLeast(t, br, "xdsbridge_services_refused", 1)
	got, err := ev.hit(20)
	if err != nil || len(got) != 1 || got["b1"] != 20 {
		t.Fatalf("after the refused update, traffic went to %v (%v); want b1 only", got, err)
	}
	if d := cmp.Diff(hostsOf(bs[0]), ev.clusterHosts(t, "web")); d != "" {
		t.Fatalf("hosts (-want +got):\n%s", d)
	}
	var st struct {
		Diagnostics map[string][]struct{ Service, Field, Message string } `json:"diagnostics"`
	}
	br.debugJSON(t, "/debug/sources", &st)
	if d := st.Diagnostics["web"]; len(d) != 1 || d[0].Field != "cluster_load_assignment" || !strings.Contains(d[0].Message, "more than max_resource_bytes 4096") {
		t.Errorf("diagnostics %+v", st.Diagnostics)
	}

	br.writeServices(t, servicesYAML("web", bs[1]))
	ev.waitTraffic(t, "b2")
	metricAtLeast(t, br, "xdsbridge_services_refused", 0)
	ev.assertNoRejections(t)
}

// TestProxylessGRPCClientFiveMegabyteHostname: a 5 MB hostname made the
// assignment larger than grpc-go's 4 MiB receive limit, so the client got
// no endpoints at all. The hostname is dropped; RPCs reach the backend.
func TestProxylessGRPCClientFiveMegabyteHostname(t *testing.T) {
	bs := startGRPCBackends(t, 1)
	svcs := fmt.Sprintf("services:\n  greeter:\n    endpoints:\n      - {address: 127.0.0.1, port: %d, locality: {region: r1}, hostname: %s}\n", bs[0].port, strings.Repeat("h", 5_000_000))
	br := startBridge(t, svcs, "")
	bootstrap := fmt.Sprintf(`{
  "xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
  "node": {"id": "grpc-client-1", "cluster": "e2e"}
}`, br.app.XDSAddr())
	builder, err := xdsgrpc.NewXDSResolverWithConfigForTesting([]byte(bootstrap))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("xds:///greeter", grpc.WithResolvers(builder), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("RPC through xds:///greeter: %v", err)
	}
	if n := br.app.XDS.NACKs(); n != 0 {
		t.Fatalf("grpc-go NACKed %d updates", n)
	}
	metricAtLeast(t, br, `xdsbridge_translate_limit_exceeded_total{limit="max_hostname_bytes"}`, 1)
}

// metricAtLeast waits until the bridge's metric (name with labels, as
// /metrics prints it) is at least want; want 0 waits for exactly 0.
func metricAtLeast(t *testing.T, br *bridge, metric string, want float64) {
	t.Helper()
	waitFor(t, 10*time.Second, fmt.Sprintf("%s >= %v", metric, want), func() error {
		resp, err := http.Get("http://" + br.app.AdminAddr() + "/metrics")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		for _, line := range strings.Split(string(body), "\n") {
			v, ok := strings.CutPrefix(line, metric+" ")
			if !ok {
				continue
			}
			var got float64
			if err := json.Unmarshal([]byte(v), &got); err != nil {
				return err
			}
			if got < want || (want == 0 && got != 0) {
				return fmt.Errorf("%s = %v", metric, got)
			}
			return nil
		}
		return fmt.Errorf("%s not in /metrics", metric)
	})
}
