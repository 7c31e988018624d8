package e2e

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xdsbridge/xdsbridge/xds"
)

// syncStatusServices is a services file with an HTTP service web (for Envoy) and a
// gRPC service greeter (for grpc-go).
func syncStatusServices(web []*backend, greeter []grpcBackend) string {
	s := servicesYAML("web", web...)
	g := grpcServicesYAML("greeter", greeter...)
	return s + strings.TrimPrefix(g, "services:\n")
}

// debugClients reads /debug/clients: node → its stream's status.
func debugClients(t *testing.T, br *bridge) map[string]xds.ClientStatus {
	t.Helper()
	var cl struct {
		Clients []xds.ClientStatus `json:"clients"`
	}
	br.debugJSON(t, "/debug/clients", &cl)
	out := map[string]xds.ClientStatus{}
	for _, c := range cl.Clients {
		out[c.Node] = c
	}
	return out
}

// allSynced reports whether every node of types has a stream listed
// with exactly the types listed, each SYNCED; it returns each node's
// statuses by short type.
func allSynced(t *testing.T, br *bridge, types map[string][]string) (map[string]map[string]xds.TypeStatus, error) {
	t.Helper()
	cl := debugClients(t, br)
	out := map[string]map[string]xds.TypeStatus{}
	for n := range types {
		c, ok := cl[n]
		if !ok {
			return nil, fmt.Errorf("%s not connected", n)
		}
		out[n] = map[string]xds.TypeStatus{}
		for _, ts := range c.Types {
			out[n][ts.Type] = ts
		}
		if len(c.Types) != len(types[n]) {
			return nil, fmt.Errorf("%s: types %+v, want %v", n, c.Types, types[n])
		}
		for _, typ := range types[n] {
			ts, ok := out[n][typ]
			if !ok {
				return nil, fmt.Errorf("%s: no %s in %+v", n, typ, c.Types)
			}
			if ts.State != xds.Synced {
				return nil, fmt.Errorf("%s %s: %s (acked %s, current %s, behind %v)", n, typ, ts.State, ts.Acked, ts.Current, ts.Behind)
			}
		}
	}
	return out, nil
}

// A real Envoy (delta ADS) and a real grpc-go xDS client (sotw ADS) show
// SYNCED for every type at /debug/clients; after an endpoint change both
// are SYNCED again, their endpoints at a newer acked generation, each with
// a change → ACK latency sample, and the histogram counts them. Traffic
// through both afterwards: 0 failed. No NACK, no Envoy rejection.
func TestClientsSyncedAfterChange(t *testing.T) {
	web := startBackends(t, 2)
	greeter := startGRPCBackends(t, 2)
	br := startBridge(t, syncStatusServices(web[:1], greeter[:1]), "")
	ev := startEnvoy(t, "envoy-delta.yaml", br.app.XDSAddr())
	c := dialXDS(t, br, "greeter")
	ev.waitTraffic(t, "b1")
	c.expect(t, greeter[0])

	const envoyNode, grpcNode = "envoy-delta-1", "grpc-client-1"
	// Envoy's listener is static; grpc-go asks for every type.
	types := map[string][]string{envoyNode: {"clusters", "endpoints"}, grpcNode: {"clusters", "endpoints", "listeners", "routes"}}
	var before map[string]map[string]xds.TypeStatus
	waitFor(t, 10*time.Second, "both clients SYNCED", func() (err error) {
		before, err = allSynced(t, br, types)
		return err
	})
	cl := debugClients(t, br)
	if m := cl[envoyNode].Mode; m != "delta" {
		t.Fatalf("envoy mode %s", m)
	}
	if m := cl[grpcNode].Mode; m != "sotw" {
		t.Fatalf("grpc-go mode %s", m)
	}
	if w := before[envoyNode]["clusters"]; !w.Wildcard {
		t.Fatalf("envoy's CDS is not wildcard: %+v", w)
	}
	if s := before[grpcNode]["endpoints"].Subscribed; s != 1 {
		t.Fatalf("grpc-go subscribes to %d assignments, want 1", s)
	}

	// An endpoint change to both services.
	br.writeServices(t, syncStatusServices(web, greeter))
	ev.waitTraffic(t, "b1", "b2")
	c.expect(t, greeter...)
	var after map[string]map[string]xds.TypeStatus
	waitFor(t, 10*time.Second, "both clients SYNCED with newer endpoints and a latency sample", func() (err error) {
		if after, err = allSynced(t, br, types); err != nil {
			return err
		}
		for _, n := range []string{envoyNode, grpcNode} {
			b, a := before[n]["endpoints"], after[n]["endpoints"]
			ba, _ := strconv.Atoi(b.Acked)
			aa, _ := strconv.Atoi(a.Acked)
			if aa <= ba || a.Samples < 1 || a.LatencyLast <= 0 || a.LatencyP99 < a.LatencyP50 {
				return fmt.Errorf("%s endpoints: acked %s (before %s), %d samples, last %v", n, a.Acked, b.Acked, a.Samples, a.LatencyLast)
			}
		}
		return nil
	})
	for _, n := range []string{envoyNode, grpcNode} {
		a := after[n]["endpoints"]
		t.Logf("%s endpoints: acked %s → %s (current %s), change → ACK last %v p50 %v p99 %v over %d samples",
			n, before[n]["endpoints"].Acked, a.Acked, a.Current, a.LatencyLast, a.LatencyP50, a.LatencyP99, a.Samples)
	}
	// The histogram (no node label) counts the samples.
	resp, err := http.Get("http://" + br.app.AdminAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := regexp.MustCompile(`(?m)^xdsbridge_xds_change_ack_seconds_count\{type="` + regexp.QuoteMeta(xds.EndpointType) + `"\} (\d+)$`).FindSubmatch(body)
	if m == nil {
		t.Fatalf("no xdsbridge_xds_change_ack_seconds_count for endpoints in /metrics")
	}
	if n, _ := strconv.Atoi(string(m[1])); n < 2 {
		t.Fatalf("xdsbridge_xds_change_ack_seconds_count{type=endpoints} = %d, want >= 2 (one per client)", n)
	}
	if strings.Contains(string(body), `xdsbridge_xds_change_ack_seconds_count{node`) {
		t.Fatal("the histogram has a node label")
	}

	// Traffic through both, counted.
	const n = 40
	got, err := ev.hit(n)
	failedEnvoy := n - got["b1"] - got["b2"]
	if err != nil {
		t.Fatalf("envoy requests: %v (%d failed of %d)", err, failedEnvoy, n)
	}
	failedGRPC := 0
	for range n {
		if _, err := c.reached(1); err != nil {
			failedGRPC++
		}
	}
	t.Logf("requests: envoy %d sent, %d failed (%v); grpc-go %d sent, %d failed", n, failedEnvoy, got, n, failedGRPC)
	if failedEnvoy != 0 || failedGRPC != 0 {
		t.Fatalf("failed requests: envoy %d, grpc-go %d", failedEnvoy, failedGRPC)
	}
	ev.assertNoRejections(t)
	assertNoNACKs(t, br)
}
