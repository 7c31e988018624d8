package e2e

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// grpc-go v1.85.0's xDS client builds the bootstrap's "tls" channel
		// credentials a second time and drops their close func
		// (internal/xds/xdsclient/clientimpl.go,
		// populateGRPCTransportConfigsFromServerConfig: `bundle, _, err :=
		// c.Build(cc.Config)`), so each xDS client with a TLS bootstrap
		// leaves one pemfile watcher running (TestGRPCXDSClientTLS).
		goleak.IgnoreTopFunction("google.golang.org/grpc/credentials/tls/certprovider/pemfile.(*watcher).run"))
}

// TestEnvoyFollowsFileSource drives a real Envoy, over delta and over SotW
// ADS, through edits of the services file.
func TestEnvoyFollowsFileSource(t *testing.T) {
	for _, bootstrap := range []string{"envoy-delta.yaml", "envoy-sotw.yaml"} {
		t.Run(strings.TrimSuffix(bootstrap, ".yaml"), func(t *testing.T) {
			bs := startBackends(t, 3)
			b1, b2, b3 := bs[0], bs[1], bs[2]
			br := startBridge(t, servicesYAML("web", b1, b2), "")
			ev := startEnvoy(t, bootstrap, br.app.XDSAddr())

			// Every listed backend receives traffic.
			ev.waitTraffic(t, "b1", "b2")
			if d := cmp.Diff(hostsOf(b1, b2), ev.clusterHosts(t, "web")); d != "" {
				t.Fatalf("envoy /clusters hosts (-want +got):\n%s", d)
			}

			// Remove b2: Envoy stops sending to it.
			br.writeServices(t, servicesYAML("web", b1))
			ev.waitTraffic(t, "b1")
			waitFor(t, 10*time.Second, "b2 gone from /clusters", func() error {
				if got := ev.clusterHosts(t, "web"); !slices.Equal(got, hostsOf(b1)) {
					return fmt.Errorf("hosts %v", got)
				}
				return nil
			})

			// Add b3: it starts receiving.
			br.writeServices(t, servicesYAML("web", b1, b3))
			ev.waitTraffic(t, "b1", "b3")

			// A broken file: the bridge reports it and traffic continues unchanged.
			errsBefore := sourceErrors(t, br)
			br.writeServices(t, "services:\n  web:\n    endpoints:\n      - {address: not-an-ip, port: 1}\n")
			waitFor(t, 10*time.Second, "the bridge to reject the broken file", func() error {
				if sourceErrors(t, br) == errsBefore {
					return fmt.Errorf("no error reported yet")
				}
				return nil
			})
			got, err := ev.hit(40)
			if err != nil {
				t.Fatal(err)
			}
			if got["b1"] == 0 || got["b3"] == 0 || len(got) != 2 {
				t.Fatalf("after a broken file, traffic went to %v; want b1 and b3 only", got)
			}
			if d := cmp.Diff(hostsOf(b1, b3), ev.clusterHosts(t, "web")); d != "" {
				t.Fatalf("hosts after a broken file (-want +got):\n%s", d)
			}

			// A fixed file is picked up again.
			br.writeServices(t, servicesYAML("web", b2))
			ev.waitTraffic(t, "b2")

			ev.assertNoRejections(t)
			if n := br.app.XDS.NACKs(); n != 0 {
				t.Fatalf("bridge counted %d NACKs", n)
			}
		})
	}
}

// TestEnvoyServiceRemovedAndReadded removes the routed cluster and brings it
// back: Envoy answers 503 in between and recovers, never NACKing.
func TestEnvoyServiceRemovedAndReadded(t *testing.T) {
	bs := startBackends(t, 1)
	br := startBridge(t, servicesYAML("web", bs[0])+"  other:\n    endpoints: []\n", "")
	ev := startEnvoy(t, "envoy-delta.yaml", br.app.XDSAddr())
	ev.waitTraffic(t, "b1")

	br.writeServices(t, "services:\n  other:\n    endpoints: []\n")
	waitFor(t, 10*time.Second, "cluster web removed from Envoy", func() error {
		body, err := ev.Get("/clusters")
		if err != nil {
			return err
		}
		if strings.Contains(body, "\nweb::") || strings.HasPrefix(body, "web::") {
			return fmt.Errorf("web still present")
		}
		return nil
	})
	if _, err := ev.hit(1); err == nil {
		t.Fatal("request succeeded with the cluster removed")
	}
	br.writeServices(t, servicesYAML("web", bs[0]))
	ev.waitTraffic(t, "b1")
	ev.assertNoRejections(t)
}

func sourceErrors(t *testing.T, br *bridge) string {
	t.Helper()
	var st struct {
		Sources []struct {
			Status struct {
				LastError string `json:"last_error"`
				Stale     bool   `json:"stale"`
			} `json:"status"`
		} `json:"sources"`
	}
	br.debugJSON(t, "/debug/sources", &st)
	var parts []string
	for _, s := range st.Sources {
		parts = append(parts, s.Status.LastError)
	}
	return strings.Join(parts, "|")
}

// TestAdminEndpoints checks readiness, metrics and the debug output.
func TestAdminEndpoints(t *testing.T) {
	bs := startBackends(t, 1)
	br := startBridge(t, servicesYAML("web", bs[0]), "")
	waitFor(t, 10*time.Second, "ready", func() error {
		resp, err := http.Get("http://" + br.app.AdminAddr() + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("readyz %s", resp.Status)
		}
		return nil
	})
	var res map[string][]struct {
		Name    string `json:"name"`
		Version string `json:"version"`
	}
	br.debugJSON(t, "/debug/resources", &res)
	if len(res["cds"]) != 1 || res["cds"][0].Name != "web" || len(res["eds"]) != 1 {
		t.Fatalf("/debug/resources = %+v", res)
	}
	resp, err := http.Get("http://" + br.app.AdminAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var sb strings.Builder
	buf := make([]byte, 1<<16)
	for {
		n, err := resp.Body.Read(buf)
		sb.Write(buf[:n])
		if err != nil {
			break
		}
	}
	for _, m := range []string{`xdsbridge_source_syncs_total{source="static"} 1`, `xdsbridge_xds_resources{type="type.googleapis.com/envoy.config.cluster.v3.Cluster"} 1`, "xdsbridge_ready 1"} {
		if !strings.Contains(sb.String(), m) {
			t.Errorf("metrics lack %q", m)
		}
	}
}
