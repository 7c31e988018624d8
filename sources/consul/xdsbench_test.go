package consul_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/xdsbridge/xdsbridge/config"
	"github.com/xdsbridge/xdsbridge/internal/app"
	"github.com/xdsbridge/xdsbridge/sources"
	"github.com/xdsbridge/xdsbridge/sources/consul"
)

func init() { consul.SetXDSBridge(startXDSBridge) }

// startXDSBridge runs a bridge built by app.New on loopback ports with one
// Consul source (the defaults but for the excluded "consul" service, and
// feed_rate_limit from XDSBRIDGE_CONSUL_BENCH_FEED_RATE when set), and
// a delta xDS client that subscribes to every cluster (wildcard CDS) and
// its EDS, as Envoy does, and reports the health of each cluster's host on
// the benchmark's instance 0 (BenchNodeAddr) to obs.
func startXDSBridge(t testing.TB, agentAddr string, obs consul.FlipObserver) func() map[string]int {
	extra := ""
	if r := os.Getenv("XDSBRIDGE_CONSUL_BENCH_FEED_RATE"); r != "" {
		extra = "\n      feed_rate_limit: " + r
	}
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
sources:
  - name: consul
    consul:
      address: %q
      services: {exclude: [consul]}%s
`, agentAddr, extra)), t.TempDir(), app.SourceTypeNames())
	if err != nil {
		t.Fatal(err)
	}
	cfg.XDS.Listen, cfg.Admin.Listen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Logging.Level = "info"
	a, err := app.New(cfg, app.NewLogger(cfg.Logging, logWriter{t}))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() { done <- a.Run(ctx) }()
	conn, err := grpc.NewClient(a.XDSAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	go func() { done <- deltaClient(ctx, conn, consul.BenchNodeAddr(), obs) }()
	t.Cleanup(func() {
		cancel()
		for range 2 {
			if err := <-done; err != nil && ctx.Err() == nil {
				t.Errorf("bridge or xDS client: %v", err)
			}
		}
		conn.Close()
	})
	admin := "http://" + a.AdminAddr() + "/metrics"
	return func() map[string]int { return consulRequests(t, admin) }
}

// deltaClient runs one delta ADS stream: wildcard CDS, and EDS for every
// cluster received; each EDS response's health of the host at addr is
// reported to obs when received.
func deltaClient(ctx context.Context, conn *grpc.ClientConn, addr string, obs consul.FlipObserver) error {
	st, err := discovery.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		return err
	}
	node := &core.Node{Id: "consul-bench", Cluster: "consul-bench"}
	if err := st.Send(&discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: resource.ClusterType}); err != nil {
		return err
	}
	subscribed := map[string]bool{}
	for {
		r, err := st.Recv()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		now := time.Now()
		var sub []string
		switch r.GetTypeUrl() {
		case resource.ClusterType:
			for _, res := range r.GetResources() {
				var c cluster.Cluster
				if err := proto.Unmarshal(res.GetResource().GetValue(), &c); err != nil {
					return err
				}
				name := c.GetName()
				if sn := c.GetEdsClusterConfig().GetServiceName(); sn != "" {
					name = sn
				}
				if !subscribed[name] {
					subscribed[name] = true
					sub = append(sub, name)
				}
			}
		case resource.EndpointType:
			for _, res := range r.GetResources() {
				var cla endpoint.ClusterLoadAssignment
				if err := proto.Unmarshal(res.GetResource().GetValue(), &cla); err != nil {
					return err
				}
				h := sources.HealthUnknown
				for _, g := range cla.GetEndpoints() {
					for _, lb := range g.GetLbEndpoints() {
						if lb.GetEndpoint().GetAddress().GetSocketAddress().GetAddress() == addr {
							h = sources.HealthStatus(lb.GetHealthStatus())
						}
					}
				}
				obs.Observe(cla.GetClusterName(), h, now)
			}
		}
		if err := st.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: r.GetTypeUrl(), ResponseNonce: r.GetNonce()}); err != nil {
			return err
		}
		if len(sub) > 0 {
			if err := st.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNamesSubscribe: sub}); err != nil {
				return err
			}
		}
	}
}

// logWriter writes the bridge's log lines to the test's log.
type logWriter struct{ t testing.TB }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

var requestsLine = regexp.MustCompile(`^xdsbridge_consul_requests_total\{([^}]*)\} (\S+)$`)
var endpointLabel = regexp.MustCompile(`endpoint="([^"]*)"`)

// consulRequests reads the bridge's xdsbridge_consul_requests_total, summed
// by endpoint.
func consulRequests(t testing.TB, url string) map[string]int {
	resp, err := http.Get(url)
	if err != nil {
		t.Errorf("reading %s: %v", url, err)
		return nil
	}
	defer resp.Body.Close()
	out := map[string]int{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		m := requestsLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		ep := endpointLabel.FindStringSubmatch(m[1])
		v, err := strconv.ParseFloat(m[2], 64)
		if ep == nil || err != nil {
			continue
		}
		out[ep[1]] += int(v)
	}
	return out
}
