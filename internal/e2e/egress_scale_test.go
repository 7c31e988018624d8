package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/xdsbridge/xdsbridge/translate"
	"github.com/xdsbridge/xdsbridge/xds"
)

// TestEgressFullTableAtScale measures the egress route table with
// XDSBRIDGE_EGRESS_SCALE services (e.g. 5000; unset: skipped) and one
// real delta Envoy: the table's encoded size (what every Envoy receives
// again on each change to the table), Envoy's memory with and without
// the table, and how long a service added to the file takes to answer
// through the listener. It reports figures; it asserts only that the
// services are reached.
func TestEgressFullTableAtScale(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("XDSBRIDGE_EGRESS_SCALE"))
	if n <= 0 {
		t.Skip("set XDSBRIDGE_EGRESS_SCALE=5000 to measure")
	}
	b := startBackend(t, "b", "127.0.0.1:0")
	services := func(count int) string {
		var sb strings.Builder
		sb.WriteString("services:\n")
		for i := range count {
			fmt.Fprintf(&sb, "  svc-%05d:\n    endpoints: [{address: 127.0.0.1, port: %d}]\n", i, b.port)
		}
		return sb.String()
	}
	for _, egress := range []bool{false, true} {
		t.Run(fmt.Sprintf("egress=%v", egress), func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "services.yaml"), []byte(services(n)), 0o644); err != nil {
				t.Fatal(err)
			}
			port := freePort(t)
			head := ""
			if egress {
				head = egressHead(port)
			}
			br := startBridgeConfig(t, dir, head+"sources:\n  - name: static\n    file: {path: services.yaml, settle: 10ms}\n", nil)
			ev := startEgressEnvoy(t, br, "DELTA_GRPC", port)
			last := fmt.Sprintf("svc-%05d", n-1)
			waitFor(t, 120*time.Second, "envoy to hold every cluster", func() error {
				st := ev.Stats(t, `^cluster_manager\.active_clusters$`)
				if got := st["cluster_manager.active_clusters"]; got < int64(n) {
					return fmt.Errorf("%d active clusters", got)
				}
				return nil
			})
			if egress {
				h := epNewHTTP(t, ev, last)
				waitFor(t, 60*time.Second, "the last service through the egress listener", func() error {
					_, err := h.ok()
					return err
				})
				rc := br.app.Cache.Get(xds.RouteType, translate.DefaultEgressName)
				t.Logf("%d services: egress route table %d bytes encoded", n, proto.Size(rc))
			}
			time.Sleep(2 * time.Second) // let Envoy settle before reading its heap
			mem, err := ev.Get("/memory")
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d services, egress %v: envoy /memory %s", n, egress, compactMemory(mem))
			if !egress {
				return
			}
			// One more service: how long until it answers by name.
			rdsStat := `^http\.egress\.rds\.xdsbridge_egress\.update_success$`
			before := ev.Stats(t, rdsStat)
			added := fmt.Sprintf("svc-%05d", n)
			h := epNewHTTP(t, ev, added)
			t0 := time.Now()
			br.writeServices(t, services(n+1))
			for {
				_, code, err := h.get()
				if err == nil && code == http.StatusOK {
					break
				}
				if time.Since(t0) > 60*time.Second {
					t.Fatalf("%s not reachable after 60s: %d %v", added, code, err)
				}
				time.Sleep(5 * time.Millisecond)
			}
			t.Logf("a service added to the file answers through the listener %s later (RDS updates %v → %v)", time.Since(t0).Round(time.Millisecond), before, ev.Stats(t, rdsStat))
			ev.assertNoRejections(t)
		})
	}
}

var memoryField = regexp.MustCompile(`"(allocated|heap_size)":\s*"(\d+)"`)

// compactMemory picks allocated and heap_size (MB) out of Envoy's /memory.
func compactMemory(body string) string {
	var parts []string
	for _, m := range memoryField.FindAllStringSubmatch(body, -1) {
		v, _ := strconv.ParseInt(m[2], 10, 64)
		parts = append(parts, fmt.Sprintf("%s %.1f MB", m[1], float64(v)/1e6))
	}
	return strings.Join(parts, ", ")
}
