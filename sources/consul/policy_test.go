package consul

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/consul/api"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/xdsbridge/xdsbridge/config/decode"
	"github.com/xdsbridge/xdsbridge/policy"
	"github.com/xdsbridge/xdsbridge/sources"
)

func u32(v uint32) *uint32 { return &v }

func entries(es ...api.ConfigEntry) entrySet {
	set := newEntrySet()
	by := map[string][]api.ConfigEntry{}
	for _, e := range es {
		by[e.GetKind()] = append(by[e.GetKind()], e)
	}
	for k, list := range by {
		set.set(k, list)
	}
	return set
}

func defaults(name, proto string) *api.ServiceConfigEntry {
	return &api.ServiceConfigEntry{Kind: api.ServiceDefaults, Name: name, Protocol: proto}
}

func resolver(name string, f func(*api.ServiceResolverConfigEntry)) *api.ServiceResolverConfigEntry {
	e := &api.ServiceResolverConfigEntry{Kind: api.ServiceResolver, Name: name}
	if f != nil {
		f(e)
	}
	return e
}

func splitter(name string, splits ...api.ServiceSplit) *api.ServiceSplitterConfigEntry {
	return &api.ServiceSplitterConfigEntry{Kind: api.ServiceSplitter, Name: name, Splits: splits}
}

func router(name string, routes ...api.ServiceRoute) *api.ServiceRouterConfigEntry {
	return &api.ServiceRouterConfigEntry{Kind: api.ServiceRouter, Name: name, Routes: routes}
}

func httpMatch(m api.ServiceRouteHTTPMatch) *api.ServiceRouteMatch {
	return &api.ServiceRouteMatch{HTTP: &m}
}

// diagKey is what the tests compare of a diagnostic.
func diagKey(d Diagnostic) string {
	s := d.Kind + "/" + d.Name + " " + d.Field
	if d.Skipped {
		s += " skipped"
	}
	return s
}

var localNaming = naming{template: "{service}", local: "dc1", watched: []string{"dc2"}}

func TestConvertEntries(t *testing.T) {
	v1 := map[string]api.ServiceResolverSubset{"v1": {Filter: `Service.Meta.version == "1"`}, "v2": {Filter: `"canary" in Service.Tags`, OnlyPassing: true}}
	polSubsets := map[string]policy.Subset{"v1": {Filter: `Service.Meta.version == "1"`}, "v2": {Filter: `"canary" in Service.Tags`, OnlyPassing: true}}
	tests := []struct {
		name   string
		in     entrySet
		naming *naming
		want   map[string]policy.Service
		diags  []string
	}{
		{
			name: "service-defaults protocol",
			in:   entries(defaults("web", "http"), defaults("api", "GRPC"), defaults("db", "tcp"), defaults("plain", "")),
			want: map[string]policy.Service{
				"web": {Protocol: policy.ProtocolHTTP},
				"api": {Protocol: policy.ProtocolGRPC},
				"db":  {Protocol: policy.ProtocolTCP},
				// "plain" sets nothing: no policy by name.
			},
		},
		{
			name: "service-defaults unknown protocol and mesh-only fields are diagnostics",
			in: entries(&api.ServiceConfigEntry{Kind: api.ServiceDefaults, Name: "web", Protocol: "kafka",
				MeshGateway: api.MeshGatewayConfig{Mode: api.MeshGatewayModeLocal}, Mode: api.ProxyModeTransparent,
				UpstreamConfig: &api.UpstreamConfiguration{Defaults: &api.UpstreamConfig{ConnectTimeoutMs: 5}}, LocalRequestTimeoutMs: 5, ExternalSNI: "x"}),
			want: map[string]policy.Service{},
			diags: []string{"service-defaults/web Protocol", "service-defaults/web Mode", "service-defaults/web MeshGateway",
				"service-defaults/web ExternalSNI", "service-defaults/web UpstreamConfig", "service-defaults/web LocalRequestTimeoutMs"},
		},
		{
			name: "entries in another namespace are skipped",
			in: entries(&api.ServiceConfigEntry{Kind: api.ServiceDefaults, Name: "web", Namespace: "team", Protocol: "http"},
				&api.ServiceResolverConfigEntry{Kind: api.ServiceResolver, Name: "web", Partition: "p", ConnectTimeout: time.Second}),
			want:  map[string]policy.Service{},
			diags: []string{"service-defaults/web Namespace skipped", "service-resolver/web Namespace skipped"},
		},
		{
			name: "resolver: timeouts, subsets, default subset",
			in: entries(resolver("web", func(e *api.ServiceResolverConfigEntry) {
				e.ConnectTimeout, e.RequestTimeout = 3*time.Second, 15*time.Second
				e.Subsets, e.DefaultSubset = v1, "v1"
			})),
			want: map[string]policy.Service{"web": {ConnectTimeout: decode.Duration(3 * time.Second), Timeout: decode.Duration(15 * time.Second), Subsets: polSubsets, DefaultSubset: "v1"}},
		},
		{
			name: "resolver request timeout with a router or splitter is Consul's no-op",
			in: entries(defaults("web", "http"), resolver("web", func(e *api.ServiceResolverConfigEntry) { e.RequestTimeout = 15 * time.Second }),
				splitter("web", api.ServiceSplit{Weight: 100})),
			want:  map[string]policy.Service{"web": {Protocol: policy.ProtocolHTTP, Split: []policy.Split{{Weight: 100}}}},
			diags: []string{"service-resolver/web RequestTimeout"},
		},
		{
			name: "resolver: redirect to another service's subset, in another datacenter",
			in: entries(resolver("web", func(e *api.ServiceResolverConfigEntry) {
				e.Redirect = &api.ServiceResolverRedirect{Service: "web2", ServiceSubset: "blue", Datacenter: "dc2"}
			})),
			want: map[string]policy.Service{"web": {Redirect: &policy.Target{Service: "web2", Subset: "blue", Datacenter: "dc2"}}},
		},
		{
			name: "resolver: redirect ignores the rest, as Consul",
			in: entries(resolver("web", func(e *api.ServiceResolverConfigEntry) {
				e.Redirect = &api.ServiceResolverRedirect{Service: "web2"}
				e.ConnectTimeout = time.Second
			})),
			want:  map[string]policy.Service{"web": {Redirect: &policy.Target{Service: "web2"}}},
			diags: []string{"service-resolver/web Redirect"},
		},
		{
			name: "resolver: redirect to a peer, a sameness group, a namespace, an unwatched datacenter: skipped",
			in: entries(
				resolver("a", func(e *api.ServiceResolverConfigEntry) {
					e.Redirect = &api.ServiceResolverRedirect{Service: "x", Peer: "p"}
				}),
				resolver("b", func(e *api.ServiceResolverConfigEntry) {
					e.Redirect = &api.ServiceResolverRedirect{Service: "x", SamenessGroup: "g"}
				}),
				resolver("c", func(e *api.ServiceResolverConfigEntry) {
					e.Redirect = &api.ServiceResolverRedirect{Service: "x", Namespace: "n"}
				}),
				resolver("d", func(e *api.ServiceResolverConfigEntry) { e.Redirect = &api.ServiceResolverRedirect{Datacenter: "dc9"} }),
			),
			want: map[string]policy.Service{},
			diags: []string{"service-resolver/a Redirect.Peer skipped", "service-resolver/b Redirect.SamenessGroup skipped",
				"service-resolver/c Redirect skipped", "service-resolver/d Redirect.Datacenter skipped"},
		},
		{
			name: "resolver: failover \"*\" to datacenters, to a service, to targets; per-subset failover is a diagnostic",
			in: entries(
				resolver("a", func(e *api.ServiceResolverConfigEntry) {
					e.Failover = map[string]api.ServiceResolverFailover{"*": {Datacenters: []string{"dc2"}}}
				}),
				resolver("b", func(e *api.ServiceResolverConfigEntry) {
					e.Subsets = v1
					e.Failover = map[string]api.ServiceResolverFailover{
						"*":  {Service: "backup", ServiceSubset: "s", Datacenters: []string{"dc1", "dc2"}},
						"v1": {Service: "other"},
					}
				}),
				resolver("c", func(e *api.ServiceResolverConfigEntry) {
					e.Failover = map[string]api.ServiceResolverFailover{"*": {Service: "backup"}}
				}),
				resolver("d", func(e *api.ServiceResolverConfigEntry) {
					e.Failover = map[string]api.ServiceResolverFailover{"*": {Targets: []api.ServiceResolverFailoverTarget{{Datacenter: "dc2"}, {Service: "x", ServiceSubset: "y"}}}}
				}),
			),
			want: map[string]policy.Service{
				"a": {Failover: []policy.Target{{Service: "a", Datacenter: "dc2"}}},
				"b": {Subsets: polSubsets, Failover: []policy.Target{{Service: "backup", Subset: "s"}, {Service: "backup", Subset: "s", Datacenter: "dc2"}}},
				"c": {Failover: []policy.Target{{Service: "backup"}}},
				"d": {Failover: []policy.Target{{Service: "d", Datacenter: "dc2"}, {Service: "x", Subset: "y"}}},
			},
			diags: []string{`service-resolver/b Failover["v1"]`},
		},
		{
			name: "resolver: failover that cannot be named is left out, the rest kept",
			in: entries(
				resolver("a", func(e *api.ServiceResolverConfigEntry) {
					e.ConnectTimeout = time.Second
					e.Failover = map[string]api.ServiceResolverFailover{"*": {Datacenters: []string{"dc9"}}}
				}),
				resolver("b", func(e *api.ServiceResolverConfigEntry) {
					e.ConnectTimeout = time.Second
					e.Failover = map[string]api.ServiceResolverFailover{"*": {Targets: []api.ServiceResolverFailoverTarget{{Peer: "p"}}}}
				}),
				resolver("c", func(e *api.ServiceResolverConfigEntry) {
					e.ConnectTimeout = time.Second
					e.Failover = map[string]api.ServiceResolverFailover{"*": {SamenessGroup: "g"}}
				}),
			),
			want: map[string]policy.Service{
				"a": {ConnectTimeout: decode.Duration(time.Second)},
				"b": {ConnectTimeout: decode.Duration(time.Second)},
				"c": {ConnectTimeout: decode.Duration(time.Second)},
			},
			diags: []string{`service-resolver/a Failover["*"].Datacenters[0]`, `service-resolver/b Failover["*"].Targets[0].Peer`, `service-resolver/c Failover["*"].SamenessGroup`},
		},
		{
			name: "resolver: load balancers",
			in: entries(
				resolver("rh", func(e *api.ServiceResolverConfigEntry) {
					e.LoadBalancer = &api.LoadBalancer{Policy: "ring_hash", RingHashConfig: &api.RingHashConfig{MinimumRingSize: 1024, MaximumRingSize: 8192},
						HashPolicies: []api.HashPolicy{
							{Field: "header", FieldValue: "x-user"},
							{Field: "cookie", FieldValue: "sess", CookieConfig: &api.CookieConfig{TTL: time.Minute, Path: "/"}},
							{Field: "query_parameter", FieldValue: "id", Terminal: true},
							{SourceIP: true},
						}}
				}),
				resolver("lr", func(e *api.ServiceResolverConfigEntry) {
					e.LoadBalancer = &api.LoadBalancer{Policy: "least_request", LeastRequestConfig: &api.LeastRequestConfig{ChoiceCount: 3}}
				}),
				resolver("mg", func(e *api.ServiceResolverConfigEntry) {
					e.LoadBalancer = &api.LoadBalancer{Policy: "maglev", HashPolicies: []api.HashPolicy{{Field: "cookie", FieldValue: "s", CookieConfig: &api.CookieConfig{Session: true}}}}
				}),
				resolver("rr", func(e *api.ServiceResolverConfigEntry) { e.LoadBalancer = &api.LoadBalancer{Policy: "random"} }),
			),
			want: map[string]policy.Service{
				"rh": {LoadBalancer: &policy.LoadBalancer{Policy: "ring_hash", RingHash: &policy.RingHash{MinimumRingSize: 1024, MaximumRingSize: 8192},
					HashPolicies: []policy.HashPolicy{
						{Header: "x-user"},
						{Cookie: &policy.HashCookie{Name: "sess", TTL: decode.Duration(time.Minute), Path: "/"}},
						{QueryParameter: "id", Terminal: true},
						{SourceIP: true},
					}}},
				"lr": {LoadBalancer: &policy.LoadBalancer{Policy: "least_request", LeastRequest: &policy.LeastRequest{ChoiceCount: 3}}},
				"mg": {LoadBalancer: &policy.LoadBalancer{Policy: "maglev", HashPolicies: []policy.HashPolicy{{Cookie: &policy.HashCookie{Name: "s"}}}}},
				"rr": {LoadBalancer: &policy.LoadBalancer{Policy: "random"}},
			},
			diags: []string{"service-resolver/mg LoadBalancer.HashPolicies[0].CookieConfig.Session"},
		},
		{
			name: "resolver that the policy refuses is skipped, the protocol kept",
			in: entries(defaults("web", "http"), resolver("web", func(e *api.ServiceResolverConfigEntry) {
				e.LoadBalancer = &api.LoadBalancer{Policy: "round_robin", HashPolicies: []api.HashPolicy{{SourceIP: true}}}
			})),
			want:  map[string]policy.Service{"web": {Protocol: policy.ProtocolHTTP}},
			diags: []string{"service-resolver/web  skipped"},
		},
		{
			name: "splitter: weights with two decimals, services and subsets",
			in: entries(defaults("web", "http"), resolver("web", func(e *api.ServiceResolverConfigEntry) { e.Subsets = v1 }),
				splitter("web",
					api.ServiceSplit{Weight: 33.33, ServiceSubset: "v1"},
					api.ServiceSplit{Weight: 33.33, Service: "web", ServiceSubset: "v2"},
					api.ServiceSplit{Weight: 33.34, Service: "web-next"},
				)),
			want: map[string]policy.Service{"web": {Protocol: policy.ProtocolHTTP, Subsets: polSubsets, Split: []policy.Split{
				{Weight: 33.33, Subset: "v1"}, {Weight: 33.33, Subset: "v2"}, {Weight: 33.34, Service: "web-next"},
			}}},
		},
		{
			name: "splitter: header modifications are diagnostics; nested splitters skip the entry",
			in: entries(
				splitter("a", api.ServiceSplit{Weight: 100, RequestHeaders: &api.HTTPHeaderModifiers{Set: map[string]string{"x": "y"}}}),
				splitter("b", api.ServiceSplit{Weight: 50}, api.ServiceSplit{Weight: 50, Service: "c"}),
				splitter("c", api.ServiceSplit{Weight: 100, ServiceSubset: "v1"}),
				resolver("c", func(e *api.ServiceResolverConfigEntry) { e.Subsets = v1 }),
			),
			want: map[string]policy.Service{
				"a": {Split: []policy.Split{{Weight: 100}}},
				"c": {Subsets: polSubsets, Split: []policy.Split{{Weight: 100, Subset: "v1"}}},
			},
			diags: []string{"service-splitter/a Splits[0].RequestHeaders/ResponseHeaders", "service-splitter/b Splits[1].Service skipped"},
		},
		{
			name: "router: matches",
			in: entries(defaults("web", "http"), router("web",
				api.ServiceRoute{Match: httpMatch(api.ServiceRouteHTTPMatch{PathExact: "/exact", Methods: []string{"GET", "HEAD"}})},
				api.ServiceRoute{Match: httpMatch(api.ServiceRouteHTTPMatch{PathPrefix: "/pre", CaseInsensitive: true})},
				api.ServiceRoute{Match: httpMatch(api.ServiceRouteHTTPMatch{PathRegex: "/r/[0-9]+", CaseInsensitive: true})},
				api.ServiceRoute{Match: httpMatch(api.ServiceRouteHTTPMatch{Header: []api.ServiceRouteHTTPMatchHeader{
					{Name: "x-exact", Exact: "1"}, {Name: "x-prefix", Prefix: "p"}, {Name: "x-suffix", Suffix: "s"},
					{Name: "x-present", Present: true}, {Name: "x-regex", Regex: "a+", Invert: true},
				}})},
				api.ServiceRoute{Match: httpMatch(api.ServiceRouteHTTPMatch{QueryParam: []api.ServiceRouteHTTPMatchQueryParam{
					{Name: "e", Exact: "1"}, {Name: "r", Regex: "[a-z]"}, {Name: "p", Present: true},
				}})},
				api.ServiceRoute{},
			)),
			want: map[string]policy.Service{"web": {Protocol: policy.ProtocolHTTP, Routes: []policy.Route{
				{Match: policy.Match{Path: "/exact", Methods: []string{"GET", "HEAD"}}},
				{Match: policy.Match{Prefix: "/pre", CaseInsensitive: true}},
				{Match: policy.Match{Regex: "(?i)/r/[0-9]+"}},
				{Match: policy.Match{Headers: []policy.HeaderMatch{
					{Name: "x-exact", Exact: "1"}, {Name: "x-prefix", Prefix: "p"}, {Name: "x-suffix", Suffix: "s"},
					{Name: "x-present", Present: true}, {Name: "x-regex", Regex: "a+", Invert: true},
				}}},
				{Match: policy.Match{QueryParameters: []policy.QueryParameterMatch{{Name: "e", Exact: "1"}, {Name: "r", Regex: "[a-z]"}, {Name: "p", Present: true}}}},
				{},
			}}},
		},
		{
			name: "router: destinations, rewrite, timeout, retries (Consul's retry_on)",
			in: entries(defaults("web", "http"), resolver("web", func(e *api.ServiceResolverConfigEntry) { e.Subsets = v1 }),
				router("web",
					api.ServiceRoute{Match: httpMatch(api.ServiceRouteHTTPMatch{PathPrefix: "/a"}), Destination: &api.ServiceRouteDestination{
						ServiceSubset: "v2", PrefixRewrite: "/", RequestTimeout: 2 * time.Second, NumRetries: 3, RetryOnConnectFailure: true}},
					api.ServiceRoute{Match: httpMatch(api.ServiceRouteHTTPMatch{PathPrefix: "/b"}), Destination: &api.ServiceRouteDestination{
						Service: "api", RetryOnStatusCodes: []uint32{503, 429}}},
					api.ServiceRoute{Match: httpMatch(api.ServiceRouteHTTPMatch{PathPrefix: "/c"}), Destination: &api.ServiceRouteDestination{
						Service: "web", RetryOn: []string{"reset", "connect-failure", "unavailable"}, RetryOnConnectFailure: true, RetryOnStatusCodes: []uint32{500}}},
					api.ServiceRoute{Match: httpMatch(api.ServiceRouteHTTPMatch{PathPrefix: "/d"}), Destination: &api.ServiceRouteDestination{
						Service: "api", ServiceSubset: "x", NumRetries: 2}},
				)),
			want: map[string]policy.Service{"web": {Protocol: policy.ProtocolHTTP, Subsets: polSubsets, Routes: []policy.Route{
				{Match: policy.Match{Prefix: "/a"}, Destination: &policy.Target{Subset: "v2"}, PrefixRewrite: "/", Timeout: decode.Duration(2 * time.Second),
					Retry: &policy.Retry{On: []string{"connect-failure"}, NumRetries: u32(3)}},
				{Match: policy.Match{Prefix: "/b"}, Destination: &policy.Target{Service: "api"},
					Retry: &policy.Retry{On: []string{"retriable-status-codes"}, StatusCodes: []uint32{503, 429}}},
				{Match: policy.Match{Prefix: "/c"},
					Retry: &policy.Retry{On: []string{"reset", "connect-failure", "unavailable", "retriable-status-codes"}, StatusCodes: []uint32{500}}},
				{Match: policy.Match{Prefix: "/d"}, Destination: &policy.Target{Service: "api", Subset: "x"}},
			}}},
			diags: []string{"service-router/web Routes[3].Destination.NumRetries"},
		},
		{
			name: "router: a destination service with a splitter gets its shares inlined; the own splitter too",
			in: entries(defaults("web", "http"), defaults("api", "http"),
				// A share of api's naming web with a subset goes to web's
				// resolver, not to web's splitter.
				splitter("api", api.ServiceSplit{Weight: 90}, api.ServiceSplit{Weight: 10, Service: "api-next"}, api.ServiceSplit{Weight: 0, Service: "web", ServiceSubset: "v1"}),
				splitter("web", api.ServiceSplit{Weight: 50, Service: "web"}, api.ServiceSplit{Weight: 50, Service: "api", ServiceSubset: "v2"}),
				resolver("web", func(e *api.ServiceResolverConfigEntry) { e.Subsets = v1 }),
				resolver("api", func(e *api.ServiceResolverConfigEntry) { e.Subsets = v1 }),
				router("web",
					api.ServiceRoute{Match: httpMatch(api.ServiceRouteHTTPMatch{PathPrefix: "/api"}), Destination: &api.ServiceRouteDestination{Service: "api"}},
					api.ServiceRoute{Match: httpMatch(api.ServiceRouteHTTPMatch{PathPrefix: "/api-s"}), Destination: &api.ServiceRouteDestination{Service: "api", ServiceSubset: "v1"}},
					api.ServiceRoute{Match: httpMatch(api.ServiceRouteHTTPMatch{PathPrefix: "/own"})},
				)),
			want: map[string]policy.Service{
				"api": {Protocol: policy.ProtocolHTTP, Subsets: polSubsets, Split: []policy.Split{{Weight: 90}, {Weight: 10, Service: "api-next"}, {Weight: 0, Service: "web", Subset: "v1"}}},
				"web": {Protocol: policy.ProtocolHTTP, Subsets: polSubsets, Split: []policy.Split{{Weight: 50}, {Weight: 50, Service: "api", Subset: "v2"}}, Routes: []policy.Route{
					{Match: policy.Match{Prefix: "/api"}, Split: []policy.Split{{Weight: 90, Service: "api"}, {Weight: 10, Service: "api-next"}, {Weight: 0, Subset: "v1"}}},
					{Match: policy.Match{Prefix: "/api-s"}, Destination: &policy.Target{Service: "api", Subset: "v1"}},
					{Match: policy.Match{Prefix: "/own"}, Split: []policy.Split{{Weight: 50}, {Weight: 50, Service: "api", Subset: "v2"}}},
				}},
			},
		},
		{
			name: "router: unsupported tuning fields are diagnostics, the route kept",
			in: entries(defaults("web", "http"), router("web", api.ServiceRoute{Destination: &api.ServiceRouteDestination{
				IdleTimeout: time.Second, RequestHeaders: &api.HTTPHeaderModifiers{Add: map[string]string{"a": "b"}}}})),
			want: map[string]policy.Service{"web": {Protocol: policy.ProtocolHTTP, Routes: []policy.Route{{}}}},
			diags: []string{"service-router/web Routes[0].Destination.IdleTimeout",
				"service-router/web Routes[0].Destination.RequestHeaders/ResponseHeaders"},
		},
		{
			name: "router: a destination in another namespace, a nested splitter, a refused match: the entry is skipped",
			in: entries(
				router("a", api.ServiceRoute{Match: httpMatch(api.ServiceRouteHTTPMatch{PathPrefix: "/x"})},
					api.ServiceRoute{Destination: &api.ServiceRouteDestination{Service: "z", Namespace: "other"}}),
				router("b", api.ServiceRoute{Destination: &api.ServiceRouteDestination{Service: "s1"}}),
				splitter("s1", api.ServiceSplit{Weight: 100, Service: "s2"}),
				splitter("s2", api.ServiceSplit{Weight: 100, ServiceSubset: "v1"}),
				resolver("s2", func(e *api.ServiceResolverConfigEntry) { e.Subsets = v1 }),
				router("c", api.ServiceRoute{Match: httpMatch(api.ServiceRouteHTTPMatch{PathRegex: "("})}),
				router("d", api.ServiceRoute{Match: httpMatch(api.ServiceRouteHTTPMatch{Header: []api.ServiceRouteHTTPMatchHeader{{Name: "x"}}})}),
			),
			want: map[string]policy.Service{"s2": {Subsets: polSubsets, Split: []policy.Split{{Weight: 100, Subset: "v1"}}}},
			diags: []string{"service-router/a Routes[1].Destination skipped", "service-router/b Routes[0].Destination.Service skipped",
				"service-router/c Routes[0].Match.HTTP.PathRegex skipped", "service-router/d Routes[0].Match.HTTP.Header[0] skipped", "service-splitter/s1 Splits[0].Service skipped"},
		},
		{
			name: "router: a regex Envoy refuses skips the entry, naming the field; other routers are kept",
			in: entries(
				router("a", api.ServiceRoute{Match: httpMatch(api.ServiceRouteHTTPMatch{PathRegex: `/x\x{100}`})}),
				router("b", api.ServiceRoute{Match: httpMatch(api.ServiceRouteHTTPMatch{Header: []api.ServiceRouteHTTPMatchHeader{{Name: "x", Regex: "(?:a+?){33}"}}})}),
				router("c", api.ServiceRoute{Match: httpMatch(api.ServiceRouteHTTPMatch{QueryParam: []api.ServiceRouteHTTPMatchQueryParam{{Name: "q", Regex: "[a-z]{1,49}"}}})}),
				router("d", api.ServiceRoute{Match: httpMatch(api.ServiceRouteHTTPMatch{PathRegex: "[a-z]{1,48}"})}),
			),
			want: map[string]policy.Service{"d": {Routes: []policy.Route{{Match: policy.Match{Regex: "[a-z]{1,48}"}}}}},
			diags: []string{"service-router/a Routes[0].Match.HTTP.PathRegex skipped", "service-router/b Routes[0].Match.HTTP.Header[0].Regex skipped",
				"service-router/c Routes[0].Match.HTTP.QueryParam[0].Regex skipped"},
		},
		{
			name: "a destination naming a subset the other service's resolver lacks: the router is skipped",
			in: entries(resolver("api", func(e *api.ServiceResolverConfigEntry) { e.Subsets = v1 }),
				router("web", api.ServiceRoute{Destination: &api.ServiceRouteDestination{Service: "api", ServiceSubset: "v3"}})),
			want:  map[string]policy.Service{"api": {Subsets: polSubsets}},
			diags: []string{"service-router/web  skipped"},
		},
		{
			name:   "cluster names per datacenter",
			naming: &naming{template: "{service}.{datacenter}", local: "dc1", watched: []string{"dc2"}},
			in: entries(defaults("web", "http"), resolver("web", func(e *api.ServiceResolverConfigEntry) {
				e.Failover = map[string]api.ServiceResolverFailover{"*": {Datacenters: []string{"dc2"}}}
			}), splitter("web", api.ServiceSplit{Weight: 100, Service: "api"})),
			want: map[string]policy.Service{"web.dc1": {Protocol: policy.ProtocolHTTP, Failover: []policy.Target{{Service: "web.dc2"}},
				Split: []policy.Split{{Weight: 100, Service: "api.dc1"}}}},
		},
		{
			name:   "cluster names per datacenter, local name unknown: nothing",
			naming: &naming{template: "{service}.{datacenter}"},
			in:     entries(defaults("web", "http")),
			want:   map[string]policy.Service{},
			diags:  []string{"/web  skipped"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := localNaming
			if tt.naming != nil {
				n = *tt.naming
			}
			f, diags := convertEntries(tt.in, n)
			if errs := f.Check(); len(errs) > 0 {
				t.Errorf("the converted policy fails its check: %v", errs)
			}
			if d := cmp.Diff(tt.want, f.Services); d != "" {
				t.Errorf("policy (-want +got):\n%s", d)
			}
			var got []string
			for _, d := range diags {
				got = append(got, diagKey(d))
				if d.Message == "" || !strings.Contains(d.String(), d.Message) {
					t.Errorf("diagnostic without a message: %+v", d)
				}
			}
			want := append([]string(nil), tt.diags...)
			if d := cmp.Diff(sorted(want), sorted(got)); d != "" {
				t.Errorf("diagnostics (-want +got):\n%s\nall: %v", d, diags)
			}
		})
	}
}

// Whatever the entries, the converted policy passes its check: random
// combinations of the fields that can go wrong.
func TestConvertEntriesAlwaysChecks(t *testing.T) {
	subsets := []map[string]api.ServiceResolverSubset{nil, {"v1": {}}, {"bad name!": {}}}
	for i := 0; i < 200; i++ {
		pick := func(n int) int { return (i*7 + n*13) % (n + 1) }
		r := resolver("web", func(e *api.ServiceResolverConfigEntry) {
			e.Subsets = subsets[i%3]
			if i%4 == 0 {
				e.DefaultSubset = "v1"
			}
			if i%5 == 0 {
				e.ConnectTimeout = time.Duration(i) * time.Microsecond
			}
		})
		sp := splitter("web", api.ServiceSplit{Weight: float32(pick(3)) * 50, ServiceSubset: []string{"", "v1", "v2"}[i%3]})
		rt := router("web", api.ServiceRoute{
			Match:       httpMatch(api.ServiceRouteHTTPMatch{PathPrefix: []string{"", "/", "x"}[(i/3)%3], Methods: []string{[]string{"GET", "get"}[i%2]}}),
			Destination: &api.ServiceRouteDestination{ServiceSubset: []string{"", "v1", "v2"}[(i/9)%3], NumRetries: uint32(i % 150), RetryOnConnectFailure: i%2 == 0},
		})
		f, _ := convertEntries(entries(defaults("web", "http"), r, sp, rt), localNaming)
		if errs := f.Check(); len(errs) > 0 {
			t.Fatalf("case %d: %v", i, errs)
		}
	}
}

func ExampleDiagnostic() {
	d := Diagnostic{Kind: api.ServiceRouter, Name: "web", Field: "Routes[0].Destination.IdleTimeout", Message: "not supported"}
	fmt.Println(d)
	// Output: service-router/web Routes[0].Destination.IdleTimeout: not supported (ignored)
}

func sorted(s []string) []string {
	out := append([]string{}, s...)
	sort.Strings(out)
	return out
}

func TestIsSet(t *testing.T) {
	for _, c := range []struct {
		v    any
		want bool
	}{
		{(*api.TransparentProxyConfig)(nil), false},
		{&api.TransparentProxyConfig{}, false},
		{&api.TransparentProxyConfig{DialedDirectly: true}, true},
		{api.ExposeConfig{Paths: []api.ExposePath{}}, false},
		{api.ExposeConfig{Paths: []api.ExposePath{{Path: "/x"}}}, true},
		{api.MeshGatewayConfig{}, false},
		{api.MeshGatewayConfig{Mode: api.MeshGatewayModeLocal}, true},
		{0, false}, {5, true}, {"", false}, {"x", true},
		{(*uint32)(nil), false}, {u32(0), false}, {u32(1), true},
	} {
		if got := isSet(c.v); got != c.want {
			t.Errorf("isSet(%#v) = %v, want %v", c.v, got, c.want)
		}
	}
}

// With config_entries the source says it publishes a policy (the bridge
// then waits for both), leaves the config-entry watches their slots, and
// registers the diagnostics metric; without, none of it.
func TestConfigEntriesSetting(t *testing.T) {
	for _, on := range []bool{false, true} {
		reg := prometheus.NewRegistry()
		src, err := New("c", json.RawMessage(fmt.Sprintf(`{"max_concurrent_queries": 8, "config_entries": %v}`, on)), sources.Env{Metrics: reg})
		if err != nil {
			t.Fatal(err)
		}
		s := src.(*Source)
		if s.PublishesPolicy() != on {
			t.Errorf("config_entries %v: PublishesPolicy %v", on, s.PublishesPolicy())
		}
		slots := newRunner(s, nil).serviceSlots()
		if want := int64(7 - 2); on && slots != want-4 || !on && slots != want {
			t.Errorf("config_entries %v: %d service slots", on, slots)
		}
		if on {
			s.metrics.setDiagnostics([]Diagnostic{{Kind: api.ServiceRouter}, {Kind: api.ServiceRouter}, {Kind: ""}})
		}
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for _, mf := range mfs {
			if mf.GetName() != "xdsbridge_consul_config_entry_diagnostics" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "kind" {
						got[l.GetValue()] = m.GetGauge().GetValue()
					}
				}
			}
		}
		want := map[string]float64{}
		if on {
			want = map[string]float64{api.ServiceRouter: 2, "all": 1, api.ServiceDefaults: 0, api.ServiceSplitter: 0, api.ServiceResolver: 0}
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("config_entries %v: diagnostics metric (-want +got):\n%s", on, d)
		}
	}
}
