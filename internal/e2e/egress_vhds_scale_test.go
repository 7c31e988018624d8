package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/xdsbridge/xdsbridge/translate"
	"github.com/xdsbridge/xdsbridge/xds"
)

// TestEgressVHDSAtScale compares, with XDSBRIDGE_EGRESS_SCALE services
// (e.g. 5000; unset: skipped) and one real delta Envoy, the whole egress
// table (examples/envoy-egress.yaml: every cluster, the table over RDS)
// with VHDS and on-demand CDS (examples/envoy-egress-vhds.yaml): the
// bytes Envoy receives from the bridge for a route change to a service it
// does not call and to one it calls, the latency of the first request to
// a host never called before, and Envoy's memory (/memory) once it has
// called 3 services. It reports figures; it asserts only that the
// services are reached.
func TestEgressVHDSAtScale(t *testing.T) {
	n := egressScale(t)
	b := startBackend(t, "b", "127.0.0.1:0")
	catalog := egressScaleCatalog(n, b.port)
	called := []string{"svc-00001", "svc-00002", "svc-00003"}
	other := fmt.Sprintf("svc-%05d", n-1)
	for _, vhds := range []bool{false, true} {
		t.Run(fmt.Sprintf("vhds=%v", vhds), func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "services.yaml"), []byte(catalog), 0o644); err != nil {
				t.Fatal(err)
			}
			port := freePort(t)
			head := egressHead(port)
			if vhds {
				head = vhdsHead(port)
			}
			br, policyPath := startPolicyBridge(t, dir, head, "  - name: static\n    file: {path: services.yaml, settle: 10ms}\n", "services: {}\n")
			var ev *envoy
			if vhds {
				ev = startVHDSEnvoy(t, br, port)
				// A host no service has: answered once the listener is
				// there, without a virtual host or cluster fetched.
				waitFor(t, 180*time.Second, "the egress listener", func() error {
					_, code, err := epNewHTTP(t, ev, "nope").get()
					if err == nil && code != http.StatusNotFound {
						err = fmt.Errorf("status %d", code)
					}
					return err
				})
			} else {
				ev = startEgressEnvoy(t, br, "DELTA_GRPC", port)
				waitFor(t, 180*time.Second, "envoy to hold every cluster and the table", func() error {
					if got := ev.Stats(t, `^cluster_manager\.active_clusters$`)["cluster_manager.active_clusters"]; got < int64(n) {
						return fmt.Errorf("%d active clusters", got)
					}
					_, err := epNewHTTP(t, ev, other).ok()
					return err
				})
			}
			waitFor(t, 60*time.Second, "the table served", func() error {
				if br.app.Cache.Get(xds.RouteType, translate.DefaultEgressName) == nil {
					return fmt.Errorf("no table yet")
				}
				return nil
			})
			var firsts []string
			for _, s := range called {
				h := epNewHTTP(t, ev, s)
				t0 := time.Now()
				name, code, err := h.get()
				d := time.Since(t0)
				if err != nil || code != http.StatusOK || name != "b" {
					t.Fatalf("first request to %s: %d %q %v", s, code, name, err)
				}
				firsts = append(firsts, d.Round(10*time.Microsecond).String())
			}
			t.Logf("%d services, vhds %v: first request to a host never called: %s", n, vhds, strings.Join(firsts, ", "))
			time.Sleep(2 * time.Second) // let Envoy settle before reading its heap
			mem, err := ev.Get("/memory")
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d services, vhds %v: envoy /memory %s; %d clusters active", n, vhds, compactMemory(mem),
				ev.Stats(t, `^cluster_manager\.active_clusters$`)["cluster_manager.active_clusters"])

			// Route changes: a timeout on a service Envoy does not call,
			// then on one it calls.
			policy := "services:\n"
			for _, s := range []string{other, called[0]} {
				policy += fmt.Sprintf("  %s: {timeout: 7s}\n", s)
				sent := envoyXDSBytes(t, ev)
				updates := envoyRouteUpdates(t, ev)
				if err := os.WriteFile(policyPath, []byte(policy), 0o644); err != nil {
					t.Fatal(err)
				}
				waitFor(t, 60*time.Second, s+"'s new timeout in the table", func() error {
					if d := tableTimeout(t, br, s); d != 7*time.Second {
						return fmt.Errorf("timeout %v", d)
					}
					return nil
				})
				if !vhds || s == called[0] {
					waitFor(t, 60*time.Second, "Envoy to receive the change", func() error {
						if got := envoyRouteUpdates(t, ev); got == updates {
							return fmt.Errorf("%d route updates", got)
						}
						return nil
					})
				}
				time.Sleep(500 * time.Millisecond)
				t.Logf("%d services, vhds %v: a route change to %s (called: %v): Envoy received %d bytes from the bridge, %d route updates",
					n, vhds, s, s == called[0], envoyXDSBytes(t, ev)-sent, envoyRouteUpdates(t, ev)-updates)
			}
			ev.assertNoRejections(t)
		})
	}
}

var routeUpdateStat = regexp.MustCompile(`^http\.egress\.rds\.(vhds\.)?xdsbridge_egress\.update_attempt$`)

// envoyRouteUpdates is how many RDS and VHDS responses for the egress
// table Envoy received.
func envoyRouteUpdates(t *testing.T, ev *envoy) int64 {
	t.Helper()
	var sum int64
	for k, v := range ev.Stats(t, `^http\.egress\.rds\.`) {
		if routeUpdateStat.MatchString(k) {
			sum += v
		}
	}
	return sum
}
