package consul

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/consul/api"

	"github.com/xdsbridge/xdsbridge/config/decode"
	"github.com/xdsbridge/xdsbridge/policy"
	"github.com/xdsbridge/xdsbridge/sources"
	"github.com/xdsbridge/xdsbridge/sources/consul/consultest"
	"github.com/xdsbridge/xdsbridge/sources/sourcestest"
)

// lastPolicy is the policy of the last PublishPolicy call (nil: none).
func lastPolicy(sink *sourcestest.Sink) *policy.File {
	ps := sink.Policies()
	if len(ps) == 0 {
		return nil
	}
	return ps[len(ps)-1].Policy
}

// waitPolicy waits until the last published policy gives the services
// exactly want.
func waitPolicy(t *testing.T, sink *sourcestest.Sink, what string, want map[string]policy.Service) {
	t.Helper()
	deadline := time.Now().Add(waitLong)
	for {
		f := lastPolicy(sink)
		if f != nil && cmp.Equal(want, f.Services) {
			if errs := f.Check(); len(errs) > 0 {
				t.Fatalf("%s: the published policy fails its check: %v", what, errs)
			}
			return
		}
		if time.Now().After(deadline) {
			var got any
			if f != nil {
				got = f.Services
			}
			t.Fatalf("%s: timed out; last policy (-want +got):\n%s", what, cmp.Diff(want, got))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func setEntry(t *testing.T, a *agent, e api.ConfigEntry) {
	t.Helper()
	if ok, _, err := a.Client.ConfigEntries().Set(e, nil); err != nil || !ok {
		t.Fatalf("writing %s/%s: ok=%v err=%v", e.GetKind(), e.GetName(), ok, err)
	}
}

func deleteEntry(t *testing.T, a *agent, kind, name string) {
	t.Helper()
	if _, err := a.Client.ConfigEntries().Delete(kind, name, nil); err != nil {
		t.Fatalf("deleting %s/%s: %v", kind, name, err)
	}
}

// TestConfigEntriesAgent runs the source with config_entries against a
// real Consul agent: the policy is published before anything is written,
// follows each entry written and deleted (a deleted entry restores the
// default: the service leaves the policy), and stays as it was while the
// agent is down.
func TestConfigEntriesAgent(t *testing.T) {
	a := consultest.StartPersistentAgent(t, "dc1")
	a.Register(ttlService("web-0", "web", "127.0.5.1", 9000, []string{"canary"}, map[string]string{"version": "2"}, api.HealthPassing))
	s, sink := startSource(t, baseConfig(a.Addr(), `, "config_entries": true, "services": {"include": ["web"]}`))

	sink.WaitFor(t, waitLong, "the services", func(us []sources.Update, _ []error) bool { return len(us) > 0 })
	waitPolicy(t, sink, "the empty policy", map[string]policy.Service{})

	setEntry(t, a, &api.ServiceConfigEntry{Kind: api.ServiceDefaults, Name: "web", Protocol: "http"})
	web := policy.Service{Protocol: policy.ProtocolHTTP}
	waitPolicy(t, sink, "service-defaults", map[string]policy.Service{"web": web})

	setEntry(t, a, &api.ServiceResolverConfigEntry{Kind: api.ServiceResolver, Name: "web", ConnectTimeout: 2 * time.Second,
		DefaultSubset: "v1",
		Subsets: map[string]api.ServiceResolverSubset{
			"v1": {Filter: `Service.Meta.version == "1"`},
			"v2": {Filter: `"canary" in Service.Tags`, OnlyPassing: true},
		},
		LoadBalancer: &api.LoadBalancer{Policy: "ring_hash", RingHashConfig: &api.RingHashConfig{MinimumRingSize: 1024},
			HashPolicies: []api.HashPolicy{{Field: "header", FieldValue: "x-user"}, {SourceIP: true, Terminal: true}}},
	})
	web.ConnectTimeout = decode.Duration(2 * time.Second)
	web.DefaultSubset = "v1"
	web.Subsets = map[string]policy.Subset{"v1": {Filter: `Service.Meta.version == "1"`}, "v2": {Filter: `"canary" in Service.Tags`, OnlyPassing: true}}
	web.LoadBalancer = &policy.LoadBalancer{Policy: "ring_hash", RingHash: &policy.RingHash{MinimumRingSize: 1024},
		HashPolicies: []policy.HashPolicy{{Header: "x-user"}, {SourceIP: true, Terminal: true}}}
	waitPolicy(t, sink, "service-resolver", map[string]policy.Service{"web": web})

	setEntry(t, a, &api.ServiceSplitterConfigEntry{Kind: api.ServiceSplitter, Name: "web", Splits: []api.ServiceSplit{
		{Weight: 87.5, ServiceSubset: "v1"}, {Weight: 12.5, ServiceSubset: "v2"},
	}})
	web.Split = []policy.Split{{Weight: 87.5, Subset: "v1"}, {Weight: 12.5, Subset: "v2"}}
	waitPolicy(t, sink, "service-splitter", map[string]policy.Service{"web": web})

	setEntry(t, a, &api.ServiceRouterConfigEntry{Kind: api.ServiceRouter, Name: "web", Routes: []api.ServiceRoute{
		{
			Match: &api.ServiceRouteMatch{HTTP: &api.ServiceRouteHTTPMatch{PathPrefix: "/admin", Methods: []string{"GET"},
				Header: []api.ServiceRouteHTTPMatchHeader{{Name: "x-debug", Present: true, Invert: true}}}},
			Destination: &api.ServiceRouteDestination{ServiceSubset: "v2", PrefixRewrite: "/", RequestTimeout: 3 * time.Second,
				NumRetries: 2, RetryOnConnectFailure: true, RetryOn: []string{"reset"}, RetryOnStatusCodes: []uint32{503},
				IdleTimeout: time.Minute},
		},
		{Match: &api.ServiceRouteMatch{HTTP: &api.ServiceRouteHTTPMatch{PathExact: "/split"}}},
	}})
	web.Routes = []policy.Route{
		{
			Match:       policy.Match{Prefix: "/admin", Methods: []string{"GET"}, Headers: []policy.HeaderMatch{{Name: "x-debug", Present: true, Invert: true}}},
			Destination: &policy.Target{Subset: "v2"}, PrefixRewrite: "/", Timeout: decode.Duration(3 * time.Second),
			Retry: &policy.Retry{On: []string{"reset", "connect-failure", "retriable-status-codes"}, NumRetries: u32(2), StatusCodes: []uint32{503}},
		},
		// Consul sends a route to the service itself to its splitter.
		{Match: policy.Match{Path: "/split"}, Split: web.Split},
	}
	waitPolicy(t, sink, "service-router", map[string]policy.Service{"web": web})

	d := s.DebugInfo().(Debug)
	if d.ConfigEntries == nil {
		t.Fatal("DebugInfo: no config_entries")
	}
	if got := d.ConfigEntries.Entries; got[api.ServiceRouter] != 1 || got[api.ServiceResolver] != 1 || got[api.ServiceSplitter] != 1 || got[api.ServiceDefaults] != 1 {
		t.Errorf("DebugInfo entries: %v", got)
	}
	if diags := d.ConfigEntries.Diagnostics; len(diags) != 1 || diags[0].Field != "Routes[0].Destination.IdleTimeout" {
		t.Errorf("DebugInfo diagnostics: %+v", diags)
	}
	if b, err := json.Marshal(d); err != nil {
		t.Errorf("DebugInfo does not encode: %v", err)
	} else {
		t.Logf("DebugInfo config_entries: %s", mustJSON(d.ConfigEntries))
		_ = b
	}

	// An outage: Fail is called, the policy stays (nothing published).
	before := len(sink.Policies())
	errs := len(sink.Errors())
	a.Stop()
	waitFor(t, "a Fail call", func() bool { return len(sink.Errors()) > errs })
	time.Sleep(time.Second)
	if n := len(sink.Policies()); n != before {
		t.Errorf("%d policies published while the agent is down", n-before)
	}
	if d := s.DebugInfo().(Debug); !d.Stale || !d.ConfigEntries.Watches[api.ServiceRouter].Failing {
		t.Errorf("DebugInfo while the agent is down: stale=%v, router watch %+v", d.Stale, d.ConfigEntries.Watches[api.ServiceRouter])
	}
	a.Start()
	a.WaitLeader()
	waitFor(t, "DebugInfo to stop showing stale data", func() bool { return !s.DebugInfo().(Debug).Stale })
	if ps := sink.Policies(); len(ps) != before {
		t.Errorf("%d policies published after the agent came back with the same entries", len(ps)-before)
		for _, p := range ps[before:] {
			t.Logf("published: %s", mustJSON(p.Policy))
		}
	}
	waitPolicy(t, sink, "the policy after the outage", map[string]policy.Service{"web": web})

	// Deletions restore the default, piece by piece.
	deleteEntry(t, a, api.ServiceRouter, "web")
	web.Routes = nil
	waitPolicy(t, sink, "router deleted", map[string]policy.Service{"web": web})
	deleteEntry(t, a, api.ServiceSplitter, "web")
	web.Split = nil
	waitPolicy(t, sink, "splitter deleted", map[string]policy.Service{"web": web})
	deleteEntry(t, a, api.ServiceResolver, "web")
	waitPolicy(t, sink, "resolver deleted", map[string]policy.Service{"web": {Protocol: policy.ProtocolHTTP}})
	deleteEntry(t, a, api.ServiceDefaults, "web")
	waitPolicy(t, sink, "service-defaults deleted", map[string]policy.Service{})
	if d := s.DebugInfo().(Debug); len(d.ConfigEntries.Diagnostics) != 0 {
		t.Errorf("diagnostics left after every entry is deleted: %+v", d.ConfigEntries.Diagnostics)
	}

	// The resolver's RequestTimeout (backported to 1.14) round-trips
	// through a 1.14 agent, with a failover to another service.
	setEntry(t, a, &api.ServiceResolverConfigEntry{Kind: api.ServiceResolver, Name: "api", RequestTimeout: 15 * time.Second,
		Failover: map[string]api.ServiceResolverFailover{"*": {Service: "api-backup"}}})
	waitPolicy(t, sink, "resolver with a request timeout", map[string]policy.Service{"api": {Timeout: decode.Duration(15 * time.Second),
		Failover: []policy.Target{{Service: "api-backup"}}}})
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(err)
	}
	return string(b)
}
