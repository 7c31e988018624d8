package e2e

import (
	"context"
	"fmt"
	"os"
	"sort"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/hashicorp/consul/api"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/xdsbridge/xdsbridge/sources/consul/consultest"
)

// TestConsulFlipLatency measures, over 100 flips of one TTL check, the time
// from the Consul API call to a delta xDS client receiving the changed
// endpoint health: the whole path (blocking query, merge loop debounce,
// cache, server). A figure, not a timed assertion: it only checks that every
// flip arrives. Run: XDSBRIDGE_CONSUL_E2E_BENCH=1 go test -run ConsulFlipLatency -v ./internal/e2e/
func TestConsulFlipLatency(t *testing.T) {
	flips := 10
	if os.Getenv("XDSBRIDGE_CONSUL_E2E_BENCH") == "1" {
		flips = 100
	}
	a := consultest.StartAgent(t, "dc1")
	bs := startBackends(t, 1)
	registerTTL(t, a, "web-1", bs[0], api.HealthPassing)
	br := startBridge(t, "services: {}\n", consulSource(a))

	conn, err := grpc.NewClient(br.app.XDSAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := discovery.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	health := make(chan core.HealthStatus, 16)
	go func() {
		for {
			r, err := st.Recv()
			if err != nil {
				close(health)
				return
			}
			for _, res := range r.Resources {
				var cla endpoint.ClusterLoadAssignment
				if res.Resource.UnmarshalTo(&cla) == nil && len(cla.Endpoints) > 0 {
					health <- cla.Endpoints[0].LbEndpoints[0].HealthStatus
				}
			}
			st.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: r.TypeUrl, ResponseNonce: r.Nonce})
		}
	}()
	if err := st.Send(&discovery.DeltaDiscoveryRequest{Node: &core.Node{Id: "bench"}, TypeUrl: "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment", ResourceNamesSubscribe: []string{"web"}}); err != nil {
		t.Fatal(err)
	}
	wait := func(want core.HealthStatus) time.Time {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			select {
			case h, ok := <-health:
				if !ok {
					t.Fatal("stream closed")
				}
				if h == want {
					return time.Now()
				}
			case <-deadline:
				t.Fatalf("no update to %s within 10s", want)
			}
		}
	}
	wait(core.HealthStatus_HEALTHY)

	var lat []time.Duration
	status := []string{api.HealthCritical, api.HealthPassing}
	want := []core.HealthStatus{core.HealthStatus_UNHEALTHY, core.HealthStatus_HEALTHY}
	for i := 0; i < flips; i++ {
		// Space flips beyond the source's per-watch rate limit (2 queries/s,
		// burst 5): back-to-back flips would measure the limiter, not the path.
		time.Sleep(600 * time.Millisecond)
		start := time.Now()
		a.TTL("web-1-ttl", status[i%2])
		lat = append(lat, wait(want[i%2]).Sub(start))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(p float64) time.Duration { return lat[int(p*float64(len(lat)-1))] }
	fmt.Printf("consul check flip → delta client (%d flips 600ms apart, debounce quiet %s): p50 %s  p99 %s  max %s\n",
		flips, br.app.Config.Debounce.Quiet.D(), pct(0.5).Round(time.Millisecond), pct(0.99).Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond))
}
