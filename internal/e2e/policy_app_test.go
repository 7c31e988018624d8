package e2e

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	grpcmd "google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// The policy files of TestGRPCPolicySplit. greeter's hosts carry endpoint
// metadata app.version "1" (stable) or "2" (canary).
const (
	policySplit = `services:
  greeter:
    protocol: grpc
    subsets:
      stable: {filter: 'Metadata.app.version == "1"'}
      canary: {filter: 'Metadata.app.version == "2"'}
    default_subset: stable
    routes:
      - match:
          prefix: /grpc.health.v1.Health/
          headers: [{name: x-tenant, exact: test}]
        destination: {subset: canary}
    split:
      - {weight: 90, subset: stable}
      - {weight: 10, subset: canary}
`
	policyAllCanary = `services:
  greeter:
    protocol: grpc
    subsets:
      stable: {filter: 'Metadata.app.version == "1"'}
      canary: {filter: 'Metadata.app.version == "2"'}
    split:
      - {weight: 100, subset: canary}
`
	// policyBad would send everything to stable, were it taken; its retry
	// is invalid (A44: at least one retry), so the whole file is refused.
	policyBad = `services:
  greeter:
    protocol: grpc
    subsets:
      stable: {filter: 'Metadata.app.version == "1"'}
      canary: {filter: 'Metadata.app.version == "2"'}
    split:
      - {weight: 100, subset: stable}
    retry:
      retry_on: [unavailable]
      num_retries: 0
`
)

// staticSource is a sources list item: the file source on dir's
// services.yaml.
const staticSource = "  - name: static\n    file: {path: services.yaml, settle: 10ms}\n"

// startPolicyBridge writes dir/policy.yaml and starts the bridge with the
// config head given (e.g. an xds block), the sources given (YAML list
// items) and the policy file after them. It returns the bridge and the
// policy file's path.
func startPolicyBridge(t *testing.T, dir, head, sourcesYAML, policyYAML string) (*bridge, string) {
	t.Helper()
	path := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(path, []byte(policyYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	br := startBridgeConfig(t, dir, head+"sources:\n"+sourcesYAML+`  - name: policy
    policy_file: {path: policy.yaml, settle: 10ms}
`, nil)
	return br, path
}

// rpcRecord is one RPC of a traffic run.
type rpcRecord struct {
	start  time.Time
	subset string // "stable", "canary", or the unknown address reached
	err    error
}

// policyTraffic sends RPCs without wait-for-ready, one after another,
// until stopped, recording each.
type policyTraffic struct {
	mu   sync.Mutex
	recs []rpcRecord
	stop chan struct{}
	done chan struct{}
}

func startPolicyTraffic(c *xdsClient, subsetOf map[string]string) *policyTraffic {
	return startCalls(func() (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var p peer.Peer
		if _, err := c.health.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Peer(&p)); err != nil {
			return "", err
		}
		if sub := subsetOf[p.Addr.String()]; sub != "" {
			return sub, nil
		}
		return "unknown " + p.Addr.String(), nil
	})
}

// startCalls makes calls one after another until ended, recording each
// (rpcRecord.subset is what call returned: a subset, a backend's name).
func startCalls(call func() (string, error)) *policyTraffic {
	tr := &policyTraffic{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(tr.done)
		for {
			select {
			case <-tr.stop:
				return
			default:
			}
			start := time.Now()
			name, err := call()
			tr.mu.Lock()
			tr.recs = append(tr.recs, rpcRecord{start: start, subset: name, err: err})
			tr.mu.Unlock()
		}
	}()
	return tr
}

// n is how many calls were made so far.
func (tr *policyTraffic) n() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return len(tr.recs)
}

// since is the calls made from the i-th on.
func (tr *policyTraffic) since(i int) []rpcRecord {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]rpcRecord(nil), tr.recs[i:]...)
}

func (tr *policyTraffic) snapshot() []rpcRecord {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]rpcRecord(nil), tr.recs...)
}

// end stops the traffic (idempotent) and returns every record.
func (tr *policyTraffic) end() []rpcRecord {
	select {
	case <-tr.stop:
	default:
		close(tr.stop)
	}
	<-tr.done
	return tr.snapshot()
}

// tally tallies recs by subset, with "failed" for failed RPCs.
func tally(recs []rpcRecord) map[string]int {
	out := map[string]int{}
	for _, r := range recs {
		if r.err != nil {
			out["failed"]++
			continue
		}
		out[r.subset]++
	}
	return out
}

// writePolicy replaces the policy file atomically (write, rename).
func writePolicy(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

// writeGreeter writes dir/services.yaml: service greeter with a host on
// 127.0.0.1 at each port, the first half with metadata app.version "1"
// (subset stable), the rest "2" (canary); extra goes into each endpoint.
// It returns each host's subset.
func writeGreeter(t *testing.T, dir string, ports []uint32, extra string) []string {
	t.Helper()
	subsets := make([]string, len(ports))
	var sb strings.Builder
	sb.WriteString("services:\n  greeter:\n    endpoints:\n")
	for i, port := range ports {
		version, subset := "1", "stable"
		if i >= len(ports)/2 {
			version, subset = "2", "canary"
		}
		subsets[i] = subset
		fmt.Fprintf(&sb, "      - {address: 127.0.0.1, port: %d, %smetadata: {app: {version: %q}}}\n", port, extra, version)
	}
	if err := os.WriteFile(filepath.Join(dir, "services.yaml"), []byte(sb.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return subsets
}

// TestGRPCPolicySplit runs the bridge with a services file and a policy
// file, and a grpc-go xds:/// client: the 90/10 split by endpoint
// metadata holds statistically, a header route sends the test tenant to
// the canary, a policy change under traffic takes effect within seconds
// without a failed RPC, and a bad policy file changes nothing but
// /debug/sources.
func TestGRPCPolicySplit(t *testing.T) {
	bs := startGRPCBackends(t, 4)
	dir := t.TempDir()
	ports := make([]uint32, len(bs))
	for i, b := range bs {
		ports[i] = uint32(b.port)
	}
	subsets := writeGreeter(t, dir, ports, "locality: {region: r1}, ")
	subsetOf := map[string]string{}
	for i, b := range bs {
		subsetOf[b.addr] = subsets[i]
	}
	br, policyPath := startPolicyBridge(t, dir, "", staticSource, policySplit)
	c := dialXDS(t, br, "greeter")
	// Ready: every backend has answered (stable's through the split,
	// canary's through the split or the header route).
	tenant := grpcmd.AppendToOutgoingContext(context.Background(), "x-tenant", "test")
	seen := map[string]bool{}
	waitFor(t, 20*time.Second, "RPCs to reach all four backends", func() error {
		assertNoNACKs(t, br)
		for _, ctx := range []context.Context{context.Background(), tenant} {
			for range 20 {
				ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				var p peer.Peer
				_, err := c.health.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Peer(&p), grpc.WaitForReady(true))
				cancel()
				if err != nil {
					return err
				}
				seen[p.Addr.String()] = true
			}
		}
		if len(seen) != 4 {
			return fmt.Errorf("reached %v", seen)
		}
		return nil
	})

	// 1. The split: the canary's share of n RPCs is binomial(n, 0.1);
	// allowed: 4 standard deviations either side.
	const n, p = 2000, 0.1
	tr := startPolicyTraffic(c, subsetOf)
	waitFor(t, 60*time.Second, fmt.Sprintf("%d RPCs", n), func() error {
		if got := len(tr.snapshot()); got < n {
			return fmt.Errorf("%d RPCs", got)
		}
		return nil
	})
	phase1 := tr.snapshot()[:n]
	got := tally(phase1)
	sd := math.Sqrt(n * p * (1 - p))
	lo, hi := int(math.Ceil(n*p-4*sd)), int(math.Floor(n*p+4*sd))
	t.Logf("split 90/10, %d RPCs: %v; canary allowed %d..%d (%.1f%% ± %.2f%%)", n, got, lo, hi, 100*p, 400*sd/n)
	if got["stable"]+got["canary"] != n || got["canary"] < lo || got["canary"] > hi {
		t.Fatalf("split 90/10 over %d RPCs: %v; want all to stable or canary, canary %d..%d", n, got, lo, hi)
	}
	// The header route: the test tenant's RPCs all go to the canary.
	tenantGot := map[string]int{}
	for range 200 {
		ctx, cancel := context.WithTimeout(tenant, 5*time.Second)
		var pr peer.Peer
		_, err := c.health.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Peer(&pr))
		cancel()
		if err != nil {
			t.Fatalf("x-tenant: test RPC: %v", err)
		}
		tenantGot[subsetOf[pr.Addr.String()]]++
	}
	t.Logf("x-tenant: test, 200 RPCs: %v", tenantGot)
	if tenantGot["canary"] != 200 {
		t.Fatalf("x-tenant: test RPCs went to %v; want all 200 to canary", tenantGot)
	}
	assertNoNACKs(t, br)

	// 2. Everything to the canary, under traffic.
	i0 := len(tr.snapshot())
	t0 := time.Now()
	writePolicy(t, policyPath, policyAllCanary)
	const streak = 300 // RPCs in a row to the canary: the change is in
	waitFor(t, 10*time.Second, fmt.Sprintf("%d RPCs in a row to canary", streak), func() error {
		recs := tr.snapshot()[i0:]
		if len(recs) < streak {
			return fmt.Errorf("%d RPCs since the change", len(recs))
		}
		if got := tally(recs[len(recs)-streak:]); got["canary"] != streak {
			return fmt.Errorf("last %d RPCs: %v", streak, got)
		}
		return nil
	})
	recs := tr.snapshot()[i0:]
	last := -1 // the last RPC since the change not to the canary
	for i, r := range recs {
		if r.err != nil || r.subset != "canary" {
			last = i
		}
	}
	effect := recs[last+1].start.Sub(t0)
	t.Logf("100%% canary: in effect %v after the rename (%d RPCs since: %v)", effect.Round(time.Millisecond), len(recs), tally(recs))
	if effect > 5*time.Second {
		t.Errorf("the change took %v; want within 5s", effect)
	}
	assertNoNACKs(t, br)

	// 3. A bad file: refused whole, reported with line and field; the
	// traffic stays on the canary.
	i1 := len(tr.snapshot())
	writePolicy(t, policyPath, policyBad)
	line, col := 0, 0
	for i, l := range strings.Split(policyBad, "\n") {
		if c := strings.Index(l, "num_retries"); c >= 0 {
			line, col = i+1, c+1
		}
	}
	want := fmt.Sprintf("line %d, column %d: services.greeter.retry.num_retries: 0", line, col)
	var lastErr string
	waitFor(t, 10*time.Second, "/debug/sources to report the bad policy file", func() error {
		var st struct {
			Sources []struct {
				Name   string `json:"name"`
				Status struct {
					LastError string `json:"last_error"`
				} `json:"status"`
				Debug struct {
					LastError string `json:"last_error"`
				} `json:"debug"`
			} `json:"sources"`
		}
		br.debugJSON(t, "/debug/sources", &st)
		for _, s := range st.Sources {
			if s.Name == "policy" {
				lastErr = s.Status.LastError
				if strings.Contains(s.Status.LastError, want) && strings.Contains(s.Debug.LastError, want) {
					return nil
				}
				return fmt.Errorf("policy source: status.last_error %q, debug.last_error %q", s.Status.LastError, s.Debug.LastError)
			}
		}
		return fmt.Errorf("no source named policy in %+v", st.Sources)
	})
	t.Logf("/debug/sources: %s", lastErr)
	time.Sleep(2 * time.Second) // time for a wrongly taken policy to show
	all := tr.end()
	after := tally(all[i1:])
	t.Logf("after the bad file: %v", after)
	if after["canary"] != len(all)-i1 || len(all)-i1 < 100 {
		t.Errorf("after the bad policy file, RPCs went to %v; want all to canary (at least 100)", after)
	}
	total := tally(all)
	t.Logf("whole run, %d RPCs: %v", len(all), total)
	if total["failed"] != 0 {
		for _, r := range all {
			if r.err != nil {
				t.Errorf("failed RPC at %v: %v", r.start.Format(time.StampMicro), r.err)
				break
			}
		}
		t.Errorf("%d of %d RPCs failed; want none", total["failed"], len(all))
	}
	assertNoNACKs(t, br)
}

// envoyRDS replaces envoy-sotw.yaml's inline route configuration with RDS
// over ADS for the route configuration "greeter".
var envoyRDS = []string{`route_config:
                  validate_clusters: false   # "web" comes from CDS
                  virtual_hosts:
                    - name: all
                      domains: ["*"]
                      routes:
                        - match: {prefix: "/"}
                          route: {cluster: web}`, `rds:
                  route_config_name: greeter
                  config_source: {resource_api_version: V3, ads: {}}`}

// TestEnvoyPolicySplit is TestGRPCPolicySplit's split, header route and
// change under traffic through a real Envoy taking greeter's route
// configuration by RDS over ADS.
func TestEnvoyPolicySplit(t *testing.T) {
	bs := startBackends(t, 4)
	dir := t.TempDir()
	ports := make([]uint32, len(bs))
	for i, b := range bs {
		ports[i] = uint32(b.port)
	}
	subsets := writeGreeter(t, dir, ports, "")
	subsetOf := map[string]string{}
	for i, b := range bs {
		subsetOf[b.name] = subsets[i]
	}
	// The backends speak HTTP/1.1 (no protocol: grpc), and Envoy's Host
	// is the listener's address: the virtual host takes any.
	withDomains := func(p string) string {
		return strings.Replace(p, "    protocol: grpc\n", "    domains: ['*']\n", 1)
	}
	br, policyPath := startPolicyBridge(t, dir, "", staticSource, strings.ReplaceAll(withDomains(policySplit), "/grpc.health.v1.Health/", "/"))
	ev := startEnvoyCerts(t, "envoy-sotw.yaml", br.app.XDSAddr(), "", envoyRDS...)
	client := &http.Client{Timeout: 5 * time.Second}
	get := func(tenant bool) (string, error) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+ev.listener+"/", nil)
		if tenant {
			req.Header.Set("x-tenant", "test")
		}
		resp, err := client.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return "", fmt.Errorf("%s: %s", resp.Status, b)
		}
		if s := subsetOf[string(b)]; s != "" {
			return s, nil
		}
		return "", fmt.Errorf("answered by %q", b)
	}
	seen := map[string]bool{}
	waitFor(t, 20*time.Second, "requests to reach all four backends", func() error {
		for _, tenant := range []bool{false, true} {
			for range 20 {
				req, _ := http.NewRequest(http.MethodGet, "http://"+ev.listener+"/", nil)
				if tenant {
					req.Header.Set("x-tenant", "test")
				}
				resp, err := client.Do(req)
				if err != nil {
					return err
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					return fmt.Errorf("%s: %s", resp.Status, b)
				}
				seen[string(b)] = true
			}
		}
		if len(seen) != 4 {
			return fmt.Errorf("reached %v", seen)
		}
		return nil
	})

	const n, p = 2000, 0.1
	got := map[string]int{}
	for range n {
		s, err := get(false)
		if err != nil {
			t.Fatal(err)
		}
		got[s]++
	}
	sd := math.Sqrt(n * p * (1 - p))
	lo, hi := int(math.Ceil(n*p-4*sd)), int(math.Floor(n*p+4*sd))
	t.Logf("Envoy, split 90/10, %d requests: %v; canary allowed %d..%d", n, got, lo, hi)
	if got["canary"] < lo || got["canary"] > hi {
		t.Fatalf("split 90/10 over %d requests: %v; want canary %d..%d", n, got, lo, hi)
	}
	tenantGot := map[string]int{}
	for range 200 {
		s, err := get(true)
		if err != nil {
			t.Fatal(err)
		}
		tenantGot[s]++
	}
	t.Logf("Envoy, x-tenant: test, 200 requests: %v", tenantGot)
	if tenantGot["canary"] != 200 {
		t.Fatalf("x-tenant: test requests went to %v; want all 200 to canary", tenantGot)
	}

	// Everything to the canary while requests go on.
	var mu sync.Mutex
	var recs []rpcRecord
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			start := time.Now()
			s, err := get(false)
			mu.Lock()
			recs = append(recs, rpcRecord{start: start, subset: s, err: err})
			mu.Unlock()
		}
	}()
	t0 := time.Now()
	writePolicy(t, policyPath, withDomains(policyAllCanary))
	const streak = 300
	waitFor(t, 10*time.Second, fmt.Sprintf("%d requests in a row to canary", streak), func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(recs) < streak {
			return fmt.Errorf("%d requests since the change", len(recs))
		}
		if got := tally(recs[len(recs)-streak:]); got["canary"] != streak {
			return fmt.Errorf("last %d requests: %v", streak, got)
		}
		return nil
	})
	close(stop)
	<-done
	last := -1
	for i, r := range recs {
		if r.err != nil || r.subset != "canary" {
			last = i
		}
	}
	effect := recs[last+1].start.Sub(t0)
	all := tally(recs)
	t.Logf("Envoy, 100%% canary: in effect %v after the rename (%d requests since: %v)", effect.Round(time.Millisecond), len(recs), all)
	if effect > 5*time.Second {
		t.Errorf("the change took %v; want within 5s", effect)
	}
	if all["failed"] != 0 {
		for _, r := range recs {
			if r.err != nil {
				t.Errorf("failed request: %v", r.err)
				break
			}
		}
		t.Errorf("%d of %d requests failed; want none", all["failed"], len(recs))
	}
	ev.assertNoRejections(t)
	assertNoNACKs(t, br)
}
