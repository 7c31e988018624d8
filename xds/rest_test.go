package xds_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/xdsbridge/xdsbridge/translate"
	"github.com/xdsbridge/xdsbridge/xds"
)

// restHarness is a cache, its server and a REST handler on an httptest server.
type restHarness struct {
	t     *testing.T
	cache *xds.Cache
	srv   *xds.Server
	reg   *prometheus.Registry
	url   string
	hc    *http.Client
}

func newRESTHarness(t *testing.T, ready bool, opts xds.RESTOptions) *restHarness {
	t.Helper()
	c := xds.NewCache()
	if ready {
		c.MarkReady()
	}
	reg := prometheus.NewRegistry()
	s := xds.NewServer(c, xds.Options{Metrics: reg})
	opts.Metrics = reg
	ts := httptest.NewServer(xds.NewREST(s, opts))
	t.Cleanup(ts.Close)
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	return &restHarness{t: t, cache: c, srv: s, reg: reg, url: ts.URL, hc: hc}
}

func (r *restHarness) publish(changed []translate.Resources, removed ...string) {
	r.t.Helper()
	if err := r.cache.PublishServices(changed, removed); err != nil {
		r.t.Fatal(err)
	}
}

// restResult is one HTTP answer.
type restResult struct {
	code int
	body string
	resp *discovery.DiscoveryResponse // for a 200
	took time.Duration
	err  error
}

// post sends body to path and decodes a 200's DiscoveryResponse.
func (r *restHarness) post(path string, body []byte) restResult {
	start := time.Now()
	resp, err := r.hc.Post(r.url+path, "application/json", bytes.NewReader(body))
	if err != nil {
		return restResult{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	res := restResult{code: resp.StatusCode, body: string(b), took: time.Since(start), err: err}
	if resp.StatusCode == http.StatusOK {
		res.resp = &discovery.DiscoveryResponse{}
		if err := protojson.Unmarshal(b, res.resp); err != nil {
			res.err = err
		}
	}
	return res
}

func (r *restHarness) poll(path string, req *discovery.DiscoveryRequest) restResult {
	b, err := protojson.Marshal(req)
	if err != nil {
		r.t.Fatal(err)
	}
	return r.post(path, b)
}

// must polls and fails the test unless the answer has code.
func (r *restHarness) must(code int, path string, req *discovery.DiscoveryRequest) restResult {
	r.t.Helper()
	res := r.poll(path, req)
	if res.err != nil || res.code != code {
		r.t.Fatalf("POST %s: want %d, got %d %q (%v)", path, code, res.code, res.body, res.err)
	}
	return res
}

// metric returns the value of the series of name whose labels include
// labels (0 if none).
func (r *restHarness) metric(name string, labels ...string) float64 {
	r.t.Helper()
	mfs, err := r.reg.Gather()
	if err != nil {
		r.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue next
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			}
		}
	}
	return 0
}

// waitHeld waits until n polls are held.
func (r *restHarness) waitHeld(n float64) {
	r.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for r.metric("xdsbridge_xds_rest_held_polls") != n {
		if time.Now().After(deadline) {
			r.t.Fatalf("timed out waiting for %v held polls (have %v)", n, r.metric("xdsbridge_xds_rest_held_polls"))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func responseNames(resp *discovery.DiscoveryResponse) []string {
	var out []string
	for _, a := range resp.GetResources() {
		switch a.GetTypeUrl() {
		case cds:
			var c cluster.Cluster
			if err := a.UnmarshalTo(&c); err == nil {
				out = append(out, c.GetName())
			}
		case eds:
			var e endpoint.ClusterLoadAssignment
			if err := a.UnmarshalTo(&e); err == nil {
				out = append(out, e.GetClusterName())
			}
		}
	}
	return out
}

const (
	restCDSPath = "/v3/discovery:clusters"
	restEDSPath = "/v3/discovery:endpoints"
)

// TestRESTLongPollAnswersOnChange: an up-to-date poll is held, and
// answered as soon as what it asks for changes, with the new content.
func TestRESTLongPollAnswersOnChange(t *testing.T) {
	r := newRESTHarness(t, true, xds.RESTOptions{MaxWait: 20 * time.Second})
	r.publish([]translate.Resources{svc("a", 1001), svc("b", 1002)})
	first := r.must(200, restCDSPath, &discovery.DiscoveryRequest{Node: &core.Node{Id: "n1"}})
	eq(t, "wildcard CDS", []string{"a", "b"}, responseNames(first.resp))
	v := first.resp.GetVersionInfo()
	if first.resp.GetNonce() != v || first.resp.GetTypeUrl() != cds {
		t.Fatalf("nonce %q type %q, want the version %q and %s", first.resp.GetNonce(), first.resp.GetTypeUrl(), v, cds)
	}

	done := make(chan restResult, 1)
	go func() {
		done <- r.poll(restCDSPath, &discovery.DiscoveryRequest{Node: &core.Node{Id: "n1"}, VersionInfo: v})
	}()
	r.waitHeld(1)
	changedAt := time.Now()
	r.publish([]translate.Resources{svc("c", 1003)})
	var res restResult
	select {
	case res = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the held poll was not answered within 10s of the change")
	}
	lag := time.Since(changedAt)
	if res.err != nil || res.code != 200 {
		t.Fatalf("held poll: %d %q %v", res.code, res.body, res.err)
	}
	eq(t, "after the change", []string{"a", "b", "c"}, responseNames(res.resp))
	if res.resp.GetVersionInfo() == v {
		t.Fatalf("version unchanged (%s) with new content", v)
	}
	if lag > 5*time.Second {
		t.Fatalf("answered %v after the change; max_wait is 20s, it should be at once", lag)
	}
	r.waitHeld(0)
	t.Logf("held poll answered %v after the change (held %v in all)", lag, res.took)

	// The version answered is the one a poll asking the same gets held on.
	same := r.must(200, restCDSPath, &discovery.DiscoveryRequest{})
	eq(t, "same version for the same content", res.resp.GetVersionInfo(), same.resp.GetVersionInfo())
	eq(t, "200 answers", 3.0, r.metric("xdsbridge_xds_rest_requests_total", "type", cds, "code", "200"))
	// Wildcard answers of a version are encoded once, whatever the clients.
	before := r.metric("xdsbridge_xds_rest_encodings_total", "type", cds)
	again := r.must(200, restCDSPath, &discovery.DiscoveryRequest{Node: &core.Node{Id: "n2"}})
	eq(t, "same bytes", same.body, again.body)
	eq(t, "encodings of a version already encoded", before, r.metric("xdsbridge_xds_rest_encodings_total", "type", cds))
	r.must(200, restCDSPath, &discovery.DiscoveryRequest{ResourceNames: []string{"a"}})
	eq(t, "a named poll is encoded", before+1, r.metric("xdsbridge_xds_rest_encodings_total", "type", cds))
}

// TestRESTUnchangedAfterMaxWait: an up-to-date poll is answered 304
// (no body) after max_wait; a change to something it does not ask for
// does not answer it.
func TestRESTUnchangedAfterMaxWait(t *testing.T) {
	const maxWait = 400 * time.Millisecond
	r := newRESTHarness(t, true, xds.RESTOptions{MaxWait: maxWait})
	r.publish([]translate.Resources{svc("a", 1001), svc("b", 1002)})
	first := r.must(200, restEDSPath, &discovery.DiscoveryRequest{ResourceNames: []string{"a"}})
	eq(t, "named EDS", []string{"a"}, responseNames(first.resp))

	done := make(chan restResult, 1)
	go func() {
		done <- r.poll(restEDSPath, &discovery.DiscoveryRequest{ResourceNames: []string{"a"}, VersionInfo: first.resp.GetVersionInfo()})
	}()
	r.waitHeld(1)
	r.publish([]translate.Resources{svc("b", 1002, 1003)}) // not asked for
	res := <-done
	if res.err != nil || res.code != http.StatusNotModified || res.body != "" {
		t.Fatalf("want 304 with no body, got %d %q %v", res.code, res.body, res.err)
	}
	if res.took < maxWait || res.took > maxWait+5*time.Second {
		t.Fatalf("answered after %v, want max_wait (%v)", res.took, maxWait)
	}
	t.Logf("304 after %v (max_wait %v)", res.took, maxWait)
	eq(t, "304 answers", 1.0, r.metric("xdsbridge_xds_rest_requests_total", "type", eds, "code", "304"))

	// b, asked for, did change.
	both := r.must(200, restEDSPath, &discovery.DiscoveryRequest{ResourceNames: []string{"b", "a", "nope"}, VersionInfo: first.resp.GetVersionInfo()})
	eq(t, "names filter EDS", []string{"a", "b"}, responseNames(both.resp))
	// CDS by name.
	one := r.must(200, restCDSPath, &discovery.DiscoveryRequest{ResourceNames: []string{"b"}})
	eq(t, "named CDS", []string{"b"}, responseNames(one.resp))
}

// TestRESTNACK: a NACK is counted (once per node, type and nonce) as
// on gRPC, and the content it rejects is not answered again until it
// changes.
func TestRESTNACK(t *testing.T) {
	r := newRESTHarness(t, true, xds.RESTOptions{MaxWait: 300 * time.Millisecond})
	r.publish([]translate.Resources{svc("a", 1001)})
	first := r.must(200, restEDSPath, &discovery.DiscoveryRequest{Node: &core.Node{Id: "n1"}, ResourceNames: []string{"a"}})
	r.publish([]translate.Resources{svc("a", 1002)})
	second := r.must(200, restEDSPath, &discovery.DiscoveryRequest{Node: &core.Node{Id: "n1"}, ResourceNames: []string{"a"}, VersionInfo: first.resp.GetVersionInfo()})
	nack := &discovery.DiscoveryRequest{
		Node: &core.Node{Id: "n1"}, ResourceNames: []string{"a"},
		VersionInfo:   first.resp.GetVersionInfo(), // the last accepted
		ResponseNonce: second.resp.GetNonce(),
		ErrorDetail:   &status.Status{Code: 3, Message: "rj: rejected on purpose"},
	}
	res := r.must(http.StatusNotModified, restEDSPath, nack) // held, not re-answered
	if res.took < 300*time.Millisecond {
		t.Fatalf("the NACK was answered after %v, before max_wait", res.took)
	}
	r.must(http.StatusNotModified, restEDSPath, nack) // the same NACK again
	eq(t, "NACKs counted (once for the same nonce)", uint64(1), r.srv.NACKs())
	eq(t, "xdsbridge_xds_nacks_total", 1.0, r.metric("xdsbridge_xds_nacks_total", "type", eds, "mode", "rest"))
	eq(t, "repeated", 1.0, r.metric("xdsbridge_xds_nack_logs_suppressed_total", "reason", "repeated"))

	// A NACK without a nonce rejects what is current.
	nn := &discovery.DiscoveryRequest{Node: &core.Node{Id: "n2"}, ResourceNames: []string{"a"}, ErrorDetail: &status.Status{Message: "rj: no nonce"}}
	r.must(http.StatusNotModified, restEDSPath, nn)
	eq(t, "NACKs counted", uint64(2), r.srv.NACKs())

	// New content is answered.
	done := make(chan restResult, 1)
	go func() { done <- r.poll(restEDSPath, nack) }()
	r.waitHeld(1)
	r.publish([]translate.Resources{svc("a", 1003)})
	res = <-done
	if res.code != 200 {
		t.Fatalf("after a change: %d %q %v", res.code, res.body, res.err)
	}
	if v := res.resp.GetVersionInfo(); v == second.resp.GetVersionInfo() || v == first.resp.GetVersionInfo() {
		t.Fatalf("answered version %s again", v)
	}
	t.Logf("NACKs %d; new content answered after %v", r.srv.NACKs(), res.took)
}

// TestRESTBadRequests: unknown paths, methods, types and bodies are
// refused with an error saying what is wanted; an oversize body is
// refused and counted; before the first state, 503.
func TestRESTBadRequests(t *testing.T) {
	r := newRESTHarness(t, true, xds.RESTOptions{MaxBodyBytes: 2048})
	r.publish([]translate.Resources{svc("a", 1001)})
	for _, c := range []struct {
		name, method, path, body string
		code                     int
		want                     string
	}{
		{"unknown type", "POST", "/v3/discovery:secrets", "{}", 404, "want POST /v3/discovery:clusters"},
		{"unknown path", "POST", "/v2/discovery:clusters", "{}", 404, "is not served"},
		{"GET", "GET", restCDSPath, "", 405, "want POST"},
		{"not JSON", "POST", restCDSPath, "{not json", 400, "not a JSON DiscoveryRequest"},
		{"unknown field ignored", "POST", restCDSPath, `{"rj_field": 1}`, 200, ""},
		{"type mismatch", "POST", restCDSPath, `{"type_url": "` + eds + `"}`, 400, "does not match the path"},
		{"oversize", "POST", restEDSPath, `{"resource_names": ["` + strings.Repeat("x", 4096) + `"]}`, 413, "xds.rest.max_body_bytes (2048)"},
	} {
		req, _ := http.NewRequest(c.method, r.url+c.path, strings.NewReader(c.body))
		resp, err := r.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.code || !strings.Contains(string(b), c.want) {
			t.Errorf("%s: got %d %q, want %d containing %q", c.name, resp.StatusCode, b, c.code, c.want)
		}
	}
	eq(t, "max_body_bytes refusals", 1.0, r.metric("xdsbridge_xds_rest_limit_refusals_total", "limit", "max_body_bytes"))
	eq(t, "404s", 2.0, r.metric("xdsbridge_xds_rest_requests_total", "type", "other", "code", "404"))

	nr := newRESTHarness(t, false, xds.RESTOptions{})
	res := nr.poll(restCDSPath, &discovery.DiscoveryRequest{})
	if res.code != 503 || !strings.Contains(res.body, "not ready") {
		t.Fatalf("before ready: %d %q", res.code, res.body)
	}
}

// TestRESTMaxHeldPolls: over max_held_polls, an up-to-date poll is
// answered 304 at once, counted.
func TestRESTMaxHeldPolls(t *testing.T) {
	r := newRESTHarness(t, true, xds.RESTOptions{MaxWait: 20 * time.Second, MaxHeldPolls: 1})
	r.publish([]translate.Resources{svc("a", 1001)})
	v := r.must(200, restCDSPath, &discovery.DiscoveryRequest{}).resp.GetVersionInfo()
	done := make(chan restResult, 1)
	go func() { done <- r.poll(restCDSPath, &discovery.DiscoveryRequest{VersionInfo: v}) }()
	r.waitHeld(1)
	res := r.must(http.StatusNotModified, restCDSPath, &discovery.DiscoveryRequest{VersionInfo: v})
	if res.took > 5*time.Second {
		t.Fatalf("the poll over the limit took %v", res.took)
	}
	eq(t, "max_held_polls refusals", 1.0, r.metric("xdsbridge_xds_rest_limit_refusals_total", "limit", "max_held_polls"))
	r.publish([]translate.Resources{svc("b", 1002)})
	if res := <-done; res.code != 200 {
		t.Fatalf("held poll: %d", res.code)
	}
	t.Logf("over the limit: 304 after %v", res.took)
}

// TestRESTClusterEDSConfig: with RESTOptions.EDS, clusters served over
// REST take their assignments from the REST source named, and the
// version changes with it.
func TestRESTClusterEDSConfig(t *testing.T) {
	plain := newRESTHarness(t, true, xds.RESTOptions{})
	plain.publish([]translate.Resources{svc("a", 1001)})
	r := newRESTHarness(t, true, xds.RESTOptions{EDS: &xds.RESTEDS{ClusterName: "bridge_rest", RefreshDelay: 200 * time.Millisecond, RequestTimeout: 15 * time.Second}})
	r.publish([]translate.Resources{svc("a", 1001)})
	for _, x := range []*restHarness{plain, r} {
		res := x.must(200, restCDSPath, &discovery.DiscoveryRequest{})
		var c cluster.Cluster
		if err := res.resp.GetResources()[0].UnmarshalTo(&c); err != nil {
			t.Fatal(err)
		}
		src := c.GetEdsClusterConfig().GetEdsConfig()
		if x == plain {
			if src.GetAds() == nil {
				t.Fatalf("without EDS: %v, want ads", src)
			}
			continue
		}
		acs := src.GetApiConfigSource()
		if acs.GetApiType() != core.ApiConfigSource_REST || len(acs.GetClusterNames()) != 1 || acs.GetClusterNames()[0] != "bridge_rest" ||
			acs.GetRefreshDelay().AsDuration() != 200*time.Millisecond || acs.GetRequestTimeout().AsDuration() != 15*time.Second {
			t.Fatalf("eds_config: %v", src)
		}
	}
	v1 := plain.must(200, restCDSPath, &discovery.DiscoveryRequest{}).resp.GetVersionInfo()
	v2 := r.must(200, restCDSPath, &discovery.DiscoveryRequest{}).resp.GetVersionInfo()
	if v1 == v2 {
		t.Fatalf("same CDS version %s with and without the EDS rewrite", v1)
	}
}

// TestRESTListenersAndRoutes: LDS (wildcard) and RDS (by name) are
// served too, nested typed configs encoded as JSON.
func TestRESTListenersAndRoutes(t *testing.T) {
	r := newRESTHarness(t, true, xds.RESTOptions{})
	r.publish([]translate.Resources{svc("a", 1001), svc("b", 1002)})
	lds := r.must(200, "/v3/discovery:listeners", &discovery.DiscoveryRequest{})
	rds := r.must(200, "/v3/discovery:routes", &discovery.DiscoveryRequest{ResourceNames: []string{"b"}})
	var ln, rn []string
	for _, a := range lds.resp.GetResources() {
		var l listener.Listener
		if err := a.UnmarshalTo(&l); err != nil {
			t.Fatal(err)
		}
		ln = append(ln, l.GetName())
	}
	for _, a := range rds.resp.GetResources() {
		var rc route.RouteConfiguration
		if err := a.UnmarshalTo(&rc); err != nil {
			t.Fatal(err)
		}
		rn = append(rn, rc.GetName())
	}
	eq(t, "LDS wildcard", []string{"a", "b"}, ln)
	eq(t, "RDS by name", []string{"b"}, rn)
	if !strings.Contains(lds.body, "HttpConnectionManager") {
		t.Fatalf("listener JSON without its typed config: %s", lds.body)
	}
	empty := r.must(200, "/v3/discovery:routes", &discovery.DiscoveryRequest{})
	eq(t, "RDS with no names: nothing", 0, len(empty.resp.GetResources()))
}
