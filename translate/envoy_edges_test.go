package translate

import (
	"sort"
	"strings"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/xdsbridge/xdsbridge/policy"
)

// policyEdges is a policy file at the edges of what Check accepts: each
// service sets one group of fields to its extreme values.
const policyEdges = `
services:
  outlier-equal:
    outlier_detection: {base_ejection_time: 30s, max_ejection_time: 30s, interval: 1ms, max_ejection_percent: 100, enforcing_consecutive_5xx: 100, consecutive_5xx: 4294967295, consecutive_gateway_failure: 1}
  outlier-base-only:
    outlier_detection: {base_ejection_time: 24h}
  outlier-zeros:
    outlier_detection: {consecutive_5xx: 0, consecutive_gateway_failure: 0, max_ejection_percent: 0, enforcing_consecutive_5xx: 0}
  outlier-short:
    outlier_detection: {base_ejection_time: 1ms, max_ejection_time: 24h}
  breakers-zero:
    circuit_breakers: {max_connections: 0, max_pending_requests: 0, max_requests: 0, max_retries: 0}
  breakers-max:
    circuit_breakers: {max_connections: 4294967295, max_pending_requests: 4294967295, max_requests: 4294967295, max_retries: 4294967295}
  least-request:
    connect_timeout: 1ms
    load_balancer: {policy: least_request, least_request: {choice_count: 4294967295}}
  least-request-two:
    connect_timeout: 24h
    load_balancer: {policy: least_request, least_request: {choice_count: 2}}
  ring-small:
    load_balancer:
      policy: ring_hash
      ring_hash: {minimum_ring_size: 1, maximum_ring_size: 1}
      hash_policies:
        - {header: x-user, terminal: true}
        - {cookie: {name: "!#$%&'*+-.^_|~Ab9", ttl: 1s, path: "/a-b._~%20!$&'()*+,=:@"}}
        - {source_ip: true}
        - {query_parameter: "q a\u00e9"}
  ring-large:
    load_balancer:
      policy: ring_hash
      ring_hash: {minimum_ring_size: 131072, maximum_ring_size: 8388608}
      hash_policies: [{cookie: {name: session}}]
  maglev:
    load_balancer: {policy: maglev, hash_policies: [{header: ":authority"}]}
  random:
    load_balancer: {policy: random}
  routes:
    domains: ["*.example.com", "example.*", "a-b.example.com"]
    timeout: 24h
    retry:
      retry_on: [cancelled, deadline-exceeded, internal, resource-exhausted, unavailable, 5xx, gateway-error, reset, connect-failure, envoy-ratelimited, retriable-4xx, refused-stream, retriable-status-codes, http3-post-connect-failure]
      num_retries: 100
      base_interval: 1ms
      max_interval: 1ms
      per_try_timeout: 24h
      status_codes: [100, 599]
    routes:
      - match: {prefix: /a, case_insensitive: true}
        prefix_rewrite: /
        timeout: 1ms
      - match: {path: "/b c\u00e9"}
        prefix_rewrite: "/a-b._~%20!$&'()*+,;=:@"
      - match: {regex: '(?:[a-z]*)?/(?:[0-9]+)?xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'}
      - match:
          headers:
            - {name: x-r, range: {start: -9223372036854775808, end: 9223372036854775807}}
            - {name: x-p, present: true, invert: true}
            - {name: x-e, regex: '[a-z]{1,48}'}
          query_parameters: [{name: q, regex: '(?:a+?){32}'}]
          methods: [GET, HEAD, POST, PUT, DELETE, PATCH, OPTIONS, TRACE, CONNECT]
          fraction: 0.0001
      - match: {prefix: /f, fraction: 100}
        split:
          - {weight: 0.01}
          - {weight: 99.99, service: outlier-equal}
          - {weight: 0, service: random}
    split: [{weight: 100, service: maglev}]
`

// Every value Check accepts at the edges of the policy is accepted by
// Envoy 1.40 (clusters and route configurations, in one bootstrap) and
// by grpc-go; and
// what Check refuses because Envoy refuses it, Envoy does refuse, so the
// check is needed and the first half can fail.
func TestEnvoyAcceptsPolicyEdges(t *testing.T) {
	envoy := requireEnvoy(t)
	f, err := policy.ParseFile([]byte(policyEdges))
	if err != nil {
		t.Fatalf("the edges do not pass the check: %v", err)
	}
	names := make([]string, 0, len(f.Services))
	for n := range f.Services {
		names = append(names, n)
	}
	sort.Strings(names)
	var clusters []*cluster.Cluster
	rcs := map[string]*route.RouteConfiguration{}
	for _, n := range names {
		p := f.Services[n]
		c, _ := Options{Policy: &p}.ServiceCluster(n)
		clusters = append(clusters, c)
		rc, _ := RouteConfigFor(n, &p)
		rcs[n] = rc
		if err := (Resources{Cluster: c, Route: rc}).Validate(); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
	if out, ok := envoyValidate(t, envoy, clusters); !ok {
		t.Errorf("envoy refused the edge clusters:\n%s", tail(out, 5))
	}
	if out, err := envoyValidateRoutes(t, envoy, envoyBootstrap(t, rcs)); err != nil {
		t.Errorf("envoy refused the edge routes: %v\n%s", err, tail(out, 5))
	}

	t.Run("grpc-go routes", func(t *testing.T) {
		startGRPCRig(t).grpcRoutes(t, "edges", "routes", rcs["routes"])
	})
	t.Run("grpc-go clusters", func(t *testing.T) {
		// A split over every edge cluster: grpc-go subscribes to each.
		rig := startGRPCRig(t)
		rig.policyClusters = map[string]*cluster.Cluster{}
		var split []policy.Split
		w := float64(100 / len(clusters))
		for i, c := range clusters {
			rig.policyClusters[c.Name] = c
			if i == len(clusters)-1 {
				w = 100 - w*float64(len(clusters)-1)
			}
			split = append(split, policy.Split{Weight: w, Service: c.Name})
		}
		p := &policy.Service{Split: split}
		if errs := p.Check(); len(errs) > 0 {
			t.Fatal(errs)
		}
		rc, _ := RouteConfigFor("edges", p)
		rig.grpcRoutes(t, "edges-clusters", "edges", rc)
	})

	// Refused by Check, and by Envoy when sent anyway.
	for _, tc := range []struct {
		name, field, envoySays string
		p                      policy.Service
	}{
		{"max ejection time below base", "max_ejection_time", "max_ejection_time cannot be smaller than base_ejection_time",
			policy.Service{OutlierDetection: &policy.OutlierDetection{BaseEjectionTime: dur(60 * time.Second), MaxEjectionTime: dur(10 * time.Second)}}},
		{"max ejection time below the default base", "max_ejection_time", "max_ejection_time cannot be smaller than base_ejection_time",
			policy.Service{OutlierDetection: &policy.OutlierDetection{MaxEjectionTime: dur(10 * time.Second)}}},
		{"prefix rewrite with a newline", "prefix_rewrite", "PrefixRewrite: value does not match regex pattern",
			policy.Service{Routes: []policy.Route{{Match: policy.Match{Prefix: "/a"}, PrefixRewrite: "/a\nb"}}}},
		{"domain with NUL", "[0]", "Domains[1]: value does not match regex pattern",
			policy.Service{Domains: []string{"a\x00b"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := tc.p.Check("services", "x")
			if len(errs) != 1 || !strings.HasSuffix(policy.FieldPath(errs[0].Path), tc.field) {
				t.Fatalf("check: %v; want one error on %s", errs, tc.field)
			}
			c, _ := Options{Policy: &tc.p}.ServiceCluster("x")
			out, ok := envoyValidate(t, envoy, []*cluster.Cluster{c})
			if ok {
				rc, _ := RouteConfigFor("x", &tc.p)
				var rerr error
				out, rerr = envoyValidateRoutes(t, envoy, envoyBootstrap(t, map[string]*route.RouteConfiguration{"x": rc}))
				ok = rerr == nil
			}
			if ok || !strings.Contains(out, tc.envoySays) {
				t.Errorf("envoy (accepted: %v) does not say %q:\n%s", ok, tc.envoySays, tail(out, 5))
			}
		})
	}
}
