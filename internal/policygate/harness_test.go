package policygate

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"github.com/hashicorp/consul/api"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	xdsgrpc "google.golang.org/grpc/xds"

	"github.com/xdsbridge/xdsbridge/bridge"
	"github.com/xdsbridge/xdsbridge/config/decode"
	"github.com/xdsbridge/xdsbridge/internal/testcerts"
	"github.com/xdsbridge/xdsbridge/policy"
	"github.com/xdsbridge/xdsbridge/sources"
	"github.com/xdsbridge/xdsbridge/sources/consul"
	"github.com/xdsbridge/xdsbridge/xds"

	"github.com/xdsbridge/xdsbridge/internal/testbin"
)

// The catalog every policy applies to: services with hosts whose metadata
// subsets can select (app.version). Nothing listens on the
// hosts: the clients only have to accept the configuration.
var catalog = map[string][]sources.Endpoint{
	"api":     hosts(20001, "1", "2"),
	"web":     hosts(20011, "1", "2"),
	"greeter": hosts(20021, "1", "1", "2", "3"),
	"back":    hosts(20031, "1", "2"),
	"billing": hosts(20041, "1"),
	// IPv6, a second priority, weights, a hostname, a control byte in
	// metadata, a degraded host.
	"edge": {
		{Address: "::1", Port: 20061, Health: sources.HealthHealthy, Metadata: sources.Metadata{"app": {"version": "1"}}},
		{Address: "127.0.0.1", Port: 20062, Priority: 1, Weight: 7, Hostname: "edge.local", Health: sources.HealthHealthy, Metadata: sources.Metadata{"app": {"version": "2\x01"}}},
		{Address: "127.0.0.1", Port: 20063, Priority: 1, Health: sources.HealthDegraded, Metadata: sources.Metadata{"app": {"version": "2"}}},
	},
}

// marker is the service whose policy the gate changes with every
// policy it publishes (its connect timeout), to know when the merge loop
// has published that policy: the clients are then waited for.
const marker = "gatemark"

func hosts(port uint32, versions ...string) []sources.Endpoint {
	var out []sources.Endpoint
	for i, v := range versions {
		out = append(out, sources.Endpoint{
			Address:  "127.0.0.1",
			Port:     port + uint32(i),
			Locality: sources.Locality{Region: "r1", Zone: "z" + strconv.Itoa(i%2)},
			Health:   sources.HealthHealthy,
			Metadata: sources.Metadata{"app": {"version": v}},
		})
	}
	return out
}

// catalogNames is the catalog's services, sorted.
func catalogNames() []string { return slices.Sorted(maps.Keys(catalog)) }

// A policyCase is one policy: a policy file (YAML) or a list of Consul
// config entries (JSON).
type policyCase struct {
	Name   string
	Consul bool
	Body   []byte
}

// outcome is what became of one policy.
type outcome struct {
	// Refused is the parser's error: the policy was not published.
	Refused string
	// ConsulDiags are what the Consul entries' conversion left out.
	ConsulDiags []string
	// Diags are the translator's diagnostics, as "service: field:
	// message".
	Diags []string
	// NACKs are the clients' rejections, as "client type: detail".
	NACKs []string
	// Stuck says what never settled (a client neither ACKed nor NACKed).
	Stuck string
}

func (o outcome) failed() bool { return len(o.NACKs) > 0 || o.Stuck != "" }

// summary is one line: what became of the policy.
func (o outcome) summary() string {
	switch {
	case o.Refused != "":
		return "refused by the parser: " + fieldKind(o.Refused)
	case o.failed():
		return "rejected: " + strings.Join(causes(o), "; ")
	}
	s := "accepted by every client"
	if len(o.Diags) > 0 {
		s += fmt.Sprintf(", %d translator diagnostics (%s)", len(o.Diags), o.Diags[0])
	}
	if len(o.ConsulDiags) > 0 {
		s += fmt.Sprintf(", %d conversion diagnostics (%s)", len(o.ConsulDiags), o.ConsulDiags[0])
	}
	return s
}

// gate is the served stack and its clients.
type gate struct {
	t      *testing.T
	ctx    context.Context
	loop   *bridge.Loop
	cache  *xds.Cache
	server *xds.Server
	envoys []*testbin.EnvoyProcess
	seq    int
	// window is the settle window (settleWindow).
	window time.Duration
	// nodes are the node ids of the clients, each with its streams once
	// connected.
	nodes []string
}

const grpcNode = "gate-grpc"

// grpcProvider is the certificate provider instance of the grpc-go
// client's bootstrap, which the bridge names in clusters with policy tls.
const grpcProvider = "gate-ca"

// startGate starts the bridge's merge loop and xDS server in-process,
// publishes the catalog and an empty policy, and connects the clients:
// an Envoy over delta ADS, one over SotW ADS (each with a listener per
// catalog service taking its route configuration by RDS) and a grpc-go
// channel to each catalog service.
func startGate(t *testing.T) *gate {
	t.Helper()
	envoyBin := testbin.Envoy(t)
	ctx, cancel := context.WithCancel(context.Background())
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	reg := prometheus.NewRegistry()
	cache, server := xds.NewServing(xds.ServingConfig{Options: xds.Options{Logger: log, Metrics: reg}})
	loop := bridge.New(bridge.Options{
		Sources: []string{"catalog", "policy"},
		Quiet:   time.Millisecond, MaxHold: 5 * time.Millisecond,
		Logger: log, Metrics: reg,
		// The setup gRPC clients need for policy tls (README): without
		// it the bridge says, with a diagnostic, that they NACK.
		GRPCCertificateProvider: grpcProvider,
	}, cache)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	loopDone, serverDone := make(chan error, 1), make(chan error, 1)
	go func() { loopDone <- loop.Run(ctx) }()
	go func() { serverDone <- server.Run(ctx, lis) }()
	t.Cleanup(func() {
		cancel()
		for _, ch := range []chan error{loopDone, serverDone} {
			if err := <-ch; err != nil && err != context.Canceled {
				t.Errorf("stopping: %v", err)
			}
		}
	})
	g := &gate{t: t, ctx: ctx, loop: loop, cache: cache, server: server, window: settleWindow}

	var svcs []sources.Service
	for _, n := range append(catalogNames(), marker) {
		eps := catalog[n]
		if n == marker {
			eps = hosts(20051, "1")
		}
		svcs = append(svcs, sources.Service{Name: n, Endpoints: sources.Normalize(eps)})
	}
	if err := loop.Publish(ctx, sources.Update{Source: "catalog", Services: svcs}); err != nil {
		t.Fatal(err)
	}
	if out := g.publish(&policy.File{Services: map[string]policy.Service{}}, true); out.Stuck != "" {
		t.Fatalf("the empty policy: %+v", out)
	}

	addr := lis.Addr().String()
	for _, mode := range []string{"delta", "sotw"} {
		g.envoys = append(g.envoys, startEnvoy(t, envoyBin, mode, addr))
		g.nodes = append(g.nodes, "gate-envoy-"+mode)
	}
	dialGRPC(t, addr)
	g.nodes = append(g.nodes, grpcNode)
	if out := g.settle(true); out != "" {
		t.Fatalf("the clients did not sync the catalog: %s", out)
	}
	return g
}

// dialGRPC opens a grpc-go channel to each catalog service through
// grpc-go's xDS resolver (its bootstrap defining grpcProvider), and makes
// it connect: it subscribes to the
// service's listener, route configuration, and the clusters and
// assignments the routes name.
func dialGRPC(t *testing.T, addr string) {
	t.Helper()
	caFile := testcerts.NewCA(t, "gate upstream CA").WriteCA(t, t.TempDir(), "ca.pem")
	bootstrap := fmt.Sprintf(`{
  "xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
  "node": {"id": %q, "cluster": "gate"},
  "certificate_providers": {%q: {"plugin_name": "file_watcher", "config": {"ca_certificate_file": %q}}}
}`, addr, grpcNode, grpcProvider, caFile)
	builder, err := xdsgrpc.NewXDSResolverWithConfigForTesting([]byte(bootstrap))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range catalogNames() {
		conn, err := grpc.NewClient("xds:///"+n, grpc.WithResolvers(builder), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		conn.Connect()
		t.Cleanup(func() { conn.Close() })
	}
}

// run publishes one policy case and returns its outcome. After a failure
// it publishes the empty policy, so that the next case starts from a
// state every client holds.
func (g *gate) run(c policyCase) outcome {
	f, out := parseCase(c)
	if f == nil {
		return out
	}
	res := g.publish(f, false)
	res.ConsulDiags = out.ConsulDiags
	if res.failed() {
		g.reset(c.Name)
	}
	return res
}

// reset publishes the empty policy until every client holds it: a
// resource a client rejected may linger a round (a cluster is removed
// after the routes that name it), and be rejected again meanwhile.
func (g *gate) reset(after string) {
	g.t.Helper()
	var out outcome
	for range 3 {
		if out = g.publish(&policy.File{Services: map[string]policy.Service{}}, true); out.Stuck == "" {
			return
		}
	}
	g.t.Fatalf("after %s, the clients did not sync the empty policy: %+v", after, out)
}

// parseCase turns a case into the policy a policy source would publish,
// through the policy file parser or the Consul source's conversion; a nil
// File is a policy refused (out.Refused says why).
func parseCase(c policyCase) (*policy.File, outcome) {
	var out outcome
	if !c.Consul {
		f, err := policy.ParseFile(c.Body)
		if err != nil {
			out.Refused = err.Error()
			return nil, out
		}
		return f, out
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(c.Body, &raws); err != nil {
		out.Refused = "config entries: " + err.Error()
		return nil, out
	}
	var entries []api.ConfigEntry
	for i, r := range raws {
		e, err := api.DecodeConfigEntryFromJSON(r)
		if err != nil {
			// Consul refuses the write: the source never reads it.
			out.Refused = fmt.Sprintf("config entry %d: %v", i, err)
			return nil, out
		}
		entries = append(entries, e)
	}
	f, diags := consul.PolicyOfEntries(entries, "dc1")
	for _, d := range diags {
		out.ConsulDiags = append(out.ConsulDiags, d.String())
	}
	return f, out
}

// publish publishes f (with the marker's policy added) as the policy
// source's whole policy, waits for the merge loop to publish it and for
// every client to ACK or NACK what changed, and returns the NACKs and the
// translator's diagnostics (but the marker's). With synced, a client
// must hold every current version: a NACKED type settles only with
// nothing behind (the rejected version is no longer current).
func (g *gate) publish(f *policy.File, synced bool) outcome {
	g.t.Helper()
	g.seq++
	mark := time.Duration(g.seq%10000+1) * time.Millisecond
	pol := &policy.File{Services: make(map[string]policy.Service, len(f.Services)+1)}
	for k, v := range f.Services {
		pol.Services[k] = v
	}
	pol.Services[marker] = policy.Service{ConnectTimeout: decode.Duration(mark)}

	start := time.Now()
	before := g.nackCounts()
	rejected := g.envoyRejections()
	if err := g.loop.PublishPolicy(g.ctx, sources.PolicyUpdate{Source: "policy", Policy: pol}); err != nil {
		g.t.Fatal(err)
	}
	var out outcome
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, _ := g.cache.Get(xds.ClusterType, marker).(*clusterv3.Cluster)
		if c != nil && c.GetConnectTimeout().AsDuration() == mark {
			break
		}
		if time.Now().After(deadline) {
			out.Stuck = "the merge loop did not publish the policy in 20s"
			return out
		}
		time.Sleep(2 * time.Millisecond)
	}
	out.Stuck = g.settle(synced)
	for _, c := range g.server.ClientStatuses() {
		for _, ts := range c.Types {
			// A NACK of this policy, or an earlier NACK of a version
			// current again (the server does not send a version again to
			// a client that rejected it: the client lacks it).
			if ts.State == xds.Nacked && ts.NACK != nil && (!ts.NACK.At.Before(start) || len(ts.Behind) > 0) {
				out.NACKs = append(out.NACKs, fmt.Sprintf("%s %s: %s", c.Node, ts.Type, ts.NACK.Detail))
			}
		}
		if k := streamKey(c); c.NACKs > before[k] && c.LastNACK != "" && !hasPrefixAny(out.NACKs, c.Node+" ") {
			out.NACKs = append(out.NACKs, fmt.Sprintf("%s: %s", c.Node, c.LastNACK))
		}
	}
	for i, n := range g.envoyRejections() {
		if n > rejected[i] && !hasPrefixAny(out.NACKs, g.nodes[i]+" ") {
			out.NACKs = append(out.NACKs, fmt.Sprintf("%s: update_rejected went from %d to %d", g.nodes[i], rejected[i], n))
		}
	}
	sort.Strings(out.NACKs)
	diags := g.loop.Diagnostics()
	for _, s := range slices.Sorted(maps.Keys(diags)) {
		if s == marker {
			continue
		}
		for _, d := range diags[s] {
			out.Diags = append(out.Diags, d.String())
		}
	}
	return out
}

func hasPrefixAny(list []string, prefix string) bool {
	for _, s := range list {
		if strings.HasPrefix(s, prefix) {
			return true
		}
	}
	return false
}

func streamKey(c xds.ClientStatus) string { return c.Mode + "/" + strconv.FormatInt(c.Stream, 10) }

func (g *gate) nackCounts() map[string]uint64 {
	out := map[string]uint64{}
	for _, c := range g.server.ClientStatuses() {
		out[streamKey(c)] = c.NACKs
	}
	return out
}

// settleWindow is how long every client must stay settled: a client that
// ACKed a listener or cluster asks for the routes or assignments it names
// a moment later. slowSettleWindow is for a second opinion.
const (
	settleWindow     = 60 * time.Millisecond
	slowSettleWindow = 750 * time.Millisecond
)

// settle waits until every client's every type has been SYNCED or NACKED
// (SYNCED with synced) for g.window; it returns "" or what never
// settled.
func (g *gate) settle(synced bool) string {
	deadline := time.Now().Add(15 * time.Second)
	var since time.Time
	for {
		why := g.unsettled(synced)
		now := time.Now()
		switch {
		case why != "":
			since = time.Time{}
		case since.IsZero():
			since = now
		case now.Sub(since) >= g.window:
			// An Envoy asks for a new cluster's assignment once it
			// took the cluster: it is warming meanwhile.
			if why = g.warming(); why == "" {
				return ""
			}
			since = time.Time{}
		}
		if now.After(deadline) {
			if why == "" {
				why = "flapping"
			}
			return why
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// envoyMemory is each Envoy's heap, as its admin /memory says.
func (g *gate) envoyMemory() string {
	var b strings.Builder
	for i, e := range g.envoys {
		var m struct {
			Allocated string `json:"allocated"`
			HeapSize  string `json:"heap_size"`
		}
		body, err := e.Get("/memory")
		if err == nil {
			err = json.Unmarshal([]byte(body), &m)
		}
		if err != nil {
			g.t.Errorf("%s /memory: %v", g.nodes[i], err)
			continue
		}
		fmt.Fprintf(&b, "%s: heap %s bytes, %s allocated\n", g.nodes[i], m.HeapSize, m.Allocated)
	}
	return b.String()
}

// warming says which Envoy has clusters warming, or "".
func (g *gate) warming() string {
	for i, e := range g.envoys {
		if n := e.Stats(g.t, "cluster_manager.warming_clusters")["cluster_manager.warming_clusters"]; n > 0 {
			return fmt.Sprintf("%s: %d clusters warming", g.nodes[i], n)
		}
	}
	return ""
}

// unsettled says which client is not settled, or "".
func (g *gate) unsettled(synced bool) string {
	seen := map[string]bool{}
	for _, c := range g.server.ClientStatuses() {
		seen[c.Node] = true
		// Envoy's listeners are static: it asks for the other three types.
		if want := 4 - btoi(strings.HasPrefix(c.Node, "gate-envoy-")); len(c.Types) < want {
			return fmt.Sprintf("%s %s stream %d: %d types", c.Node, c.Mode, c.Stream, len(c.Types))
		}
		for _, ts := range c.Types {
			// A client that NACKed and was sent nothing since stays
			// NACKED while it holds every current version (Behind empty).
			if ts.State != xds.Synced && (ts.State != xds.Nacked || synced && len(ts.Behind) > 0) {
				return fmt.Sprintf("%s %s: %s behind %v", c.Node, ts.Type, ts.State, ts.Behind)
			}
		}
	}
	for _, n := range g.nodes {
		if !seen[n] {
			return n + " not connected"
		}
	}
	return ""
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// envoyRejections is each Envoy's sum of update_rejected counters, in
// g.envoys' order.
func (g *gate) envoyRejections() []int64 {
	out := make([]int64, len(g.envoys))
	for i, e := range g.envoys {
		for _, v := range e.Stats(g.t, "update_rejected") {
			out[i] += v
		}
	}
	return out
}

// startEnvoy starts an Envoy whose ADS (mode delta or sotw) is the
// bridge at xdsAddr, with a listener per catalog service taking the
// route configuration of that name by RDS, and waits for its admin.
func startEnvoy(t *testing.T, bin, mode, xdsAddr string) *testbin.EnvoyProcess {
	t.Helper()
	host, port, _ := net.SplitHostPort(xdsAddr)
	apiType := "GRPC"
	if mode == "delta" {
		apiType = "DELTA_GRPC"
	}
	var listeners []string
	for _, n := range catalogNames() {
		listeners = append(listeners, fmt.Sprintf(`{"name": %q,
  "address": {"socket_address": {"address": "127.0.0.1", "port_value": 0}},
  "filter_chains": [{"filters": [{"name": "envoy.filters.network.http_connection_manager", "typed_config": {
    "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
    "stat_prefix": %q,
    "rds": {"route_config_name": %q, "config_source": {"ads": {}, "resource_api_version": "V3"}},
    "http_filters": [{"name": "envoy.filters.http.router", "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}]}}]}]}`, n, n, n))
	}
	bootstrap := fmt.Sprintf(`{
"node": {"id": "gate-envoy-%s", "cluster": "gate"},
"admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": 0}}},
"dynamic_resources": {
  "ads_config": {"api_type": %q, "transport_api_version": "V3", "set_node_on_first_message_only": true,
    "grpc_services": [{"envoy_grpc": {"cluster_name": "xdsbridge"}}]},
  "cds_config": {"resource_api_version": "V3", "ads": {}}},
"static_resources": {
  "listeners": [%s],
  "clusters": [{"name": "xdsbridge", "type": "STATIC", "connect_timeout": "1s",
    "typed_extension_protocol_options": {"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
      "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
      "explicit_http_config": {"http2_protocol_options": {}}}},
    "load_assignment": {"cluster_name": "xdsbridge", "endpoints": [{"lb_endpoints": [{"endpoint": {"address": {"socket_address": {"address": %q, "port_value": %s}}}}]}]}}]}
}`, mode, apiType, strings.Join(listeners, ",\n"), host, port)
	dir := t.TempDir()
	path := filepath.Join(dir, "envoy.json")
	if err := os.WriteFile(path, []byte(bootstrap), 0o644); err != nil {
		t.Fatal(err)
	}
	return testbin.StartEnvoy(t, bin, path)
}
