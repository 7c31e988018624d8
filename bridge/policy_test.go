package bridge

import (
	"context"
	"strings"
	"testing"
	"time"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/xdsbridge/xdsbridge/policy"
	"github.com/xdsbridge/xdsbridge/sources"
	"github.com/xdsbridge/xdsbridge/translate"
	"github.com/xdsbridge/xdsbridge/xds"
)

func publishPolicy(t *testing.T, l *Loop, src string, services map[string]policy.Service) {
	t.Helper()
	if err := l.PublishPolicy(context.Background(), sources.PolicyUpdate{Source: src, Policy: &policy.File{Services: services}}); err != nil {
		t.Fatal(err)
	}
}

// A policy source must sync before the bridge is ready: no client sees a
// service without its policy.
func TestReadyWaitsForPolicySource(t *testing.T) {
	rec := newRecorder()
	l := run(t, Options{Sources: []string{"a", "policy"}, Quiet: time.Millisecond}, rec)
	publish(t, l, "a", service("web", 1))
	rec.none(t, 100*time.Millisecond)
	if l.Ready() {
		t.Fatal("ready before the policy source synced")
	}
	publishPolicy(t, l, "policy", map[string]policy.Service{"web": {Protocol: policy.ProtocolGRPC}})
	if d := cmp.Diff([]string{"web"}, rec.next(t).changed); d != "" {
		t.Fatalf("first publish (-want +got):\n%s", d)
	}
	waitTrue(t, l.Ready)
	var st []SourceStatus
	for _, s := range l.Sources() {
		if s.Name == "policy" {
			st = append(st, s)
		}
	}
	if len(st) != 1 || !st[0].Synced || st[0].Policies != 1 {
		t.Errorf("policy source status %+v", st)
	}
}

// A policy change re-translates the services whose policy it changes, and
// only those.
func TestPolicyChangeRebuildsWhatItTouches(t *testing.T) {
	rec := newRecorder()
	l := run(t, Options{Sources: []string{"a", "policy"}, Quiet: time.Millisecond}, rec)
	publish(t, l, "a", service("web", 1), service("api-eu", 1), service("api-us", 1), service("db", 1))
	publishPolicy(t, l, "policy", map[string]policy.Service{"web": {Protocol: policy.ProtocolGRPC}})
	rec.next(t)
	waitTrue(t, l.Ready)

	steps := []struct {
		what   string
		policy map[string]policy.Service
		want   []string // services rebuilt; nil: no publish
	}{
		{"web's policy changes", map[string]policy.Service{"web": {Protocol: policy.ProtocolHTTP2}}, []string{"web"}},
		{"the same policy again", map[string]policy.Service{"web": {Protocol: policy.ProtocolHTTP2}}, nil},
		{"a pattern for api-*", map[string]policy.Service{"web": {Protocol: policy.ProtocolHTTP2}, "api-*": {Protocol: policy.ProtocolHTTP}}, []string{"api-eu", "api-us"}},
		{"a more specific pattern for api-e*", map[string]policy.Service{"web": {Protocol: policy.ProtocolHTTP2}, "api-*": {Protocol: policy.ProtocolHTTP}, "api-e*": {Protocol: policy.ProtocolGRPC}}, []string{"api-eu"}},
		{"web's entry removed", map[string]policy.Service{"api-*": {Protocol: policy.ProtocolHTTP}, "api-e*": {Protocol: policy.ProtocolGRPC}}, []string{"web"}},
		{"a pattern that matches what has the same policy already", map[string]policy.Service{"api-*": {Protocol: policy.ProtocolHTTP}, "api-e*": {Protocol: policy.ProtocolGRPC}, "api-u*": {Protocol: policy.ProtocolHTTP}}, nil},
	}
	for _, s := range steps {
		publishPolicy(t, l, "policy", s.policy)
		if s.want == nil {
			rec.none(t, 100*time.Millisecond)
			continue
		}
		if d := cmp.Diff(s.want, rec.next(t).changed); d != "" {
			t.Fatalf("%s: rebuilt (-want +got):\n%s", s.what, d)
		}
	}
}

// A service's policy: its name in the first policy source that has it,
// else the most specific pattern over every source (ties: the earlier).
func TestPolicyPrecedence(t *testing.T) {
	l := New(Options{Sources: []string{"first", "second", "svc"}}, newRecorder())
	grpc := policy.Service{Protocol: policy.ProtocolGRPC}
	http := policy.Service{Protocol: policy.ProtocolHTTP}
	http2 := policy.Service{Protocol: policy.ProtocolHTTP2}
	l.applyPolicy(sources.PolicyUpdate{Source: "second", Policy: &policy.File{Services: map[string]policy.Service{
		"web": http2, "api": http2, "api-*": grpc, "db-*": http2,
	}}})
	l.applyPolicy(sources.PolicyUpdate{Source: "first", Policy: &policy.File{Services: map[string]policy.Service{
		"web": grpc, "a*": http, "api-?": http, "db-*": grpc,
	}}})
	for name, want := range map[string]string{
		"web":    "first: web",    // both name it: the first source
		"api":    "second: api",   // a name beats a pattern of an earlier source
		"api-1":  "first: api-?",  // api-? (4 literal characters) beats api-* (4): tie, earlier source
		"api-eu": "second: api-*", // api-* beats a*
		"db-1":   "first: db-*",   // the same pattern in both: the earlier
		"other":  "",
	} {
		p, from := l.policyFor(name)
		if from != want {
			t.Errorf("policyFor(%q) from %q; want %q", name, from, want)
		}
		if (p == nil) != (want == "") {
			t.Errorf("policyFor(%q) = %v", name, p)
		}
	}
}

// A source that publishes both services and a policy (the Consul source
// with config entries) is synced only once it has published both, in
// either order: clients never see its services without their policy.
func TestReadyWaitsForServicesAndPolicyOfOneSource(t *testing.T) {
	for _, policyFirst := range []bool{false, true} {
		rec := newRecorder()
		l := run(t, Options{Sources: []string{"consul"}, ServicesAndPolicy: []string{"consul"}, Quiet: time.Millisecond}, rec)
		first := func() { publish(t, l, "consul", service("web", 1)) }
		second := func() {
			publishPolicy(t, l, "consul", map[string]policy.Service{"web": {Protocol: policy.ProtocolGRPC}})
		}
		if policyFirst {
			first, second = second, first
		}
		first()
		rec.none(t, 100*time.Millisecond)
		if l.Ready() {
			t.Fatalf("policy first %v: ready after one of the two publishes", policyFirst)
		}
		for _, s := range l.Sources() {
			if s.Name == "consul" && s.Synced {
				t.Errorf("policy first %v: source shown synced after one of the two publishes", policyFirst)
			}
		}
		second()
		if d := cmp.Diff([]string{"web"}, rec.next(t).changed); d != "" {
			t.Fatalf("policy first %v: first publish (-want +got):\n%s", policyFirst, d)
		}
		waitTrue(t, l.Ready)
	}
	// A source not listed is synced by its first publish of either kind,
	// as before.
	rec := newRecorder()
	l := run(t, Options{Sources: []string{"consul"}, Quiet: time.Millisecond}, rec)
	publish(t, l, "consul", service("web", 1))
	rec.next(t)
	waitTrue(t, l.Ready)
}

// A service whose failover names another is translated again when the
// other's hosts change, and no more once its policy drops the failover.
func TestFailoverFollowsTarget(t *testing.T) {
	rec := newRecorder()
	l := run(t, Options{Sources: []string{"a", "policy"}, Quiet: time.Millisecond}, rec)
	publish(t, l, "a", service("web", 1), service("backup", 1), service("db", 1))
	fo := map[string]policy.Service{"web": {Failover: []policy.Target{{Service: "backup"}}}}
	publishPolicy(t, l, "policy", fo)
	rec.next(t)
	waitTrue(t, l.Ready)

	publish(t, l, "a", service("web", 1), service("backup", 1, 2), service("db", 1))
	if d := cmp.Diff([]string{"backup", "web"}, rec.next(t).changed); d != "" {
		t.Fatalf("backup changed: rebuilt (-want +got):\n%s", d)
	}
	publish(t, l, "a", service("web", 1), service("backup", 1, 2), service("db", 1, 2))
	if d := cmp.Diff([]string{"db"}, rec.next(t).changed); d != "" {
		t.Fatalf("db changed: rebuilt (-want +got):\n%s", d)
	}
	publish(t, l, "a", service("web", 1), service("db", 1, 2))
	c := rec.next(t)
	if d := cmp.Diff([]string{"web"}, c.changed); d != "" || len(c.removed) != 1 || c.removed[0] != "backup" {
		t.Fatalf("backup removed: rebuilt %v, removed %v", c.changed, c.removed)
	}
	publish(t, l, "a", service("web", 1), service("backup", 3), service("db", 1, 2))
	if d := cmp.Diff([]string{"backup", "web"}, rec.next(t).changed); d != "" {
		t.Fatalf("backup back: rebuilt (-want +got):\n%s", d)
	}
	publishPolicy(t, l, "policy", map[string]policy.Service{})
	if d := cmp.Diff([]string{"web"}, rec.next(t).changed); d != "" {
		t.Fatalf("failover dropped: rebuilt (-want +got):\n%s", d)
	}
	publish(t, l, "a", service("web", 1), service("backup", 4), service("db", 1, 2))
	if d := cmp.Diff([]string{"backup"}, rec.next(t).changed); d != "" {
		t.Fatalf("backup changed after the failover went: rebuilt (-want +got):\n%s", d)
	}
}

// A service named like a subset's cluster (web/v1) cannot take it over,
// whichever source publishes it: the name is refused with a diagnostic
// and counted, never merged, and web/v1 stays web's subset, with web's
// hosts. When the service goes, so do its diagnostic and count.
func TestServiceNamedLikeASubsetRefused(t *testing.T) {
	cache := xds.NewCache()
	l := run(t, Options{Sources: []string{"a", "policy"}, Quiet: time.Millisecond}, cache)
	clusters := func() []string {
		var out []string
		for _, r := range cache.List(xds.ClusterType) {
			out = append(out, r.Name)
		}
		return out
	}
	publishPolicy(t, l, "policy", map[string]policy.Service{"web": {Subsets: map[string]policy.Subset{"v1": {}, "v2": {}}}})
	publish(t, l, "a", service("web", 1), service("web/v1", 2))
	waitFor := func(want ...string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !cmp.Equal(clusters(), want) {
			if time.Now().After(deadline) {
				t.Fatalf("clusters %v; want %v", clusters(), want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitFor("web", "web/v1", "web/v2")
	subsetHosts := func() []uint32 {
		cla, _ := cache.Get(xds.EndpointType, "web/v1").(*endpoint.ClusterLoadAssignment)
		var ports []uint32
		for _, g := range cla.GetEndpoints() {
			for _, e := range g.GetLbEndpoints() {
				ports = append(ports, e.GetEndpoint().GetAddress().GetSocketAddress().GetPortValue())
			}
		}
		return ports
	}
	if d := cmp.Diff([]uint32{1}, subsetHosts()); d != "" {
		t.Fatalf("web/v1's hosts are not web's (-want +got):\n%s", d)
	}
	diags := l.Diagnostics()["web/v1"]
	if len(diags) != 1 || diags[0].Field != "name" || !strings.Contains(diags[0].Message, `source "a": name: service name "web/v1" contains "/"`) {
		t.Errorf("diagnostics of web/v1: %v", diags)
	}
	if n := testutil.ToFloat64(l.m.refusedNames.WithLabelValues("a")); n != 1 {
		t.Errorf("refused names of a: %v, want 1", n)
	}
	if d := l.Diagnostics()["web"]; len(d) != 0 {
		t.Errorf("web diagnostics %v", d)
	}
	// web's hosts change: its subset follows them, not the refused name.
	publish(t, l, "a", service("web", 1, 3), service("web/v1", 2))
	deadline := time.Now().Add(5 * time.Second)
	for !cmp.Equal(subsetHosts(), []uint32{1, 3}) {
		if time.Now().After(deadline) {
			t.Fatalf("web/v1's hosts %v, want web's 1, 3", subsetHosts())
		}
		time.Sleep(5 * time.Millisecond)
	}
	publish(t, l, "a", service("web", 1, 3))
	waitTrue(t, func() bool { return testutil.ToFloat64(l.m.refusedNames.WithLabelValues("a")) == 0 })
	if d := l.Diagnostics()["web/v1"]; len(d) != 0 {
		t.Errorf("web/v1 diagnostics after it went: %v", d)
	}
}

// A route to another service goes where that service's policy sends its
// default route (its default subset, its redirect), and follows it when
// that policy changes; a subset it does not have is a diagnostic.
func TestRoutesFollowTargetPolicy(t *testing.T) {
	cache := xds.NewCache()
	l := run(t, Options{Sources: []string{"a", "policy"}, Quiet: time.Millisecond}, cache)
	webRoutes := func() []string {
		rc, _ := cache.Get(xds.RouteType, "web").(*route.RouteConfiguration)
		return translate.RouteClusters(rc)
	}
	wait := func(what string, want ...string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !cmp.Equal(webRoutes(), want) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: web's routes go to %v; want %v", what, webRoutes(), want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	v12 := map[string]policy.Subset{"v1": {}, "v2": {}}
	web := policy.Service{Routes: []policy.Route{
		{Match: policy.Match{Prefix: "/api"}, Destination: &policy.Target{Service: "api"}},
		{Match: policy.Match{Prefix: "/canary"}, Destination: &policy.Target{Service: "api", Subset: "canary"}},
	}}
	publish(t, l, "a", service("web", 1), service("api", 1))
	publishPolicy(t, l, "policy", map[string]policy.Service{"web": web, "api": {Subsets: v12, DefaultSubset: "v1"}})
	wait("api's default subset v1", "api/v1", "api/canary", "web")
	var found bool
	for _, d := range l.Diagnostics()["web"] {
		found = found || strings.Contains(d.Message, `service "api" has no subset "canary"`)
	}
	if !found {
		t.Errorf("no diagnostic for api/canary: %v", l.Diagnostics()["web"])
	}
	publishPolicy(t, l, "policy", map[string]policy.Service{"web": web, "api": {Subsets: v12, DefaultSubset: "v2"}})
	wait("api's default subset v2", "api/v2", "api/canary", "web")
	publishPolicy(t, l, "policy", map[string]policy.Service{"web": web, "api": {Redirect: &policy.Target{Service: "db"}}})
	wait("api redirected to db", "db", "api/canary", "web")
	publishPolicy(t, l, "policy", map[string]policy.Service{"web": web})
	wait("api without policy", "api", "api/canary", "web")
}

// A subset another service's routes or failover still name stays
// published, with its last filter, when its owner's policy drops it;
// it goes when nothing names it any more (also when both change at once).
func TestReferencedSubsetKept(t *testing.T) {
	cache := xds.NewCache()
	l := run(t, Options{Sources: []string{"a", "policy"}, Quiet: time.Millisecond}, cache)
	hosts := func(cluster string) []uint32 {
		cla, _ := cache.Get(xds.EndpointType, cluster).(*endpoint.ClusterLoadAssignment)
		if cla == nil {
			return nil
		}
		var out []uint32
		for _, g := range cla.GetEndpoints() {
			for _, e := range g.GetLbEndpoints() {
				out = append(out, e.GetEndpoint().GetAddress().GetSocketAddress().GetPortValue())
			}
		}
		return out
	}
	hasCluster := func(name string) bool { return cache.Get(xds.ClusterType, name) != nil }
	wait := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: api/v2 cluster %v hosts %v; api diagnostics %v", what, hasCluster("api/v2"), hosts("api/v2"), l.Diagnostics()["api"])
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	heldDiag := func(by string) bool {
		for _, d := range l.Diagnostics()["api"] {
			if d.Field == "subsets.v2" && strings.Contains(d.Message, "the routes or failover of "+by+" still name it") {
				return true
			}
		}
		return false
	}
	v12 := map[string]policy.Subset{"v1": {Filter: "Port == 1"}, "v2": {Filter: "Port != 1"}}
	v1 := map[string]policy.Subset{"v1": {Filter: "Port == 1"}}
	canary := policy.Service{Routes: []policy.Route{
		{Match: policy.Match{Prefix: "/canary"}, Destination: &policy.Target{Service: "api", Subset: "v2"}},
	}}
	publish(t, l, "a", service("web", 1), service("api", 1, 2), service("db", 1))
	publishPolicy(t, l, "policy", map[string]policy.Service{"web": canary, "api": {Subsets: v12}})
	wait("api/v2 published", func() bool { return cmp.Equal(hosts("api/v2"), []uint32{2}) })

	// api drops v2; web still routes to it: kept, and it follows api's hosts.
	publishPolicy(t, l, "policy", map[string]policy.Service{"web": canary, "api": {Subsets: v1}})
	wait("api/v2 held", func() bool { return heldDiag("web") })
	if !hasCluster("api/v2") || !cmp.Equal(hosts("api/v2"), []uint32{2}) {
		t.Fatalf("api/v2 not kept: cluster %v hosts %v", hasCluster("api/v2"), hosts("api/v2"))
	}
	publish(t, l, "a", service("web", 1), service("api", 1, 2, 3), service("db", 1))
	wait("held api/v2 follows api's hosts", func() bool { return len(hosts("api/v2")) == 2 })
	if rcs := translate.RouteClusters(cache.Get(xds.RouteType, "web").(*route.RouteConfiguration)); !cmp.Equal(rcs, []string{"api/v2", "web"}) {
		t.Errorf("web's routes go to %v", rcs)
	}

	// Without any policy, still kept while named.
	publishPolicy(t, l, "policy", map[string]policy.Service{"web": canary})
	time.Sleep(50 * time.Millisecond)
	wait("api/v2 held without api's policy", func() bool { return hasCluster("api/v2") && heldDiag("web") })

	// web stops naming it: gone.
	publishPolicy(t, l, "policy", map[string]policy.Service{})
	wait("api/v2 gone", func() bool { return !hasCluster("api/v2") && !heldDiag("web") })

	// Failover naming a dropped subset holds it too.
	fo := policy.Service{Failover: []policy.Target{{Service: "api", Subset: "v2"}}}
	publishPolicy(t, l, "policy", map[string]policy.Service{"db": fo, "api": {Subsets: v12}})
	wait("api/v2 again", func() bool { return hasCluster("api/v2") })
	publishPolicy(t, l, "policy", map[string]policy.Service{"db": fo, "api": {Subsets: v1}})
	wait("api/v2 held by db's failover", func() bool { return heldDiag("db") })
	if !hasCluster("api/v2") {
		t.Fatal("api/v2 not kept for db's failover")
	}

	// Both change in one update: nothing names v2 any more, it goes.
	publishPolicy(t, l, "policy", map[string]policy.Service{"web": canary, "api": {Subsets: v12}})
	wait("api/v2 named by web", func() bool { return hasCluster("api/v2") && !heldDiag("db") })
	publishPolicy(t, l, "policy", map[string]policy.Service{"api": {Subsets: v1}})
	wait("api/v2 gone in one update", func() bool { return !hasCluster("api/v2") })
	if len(l.Diagnostics()["api"]) != 0 {
		t.Errorf("api diagnostics %v", l.Diagnostics()["api"])
	}
}

// heldLoop drives a Loop by hand (handle, flush) for the held-subset
// cases: web routes /canary to api/v2, then api's policy drops v2.
type heldLoop struct {
	t     *testing.T
	l     *Loop
	cache *xds.Cache
}

var (
	heldV12    = map[string]policy.Subset{"v1": {Filter: "Port == 1"}, "v2": {Filter: "Port != 1"}}
	heldV1     = map[string]policy.Subset{"v1": {Filter: "Port == 1"}}
	heldCanary = policy.Service{Routes: []policy.Route{{Match: policy.Match{Prefix: "/canary"}, Destination: &policy.Target{Service: "api", Subset: "v2"}}}}
)

func newHeldLoop(t *testing.T) *heldLoop {
	h := &heldLoop{t: t, cache: xds.NewCache()}
	h.l = New(Options{Sources: []string{"a", "policy"}}, h.cache)
	h.pub(service("web", 1), service("api", 1, 2))
	h.pol(map[string]policy.Service{"web": heldCanary, "api": {Subsets: heldV12}})
	h.pol(map[string]policy.Service{"web": heldCanary, "api": {Subsets: heldV1}})
	if !h.has("api/v2") {
		t.Fatalf("api/v2 not held; api diagnostics %v", h.l.Diagnostics()["api"])
	}
	return h
}

func (h *heldLoop) pub(svcs ...sources.Service) {
	h.l.handle(event{kind: evPublish, update: sources.Update{Source: "a", Services: svcs}, source: "a"})
	h.l.flush()
}

func (h *heldLoop) pol(m map[string]policy.Service) {
	h.l.handle(event{kind: evPolicy, policy: sources.PolicyUpdate{Source: "policy", Policy: &policy.File{Services: m}}, source: "policy"})
	h.l.flush()
}

func (h *heldLoop) has(cluster string) bool { return h.cache.Get(xds.ClusterType, cluster) != nil }

// A service named like one of api's subsets (api/x) appearing
// re-translates api; its held v2 stays.
func TestHeldSubsetSurvivesSubsetNamedService(t *testing.T) {
	h := newHeldLoop(t)
	h.pub(service("web", 1), service("api", 1, 2), service("api/x", 9))
	if !h.has("api/v2") {
		t.Fatalf("api/v2 released while web still names it; api diagnostics %v", h.l.Diagnostics()["api"])
	}
}

// The only service naming the held subset goes: the subset goes with it.
func TestHeldSubsetFreedWhenItsNamerGoes(t *testing.T) {
	h := newHeldLoop(t)
	h.pub(service("api", 1, 2))
	if h.has("api/v2") {
		t.Fatalf("api/v2 still published after web is gone; api diagnostics %v", h.l.Diagnostics()["api"])
	}
	if d := h.l.Diagnostics()["api"]; len(d) != 0 {
		t.Errorf("api diagnostics %v", d)
	}
}

// api goes and comes back without v2: web's route to api/v2 is reported
// (its cluster does not exist).
func TestHeldSubsetGoneWithItsServiceIsReported(t *testing.T) {
	h := newHeldLoop(t)
	h.pub(service("web", 1))
	h.pub(service("web", 1), service("api", 1, 2))
	var found bool
	for _, d := range h.l.Diagnostics()["web"] {
		found = found || strings.Contains(d.Message, `service "api" has no subset "v2"`)
	}
	if h.has("api/v2") || !found {
		t.Fatalf("api/v2 published %v; web diagnostics %v", h.has("api/v2"), h.l.Diagnostics()["web"])
	}
}

// A dependent whose policy comes from a pattern holds the subset too.
func TestHeldSubsetByPattern(t *testing.T) {
	h := &heldLoop{t: t, cache: xds.NewCache()}
	h.l = New(Options{Sources: []string{"a", "policy"}}, h.cache)
	h.pub(service("web", 1), service("api", 1, 2))
	h.pol(map[string]policy.Service{"w*": heldCanary, "api": {Subsets: heldV12}})
	h.pol(map[string]policy.Service{"w*": heldCanary, "api": {Subsets: heldV1}})
	if !h.has("api/v2") {
		t.Fatal("api/v2 not held for w*")
	}
	h.pol(map[string]policy.Service{"api": {Subsets: heldV1}})
	if h.has("api/v2") {
		t.Fatal("api/v2 not released when w* went")
	}
}

// waitPolicies waits for Policies to be want: the recorder sees a publish
// before the loop records it.
func waitPolicies(t *testing.T, l *Loop, what string, want map[string]string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		d := cmp.Diff(want, l.Policies())
		if d == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: policies (-want +got):\n%s", what, d)
		}
		time.Sleep(time.Millisecond)
	}
}

// Policies says where each published service's policy is from, and
// follows a policy's removal and a service's.
func TestPoliciesSnapshot(t *testing.T) {
	rec := newRecorder()
	l := run(t, Options{Sources: []string{"a", "policy"}, Quiet: time.Millisecond}, rec)
	publish(t, l, "a", service("web", 1), service("api-eu", 1), service("db", 1))
	publishPolicy(t, l, "policy", map[string]policy.Service{"web": {Protocol: policy.ProtocolGRPC}, "api-*": {Protocol: policy.ProtocolHTTP2}})
	rec.next(t)
	waitTrue(t, l.Ready)
	waitPolicies(t, l, "first", map[string]string{"web": "policy: web", "api-eu": "policy: api-*"})
	publishPolicy(t, l, "policy", map[string]policy.Service{"api-*": {Protocol: policy.ProtocolHTTP2}})
	rec.next(t)
	publish(t, l, "a", service("web", 1), service("db", 1))
	rec.next(t)
	waitPolicies(t, l, "after web's policy and api-eu went", map[string]string{})
}
