package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestEnvoySotwAssignmentsInParts: a sotw Envoy whose assignments
// (400 clusters of 60 endpoints, ~560 KB) are far over a response's bound
// gets them in parts, each following its ACK, and ends with every cluster
// holding every endpoint; a change made while the parts go out reaches it
// too, with no NACK.
func TestEnvoySotwAssignmentsInParts(t *testing.T) {
	const services, endpoints = 400, 60
	bs := startBackends(t, 1)
	catalog := func(extra int) string {
		var sb strings.Builder
		sb.WriteString(servicesYAML("web", bs[0]))
		for i := range services {
			fmt.Fprintf(&sb, "  svc-%03d:\n    endpoints:\n", i)
			n := endpoints
			if i == 0 {
				n += extra
			}
			for j := range n {
				fmt.Fprintf(&sb, "      - {address: 10.%d.%d.%d, port: 8080}\n", 1+i/250, i%250, j)
			}
		}
		return sb.String()
	}
	br := startBridge(t, catalog(0), "")
	ev := startEnvoy(t, "envoy-sotw.yaml", br.app.XDSAddr())
	// A change while the first sync goes on.
	br.writeServices(t, catalog(5))
	ev.waitTraffic(t, "b1")
	waitFor(t, 30*time.Second, "every cluster to hold its endpoints", func() error {
		body, err := ev.Get("/clusters")
		if err != nil {
			return err
		}
		hosts := hostsPerCluster(body)
		for i := range services {
			want := endpoints
			if i == 0 {
				want += 5
			}
			if got := hosts[fmt.Sprintf("svc-%03d", i)]; got != want {
				return fmt.Errorf("svc-%03d: %d hosts, want %d", i, got, want)
			}
		}
		return nil
	})
	ev.assertNoRejections(t)
	if n := br.app.XDS.NACKs(); n != 0 {
		t.Fatalf("bridge counted %d NACKs", n)
	}
}

// hostsPerCluster counts the hosts of each cluster in Envoy's /clusters
// text.
func hostsPerCluster(body string) map[string]int {
	out := map[string]int{}
	for _, line := range strings.Split(body, "\n") {
		parts := strings.Split(line, "::")
		if len(parts) >= 3 && strings.Contains(parts[1], ":") && parts[2] == "cx_active" {
			out[parts[0]]++
		}
	}
	return out
}
