package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/xdsbridge/xdsbridge/sources/consul/consultest"
)

// The policy tests of this file run the bridge with a policy file next to
// a discovery source, and a real Envoy whose listener takes the service's
// route configuration by RDS over ADS (envoy-sotw.yaml with envoyRDS, the
// route configuration named after the service). Clients address the
// service by name (the Host header, the gRPC authority): the virtual host's
// domain, no policy `domains` needed.

// epEnvoyRDS starts an Envoy whose listener takes the route configuration
// of service from the bridge.
func epEnvoyRDS(t *testing.T, br *bridge, service string) *envoy {
	t.Helper()
	rds := strings.Replace(envoyRDS[1], "route_config_name: greeter", "route_config_name: "+service, 1)
	return startEnvoyCerts(t, "envoy-sotw.yaml", br.app.XDSAddr(), "", envoyRDS[0], rds)
}

// epActiveCluster returns Envoy's active dynamic cluster named name as
// compact JSON, or an error if it has none.
func epActiveCluster(e *envoy, name string) (string, error) {
	body, err := e.Get("/config_dump?resource=dynamic_active_clusters")
	if err != nil {
		return "", err
	}
	var dump struct {
		Configs []struct {
			Cluster json.RawMessage `json:"cluster"`
		} `json:"configs"`
	}
	if err := json.Unmarshal([]byte(body), &dump); err != nil {
		return "", err
	}
	for _, c := range dump.Configs {
		var n struct {
			Name string `json:"name"`
		}
		if json.Unmarshal(c.Cluster, &n) == nil && n.Name == name {
			var b bytes.Buffer
			if err := json.Compact(&b, c.Cluster); err != nil {
				return "", err
			}
			return b.String(), nil
		}
	}
	return "", fmt.Errorf("no active cluster %q", name)
}

// epHealthFlags returns, for each host of a cluster in Envoy's /clusters,
// its health_flags.
func epHealthFlags(t *testing.T, e *envoy, cluster string) map[string]string {
	t.Helper()
	body, err := e.Get("/clusters")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(body, "\n") {
		rest, ok := strings.CutPrefix(line, cluster+"::")
		if !ok {
			continue
		}
		if p := strings.Split(rest, "::"); len(p) == 3 && p[1] == "health_flags" {
			out[p[0]] = p[2]
		}
	}
	return out
}

// epWaitHosts waits until Envoy's /clusters lists exactly want for cluster.
func epWaitHosts(t *testing.T, e *envoy, cluster string, want []string) {
	t.Helper()
	waitFor(t, 20*time.Second, fmt.Sprintf("envoy cluster %s hosts %v", cluster, want), func() error {
		if got := e.clusterHosts(t, cluster); strings.Join(got, ",") != strings.Join(want, ",") {
			return fmt.Errorf("hosts %v", got)
		}
		return nil
	})
}

// epHTTP sends requests through an Envoy listener with Host: the service,
// over keep-alive connections.
type epHTTP struct {
	listener, host string
	client         *http.Client
}

func epNewHTTP(t *testing.T, e *envoy, host string) *epHTTP {
	tr := &http.Transport{MaxIdleConnsPerHost: 4}
	t.Cleanup(tr.CloseIdleConnections)
	return &epHTTP{listener: e.listener, host: host, client: &http.Client{Timeout: 5 * time.Second, Transport: tr}}
}

// get sends one GET / with the headers given (name, value pairs) and
// returns the answering backend's name (the body) and the status.
func (h *epHTTP) get(headers ...string) (string, int, error) {
	req, err := http.NewRequest(http.MethodGet, "http://"+h.listener+"/", nil)
	if err != nil {
		return "", 0, err
	}
	req.Host = h.host
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), resp.StatusCode, err
}

// ok is get, with any status but 200 an error.
func (h *epHTTP) ok(headers ...string) (string, error) {
	name, code, err := h.get(headers...)
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("status %d: %q", code, name)
	}
	return name, err
}

// epFirstError is the first failed record's error, for the log.
func epFirstError(recs []rpcRecord) error {
	for _, r := range recs {
		if r.err != nil {
			return fmt.Errorf("at %s: %w", r.start.Format("15:04:05.000000"), r.err)
		}
	}
	return nil
}

// TestEnvoyGRPCUpstreamHTTP2: gRPC clients call real gRPC servers through
// Envoy. Without policy the cluster speaks HTTP/1.1 to them and every call
// fails; a policy file giving the service `protocol: grpc` makes it HTTP/2
// (explicit_http_config.http2_protocol_options) and the calls pass, over
// HTTP/2 connections only.
func TestEnvoyGRPCUpstreamHTTP2(t *testing.T) {
	bs := startGRPCBackends(t, 3)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "services.yaml"), []byte(grpcServicesYAML("greeter", bs...)), 0o644); err != nil {
		t.Fatal(err)
	}
	br, policyPath := startPolicyBridge(t, dir, "", staticSource, "services: {}\n")
	ev := epEnvoyRDS(t, br, "greeter")
	var hosts []string
	for _, b := range bs {
		hosts = append(hosts, b.addr)
	}
	sort.Strings(hosts)
	epWaitHosts(t, ev, "greeter", hosts)

	conn, err := grpc.NewClient("passthrough:///"+ev.listener,
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithAuthority("greeter"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	hc := healthpb.NewHealthClient(conn)
	// call is one health check through Envoy: "ok" when it passes.
	call := func() (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			return "", err
		}
		return "ok", nil
	}
	cx := func() (h1, h2 int64) {
		st := ev.Stats(t, `^cluster\.greeter\.upstream_cx_http[12]_total$`)
		return st["cluster.greeter.upstream_cx_http1_total"], st["cluster.greeter.upstream_cx_http2_total"]
	}

	// Control: the default cluster speaks HTTP/1.1 to gRPC servers, which
	// close the connection: every call fails, UNAVAILABLE.
	const control = 50
	codesSeen := map[codes.Code]int{}
	for range control {
		if _, err := call(); err == nil {
			t.Fatal("a gRPC call through Envoy passed with an HTTP/1.1 cluster; the control proves nothing")
		} else {
			codesSeen[status.Code(err)]++
		}
	}
	h1, h2 := cx()
	t.Logf("control, no policy: %d calls, %d failed %v; upstream_cx_http1_total %d, http2_total %d", control, control, codesSeen, h1, h2)
	if codesSeen[codes.Unavailable] != control || h1 == 0 || h2 != 0 {
		t.Fatalf("control: want %d UNAVAILABLE calls over HTTP/1.1 connections only; got %v, http1 %d, http2 %d", control, codesSeen, h1, h2)
	}

	// protocol: grpc, under traffic.
	tr := startCalls(call)
	defer tr.end()
	t0 := time.Now()
	writePolicy(t, policyPath, "services:\n  greeter:\n    protocol: grpc\n")
	// Applied: a call passed (over HTTP/1.1 none can). The one connection
	// to Envoy is one worker's, which now has the new cluster.
	first := -1
	waitFor(t, 10*time.Second, "a gRPC call to pass after protocol: grpc", func() error {
		for i, r := range tr.snapshot() {
			if r.err == nil {
				first = i
				return nil
			}
		}
		return fmt.Errorf("no call passed yet")
	})
	recs := tr.snapshot()
	applied := recs[first].start
	h1Base, _ := cx()
	const n = 300
	waitFor(t, 20*time.Second, fmt.Sprintf("%d calls after the change", n), func() error {
		if got := len(tr.snapshot()) - first; got < n {
			return fmt.Errorf("%d calls", got)
		}
		return nil
	})
	recs = tr.end()
	before, after := tally(recs[:first]), tally(recs[first:])
	h1, h2 = cx()
	cluster, err := epActiveCluster(ev, "greeter")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("protocol: grpc: first passing call %v after the write (%d calls before it: %v); after: %d calls %v; upstream_cx_http1_total %d (%d when applied), http2_total %d",
		applied.Sub(t0).Round(time.Millisecond), first, before, len(recs)-first, after, h1, h1Base, h2)
	if !strings.Contains(cluster, "http2_protocol_options") {
		t.Errorf("Envoy's active cluster greeter has no http2_protocol_options: %s", cluster)
	}
	if after["failed"] != 0 || after["ok"] < n {
		t.Errorf("after the change: %v; want at least %d calls, none failed (first: %v)", after, n, epFirstError(recs[first:]))
	}
	if h2 == 0 || h1 != h1Base {
		t.Errorf("upstream connections: http1_total %d (was %d when applied), http2_total %d; want HTTP/2 only", h1, h1Base, h2)
	}
	ev.assertNoRejections(t)
	assertNoNACKs(t, br)
}

// epStatusBackend is an HTTP server answering every request with its name
// and one status, counting them.
type epStatusBackend struct {
	name string
	port uint32
	hits atomic.Int64
}

func epStartStatusBackend(t *testing.T, name string, code int) *epStatusBackend {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &epStatusBackend{name: name, port: uint32(lis.Addr().(*net.TCPAddr).Port)}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.hits.Add(1)
		w.WriteHeader(code)
		io.WriteString(w, name)
	}), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(lis)
	t.Cleanup(func() { srv.Close() })
	return b
}

func (b *epStatusBackend) host() string { return fmt.Sprintf("127.0.0.1:%d", b.port) }

// The policies of TestEnvoyOutlierDetectionEjects: the same cluster
// without and with outlier detection. consecutive_5xx is enforced at 100%
// (Envoy's default, set here explicitly; translate/POLICY.md: the
// translator sends enforcing_consecutive_5xx as given); with 3 hosts, one
// ejection is 33% of them, within max_ejection_percent. Success-rate
// ejection needs 5 hosts (Envoy's success_rate_minimum_hosts) and
// failure-percentage ejection is not enforced by default: only the 5xx
// streak ejects.
const (
	epPolicyNoOutlier = `services:
  web:
    protocol: http
    connect_timeout: 1s
`
	epPolicyOutlier = epPolicyNoOutlier + `    outlier_detection:
      consecutive_5xx: 3
      enforcing_consecutive_5xx: 100
      interval: 100ms
      base_ejection_time: 5m
      max_ejection_percent: 50
`
)

// TestEnvoyOutlierDetectionEjects: of three hosts, one answers 500 to
// everything. Without outlier detection Envoy keeps sending it its share;
// with the policy's outlier_detection Envoy ejects exactly that host and
// the requests after the ejection all pass.
func TestEnvoyOutlierDetectionEjects(t *testing.T) {
	good := []*epStatusBackend{epStartStatusBackend(t, "b1", http.StatusOK), epStartStatusBackend(t, "b2", http.StatusOK)}
	bad := epStartStatusBackend(t, "bad", http.StatusInternalServerError)
	all := append(append([]*epStatusBackend(nil), good...), bad)
	dir := t.TempDir()
	var sb strings.Builder
	sb.WriteString("services:\n  web:\n    endpoints:\n")
	var hosts []string
	for _, b := range all {
		fmt.Fprintf(&sb, "      - {address: 127.0.0.1, port: %d}\n", b.port)
		hosts = append(hosts, b.host())
	}
	sort.Strings(hosts)
	if err := os.WriteFile(filepath.Join(dir, "services.yaml"), []byte(sb.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	br, policyPath := startPolicyBridge(t, dir, "", staticSource, epPolicyNoOutlier)
	ev := epEnvoyRDS(t, br, "web")
	epWaitHosts(t, ev, "web", hosts)
	h := epNewHTTP(t, ev, "web")
	ejected := func() int64 {
		return ev.Stats(t, `^cluster\.web\.outlier_detection\.ejections_enforced_total$`)["cluster.web.outlier_detection.ejections_enforced_total"]
	}

	// Control: no outlier detection, the bad host keeps its share.
	const control = 300
	got := map[string]int{}
	for range control {
		name, code, err := h.get()
		if err != nil {
			t.Fatal(err)
		}
		got[fmt.Sprintf("%s %d", name, code)]++
	}
	t.Logf("control, no outlier_detection: %d requests: %v; ejections_enforced_total %d", control, got, ejected())
	if got["bad 500"] < control/10 || got["b1 200"]+got["b2 200"]+got["bad 500"] != control {
		t.Fatalf("control: %v; want the bad host to answer a share (at least %d) of %d requests", got, control/10, control)
	}
	if n := ejected(); n != 0 {
		t.Fatalf("control: ejections_enforced_total %d without outlier detection", n)
	}
	for host, f := range epHealthFlags(t, ev, "web") {
		if f != "healthy" {
			t.Fatalf("control: host %s has health_flags %s", host, f)
		}
	}

	// Outlier detection: requests until Envoy ejects.
	t0 := time.Now()
	writePolicy(t, policyPath, epPolicyOutlier)
	waitFor(t, 10*time.Second, "Envoy's cluster web to have outlier_detection", func() error {
		c, err := epActiveCluster(ev, "web")
		if err == nil && !strings.Contains(c, `"consecutive_5xx":3`) {
			err = fmt.Errorf("cluster web: %s", c)
		}
		return err
	})
	appliedAt := time.Since(t0)
	toEject := map[string]int{}
	waitFor(t, 10*time.Second, "Envoy to eject a host", func() error {
		if ejected() > 0 {
			return nil
		}
		for range 10 {
			name, code, err := h.get()
			if err != nil {
				return err
			}
			toEject[fmt.Sprintf("%s %d", name, code)]++
		}
		return fmt.Errorf("no ejection yet")
	})
	ejectedAt := time.Since(t0)
	flags := epHealthFlags(t, ev, "web")
	var out []string
	for host, f := range flags {
		if strings.Contains(f, "failed_outlier_check") {
			out = append(out, host)
		}
	}
	st := ev.Stats(t, `^cluster\.web\.outlier_detection\.`)
	nonzero := map[string]int64{}
	for k, v := range st {
		if v != 0 {
			nonzero[strings.TrimPrefix(k, "cluster.web.outlier_detection.")] = v
		}
	}
	t.Logf("outlier_detection: in Envoy %v after the write, ejection %v after; %v requests until then; outlier_detection stats not 0: %v; health_flags %v",
		appliedAt.Round(time.Millisecond), ejectedAt.Round(time.Millisecond), toEject, nonzero, flags)
	if len(out) != 1 || out[0] != bad.host() {
		t.Fatalf("hosts failing the outlier check: %v; want exactly the bad host %s", out, bad.host())
	}
	if st["cluster.web.outlier_detection.ejections_enforced_consecutive_5xx"] < 1 || st["cluster.web.outlier_detection.ejections_active"] != 1 {
		t.Fatalf("outlier stats %v; want ejections_enforced_consecutive_5xx >= 1, ejections_active 1", st)
	}

	// After the ejection: every request passes and none reaches the bad
	// host.
	const n = 300
	badBefore, tAfter := bad.hits.Load(), time.Now()
	got = map[string]int{}
	failed := 0
	var firstErr error
	for range n {
		name, err := h.ok()
		if err != nil {
			failed++
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		got[name]++
	}
	badAfter := bad.hits.Load() - badBefore
	t.Logf("after the ejection: %d requests in %v, %d failed, per backend %v; the bad host received %d", n, time.Since(tAfter).Round(time.Millisecond), failed, got, badAfter)
	if failed != 0 || badAfter != 0 || got["b1"] == 0 || got["b2"] == 0 {
		t.Errorf("after the ejection: %d failed (first: %v), the bad host received %d, per backend %v; want none failed, none to the bad host, both good hosts used", failed, firstErr, badAfter, got)
	}
	ev.assertNoRejections(t)
	assertNoNACKs(t, br)
}

// epRegister registers service web's instance id on b with tags and a
// passing TTL check.
func epRegister(t *testing.T, a *consultest.Agent, id string, b *backend, tags ...string) {
	t.Helper()
	a.Register(&api.AgentServiceRegistration{
		ID: id, Name: "web", Address: "127.0.0.1", Port: int(b.port), Tags: tags,
		Check: &api.AgentServiceCheck{CheckID: id + "-ttl", TTL: "10m", Status: api.HealthPassing},
	})
}

// epPolicySubsets selects web's subsets by Consul tag (the filter's view
// of a Consul host: Service.Tags) and routes x-version: v2 to v2.
const epPolicySubsets = `services:
  web:
    subsets:
      v1: {filter: '"v1" in Service.Tags'}
      v2: {filter: '"v2" in Service.Tags'}
    default_subset: v1
    routes:
      - match:
          prefix: /
          headers: [{name: x-version, exact: v2}]
        destination: {subset: v2}
`

// TestEnvoySubsetRoutingOnConsulTags: hosts registered in a real Consul
// with tags v1 or v2; a policy file's subsets select them by tag and a
// header routes to v2. Envoy sends x-version: v2 requests to v2 hosts
// only, others to v1 only; re-tagging a host in Consul moves it between
// subsets under traffic without a failed request.
func TestEnvoySubsetRoutingOnConsulTags(t *testing.T) {
	a := consultest.StartAgent(t, "dc1")
	bs := startBackends(t, 4)
	epRegister(t, a, "web-1", bs[0], "v1")
	epRegister(t, a, "web-2", bs[1], "v1")
	epRegister(t, a, "web-3", bs[2], "v2")
	epRegister(t, a, "web-4", bs[3], "v2")
	br, _ := startPolicyBridge(t, t.TempDir(), "", consulSource(a), epPolicySubsets)
	ev := epEnvoyRDS(t, br, "web")
	epWaitHosts(t, ev, "web/v1", hostsOf(bs[0], bs[1]))
	epWaitHosts(t, ev, "web/v2", hostsOf(bs[2], bs[3]))
	h := epNewHTTP(t, ev, "web")
	v2 := []string{"x-version", "v2"}

	// measure sends n requests with the header given, n without, and
	// returns the per-backend counts of each; any failure is fatal.
	measure := func(what string, n int) (withHdr, without map[string]int) {
		withHdr, without = map[string]int{}, map[string]int{}
		for range n {
			name, err := h.ok(v2...)
			if err != nil {
				t.Fatalf("%s: x-version: v2 request: %v", what, err)
			}
			withHdr[name]++
			name, err = h.ok()
			if err != nil {
				t.Fatalf("%s: request without x-version: %v", what, err)
			}
			without[name]++
		}
		t.Logf("%s: %d requests with x-version: v2: %v; %d without: %v; 0 failed", what, n, withHdr, n, without)
		return withHdr, without
	}
	only := func(got map[string]int, want ...string) error {
		var names []string
		for name := range got {
			names = append(names, name)
		}
		sort.Strings(names)
		sort.Strings(want)
		if strings.Join(names, ",") != strings.Join(want, ",") {
			return fmt.Errorf("reached %v, want exactly %v", got, want)
		}
		return nil
	}
	const n = 150
	withHdr, without := measure("tags v1: b1 b2, v2: b3 b4", n)
	if err := only(withHdr, "b3", "b4"); err != nil {
		t.Errorf("x-version: v2: %v", err)
	}
	if err := only(without, "b1", "b2"); err != nil {
		t.Errorf("without x-version: %v", err)
	}

	// web-2 (b2) re-registered with tag v2, under traffic both ways.
	trV2 := startCalls(func() (string, error) { return h.ok(v2...) })
	defer trV2.end()
	trV1 := startCalls(func() (string, error) { return h.ok() })
	defer trV1.end()
	waitFor(t, 10*time.Second, "traffic both ways", func() error {
		if len(trV2.snapshot()) < 50 || len(trV1.snapshot()) < 50 {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	t0 := time.Now()
	epRegister(t, a, "web-2", bs[1], "v2")
	epWaitHosts(t, ev, "web/v2", hostsOf(bs[1], bs[2], bs[3]))
	hostsMoved := time.Since(t0)
	epWaitHosts(t, ev, "web/v1", hostsOf(bs[0]))
	var reachedB2 time.Duration
	waitFor(t, 10*time.Second, "an x-version: v2 request to reach b2", func() error {
		for _, r := range trV2.snapshot() {
			if r.err == nil && r.subset == "b2" {
				reachedB2 = r.start.Sub(t0)
				return nil
			}
		}
		return fmt.Errorf("not yet")
	})
	// After the move b2 takes no more requests without the header: 100 in
	// a row reach b1.
	const streak = 100
	waitFor(t, 10*time.Second, fmt.Sprintf("%d requests in a row without x-version to b1", streak), func() error {
		recs := trV1.snapshot()
		if len(recs) < streak {
			return fmt.Errorf("%d requests", len(recs))
		}
		if got := tally(recs[len(recs)-streak:]); got["b1"] != streak {
			return fmt.Errorf("last %d: %v", streak, got)
		}
		return nil
	})
	recsV2, recsV1 := trV2.end(), trV1.end()
	t.Logf("re-tag web-2 v1 → v2: Envoy's web/v2 hosts changed %v after the registration, first x-version: v2 request to b2 %v after; during the change: with x-version: v2 %d requests %v, without %d requests %v",
		hostsMoved.Round(time.Millisecond), reachedB2.Round(time.Millisecond), len(recsV2), tally(recsV2), len(recsV1), tally(recsV1))
	if f := tally(recsV2)["failed"] + tally(recsV1)["failed"]; f != 0 {
		t.Errorf("%d requests failed during the change; want none (first with the header: %v; without: %v)", f, epFirstError(recsV2), epFirstError(recsV1))
	}
	for _, r := range recsV1 {
		if r.err == nil && r.subset != "b1" && r.subset != "b2" {
			t.Errorf("a request without x-version reached %q during the change", r.subset)
			break
		}
	}
	for _, r := range recsV2 {
		if r.err == nil && r.subset == "b1" {
			t.Errorf("an x-version: v2 request reached b1 during the change")
			break
		}
	}

	withHdr, without = measure("tags v1: b1, v2: b2 b3 b4", n)
	if err := only(withHdr, "b2", "b3", "b4"); err != nil {
		t.Errorf("x-version: v2 after the move: %v", err)
	}
	if err := only(without, "b1"); err != nil {
		t.Errorf("without x-version after the move: %v", err)
	}
	ev.assertNoRejections(t)
	assertNoNACKs(t, br)
}
