package translate

import (
	"fmt"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	maglev "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/maglev/v3"
	random "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/random/v3"
	ringhash "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/ring_hash/v3"
	roundrobin "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/round_robin/v3"
	wrrlocality "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/wrr_locality/v3"
	tls "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	upstreamhttp "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/xdsbridge/xdsbridge/policy"
)

// The same Cluster goes to Envoys and to proxyless gRPC clients (grpc-go
// validates it in internal/xds/xdsclient/xdsresource/unmarshal_cds.go,
// validateClusterAndConstructClusterUpdate, and NACKs what it cannot
// take). POLICY.md has the table of what each policy field becomes and
// what grpc-go does with it; in short:
//
//   - lb_policy: grpc-go takes ROUND_ROBIN, LEAST_REQUEST and RING_HASH and
//     NACKs every other value. maglev and random are therefore sent as a
//     load_balancing_policy list (gRFC A52) whose first entry is the
//     policy Envoy uses and whose second is the nearest policy grpc-go
//     has (it skips entries it does not know): ring_hash for maglev,
//     wrr_locality(round_robin) — what grpc-go makes of ROUND_ROBIN — for
//     random. lb_policy stays ROUND_ROBIN, which the list supersedes.
//   - ring_hash sizes: grpc-go caps the ring at 4096 entries
//     (GRPC_RING_HASH_CAP) and NACKs sizes over 8M, which Check refuses.
//   - HTTP/2 protocol options: grpc-go ignores them (gRPC is HTTP/2).
//   - connect_timeout: ignored by grpc-go.
//   - circuit breakers: grpc-go reads max_requests of the default priority
//     only.
//   - outlier detection: grpc-go runs success-rate and failure-percentage
//     ejection (gRFC A50), not consecutive_5xx nor
//     consecutive_gateway_failure; it takes interval, the ejection times
//     and max_ejection_percent.
//   - TLS: grpc-go NACKs every UpstreamTlsContext that names no
//     certificate provider instance of its own bootstrap (it ignores
//     trusted_ca). Options.GRPCCertificateProvider names one, which Envoy
//     ignores (measured). Without it the TLS context is sent anyway, with
//     a Diagnostic: leaving it out would make Envoys talk plaintext to
//     hosts that were declared to need TLS, and a gRPC client could not
//     reach those hosts without TLS either.

// Names of the typed extensions the clusters use.
const (
	httpProtocolOptionsKey = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
	tlsTransportSocket     = "envoy.transport_sockets.tls"
	// grpcRingHashCap is grpc-go's default cap on ring sizes
	// (GRPC_RING_HASH_CAP).
	grpcRingHashCap = 4096
)

// ServiceCluster is the cluster of the service name: Cluster(name) without
// a policy, else the EDS cluster with the policy's cluster settings:
// connect timeout, load balancer, upstream HTTP/2, circuit breakers,
// outlier detection and upstream TLS. The policy must pass its Check.
// Diagnostics say what gRPC clients will not honour (or refuse). A zero
// policy gives Cluster(name).
func (o Options) ServiceCluster(name string) (*cluster.Cluster, []Diagnostic) {
	p := o.Policy
	if p == nil {
		return Cluster(name), nil
	}
	c := Cluster(name)
	var diags []Diagnostic
	diag := func(field, format string, args ...any) {
		diags = append(diags, Diagnostic{name, field, fmt.Sprintf(format, args...)})
	}
	if d := p.ConnectTimeout.D(); d > 0 {
		c.ConnectTimeout = durationpb.New(d)
		diag("connect_timeout", "grpc clients ignore it (they wait up to 20s for a connection)")
	}
	if lb := p.LoadBalancer; lb != nil {
		loadBalancer(c, lb, diag)
	}
	if p.Protocol.HTTP2() {
		opts, _ := anypb.New(&upstreamhttp.HttpProtocolOptions{
			UpstreamProtocolOptions: &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig_{
				ExplicitHttpConfig: &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig{
					ProtocolConfig: &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{
						Http2ProtocolOptions: &core.Http2ProtocolOptions{},
					},
				},
			},
		})
		c.TypedExtensionProtocolOptions = map[string]*anypb.Any{httpProtocolOptionsKey: opts}
	}
	if cb := p.CircuitBreakers; cb != nil {
		circuitBreakers(c, cb, diag)
	}
	if od := p.OutlierDetection; od != nil {
		outlierDetection(c, od, diag)
	}
	if t := p.TLS; t != nil {
		upstreamTLS(c, name, t, o.GRPCCertificateProvider)
		if o.GRPCCertificateProvider == "" {
			diag("tls", "grpc clients NACK this cluster: they take an UpstreamTlsContext only with a certificate provider instance of their own bootstrap (trusted_ca is ignored); Envoys get TLS")
		} else {
			diag("tls", "grpc clients NACK this cluster unless their bootstrap defines certificate provider %q; with xds credentials they verify the hosts' chain with it, not the name (they read only the deprecated match_subject_alt_names); with other credentials they ignore TLS", o.GRPCCertificateProvider)
		}
	}
	return c, diags
}

type diagFunc func(field, format string, args ...any)

func loadBalancer(c *cluster.Cluster, lb *policy.LoadBalancer, diag diagFunc) {
	switch lb.Policy {
	case "", policy.LBRoundRobin:
		c.LbPolicy = cluster.Cluster_ROUND_ROBIN
	case policy.LBLeastRequest:
		c.LbPolicy = cluster.Cluster_LEAST_REQUEST
		if lr := lb.LeastRequest; lr != nil && lr.ChoiceCount != 0 {
			n := lr.ChoiceCount
			c.LbConfig = &cluster.Cluster_LeastRequestLbConfig_{LeastRequestLbConfig: &cluster.Cluster_LeastRequestLbConfig{
				ChoiceCount: wrapperspb.UInt32(n),
			}}
		}
	case policy.LBRingHash:
		c.LbPolicy = cluster.Cluster_RING_HASH
		if r := lb.RingHash; r != nil && (r.MinimumRingSize != 0 || r.MaximumRingSize != 0) {
			// XX_HASH, the default, is the one hash function grpc-go takes.
			cfg := &cluster.Cluster_RingHashLbConfig{HashFunction: cluster.Cluster_RingHashLbConfig_XX_HASH}
			if r.MinimumRingSize != 0 {
				cfg.MinimumRingSize = wrapperspb.UInt64(r.MinimumRingSize)
			}
			if r.MaximumRingSize != 0 {
				cfg.MaximumRingSize = wrapperspb.UInt64(r.MaximumRingSize)
			}
			c.LbConfig = &cluster.Cluster_RingHashLbConfig_{RingHashLbConfig: cfg}
			if max(r.MinimumRingSize, r.MaximumRingSize) > grpcRingHashCap {
				diag("load_balancer.ring_hash", "grpc clients cap the ring at %d entries (GRPC_RING_HASH_CAP)", grpcRingHashCap)
			}
		}
	case policy.LBMaglev:
		c.LoadBalancingPolicy = lbPolicies(
			typedPolicy("envoy.load_balancing_policies.maglev", &maglev.Maglev{}),
			typedPolicy("envoy.load_balancing_policies.ring_hash", &ringhash.RingHash{HashFunction: ringhash.RingHash_XX_HASH}),
		)
		diag("load_balancer.policy", "grpc clients have no maglev: they use ring_hash, the next policy of load_balancing_policy")
	case policy.LBRandom:
		c.LoadBalancingPolicy = lbPolicies(
			typedPolicy("envoy.load_balancing_policies.random", &random.Random{}),
			typedPolicy("envoy.load_balancing_policies.wrr_locality", &wrrlocality.WrrLocality{
				EndpointPickingPolicy: lbPolicies(typedPolicy("envoy.load_balancing_policies.round_robin", &roundrobin.RoundRobin{})),
			}),
		)
		diag("load_balancer.policy", "grpc clients have no random: they use round_robin (in wrr_locality), the next policy of load_balancing_policy")
	}
}

func typedPolicy(name string, m proto.Message) *cluster.LoadBalancingPolicy_Policy {
	a, _ := anypb.New(m)
	return &cluster.LoadBalancingPolicy_Policy{TypedExtensionConfig: &core.TypedExtensionConfig{Name: name, TypedConfig: a}}
}

func lbPolicies(ps ...*cluster.LoadBalancingPolicy_Policy) *cluster.LoadBalancingPolicy {
	return &cluster.LoadBalancingPolicy{Policies: ps}
}

func u32(v *uint32) *wrapperspb.UInt32Value {
	if v == nil {
		return nil
	}
	return wrapperspb.UInt32(*v)
}

// limit is a count that 0 leaves at its default, as everywhere in the
// policy (0 connections or requests would refuse every request).
func limit(v *uint32) *uint32 {
	if v == nil || *v == 0 {
		return nil
	}
	return v
}

func circuitBreakers(c *cluster.Cluster, cb *policy.CircuitBreakers, diag diagFunc) {
	cb = &policy.CircuitBreakers{
		MaxConnections:     limit(cb.MaxConnections),
		MaxPendingRequests: limit(cb.MaxPendingRequests),
		MaxRequests:        limit(cb.MaxRequests),
		MaxRetries:         cb.MaxRetries, // 0: no retry in flight
	}
	c.CircuitBreakers = &cluster.CircuitBreakers{Thresholds: []*cluster.CircuitBreakers_Thresholds{{
		Priority:           core.RoutingPriority_DEFAULT,
		MaxConnections:     u32(cb.MaxConnections),
		MaxPendingRequests: u32(cb.MaxPendingRequests),
		MaxRequests:        u32(cb.MaxRequests),
		MaxRetries:         u32(cb.MaxRetries),
	}}}
	for _, f := range []struct {
		name string
		v    *uint32
	}{
		{"max_connections", cb.MaxConnections},
		{"max_pending_requests", cb.MaxPendingRequests},
		{"max_retries", cb.MaxRetries},
	} {
		if f.v != nil {
			diag("circuit_breakers."+f.name, "grpc clients ignore it (they honour max_requests only)")
		}
	}
}

func outlierDetection(c *cluster.Cluster, od *policy.OutlierDetection, diag diagFunc) {
	zeroed := *od
	zeroed.Consecutive5xx = limit(od.Consecutive5xx)
	zeroed.ConsecutiveGatewayFailure = limit(od.ConsecutiveGatewayFailure)
	od = &zeroed
	o := &cluster.OutlierDetection{
		Consecutive_5Xx:           u32(od.Consecutive5xx),
		ConsecutiveGatewayFailure: u32(od.ConsecutiveGatewayFailure),
		MaxEjectionPercent:        u32(od.MaxEjectionPercent),
		EnforcingConsecutive_5Xx:  u32(od.EnforcingConsecutive5xx),
	}
	if od.ConsecutiveGatewayFailure != nil {
		// Envoy enforces gateway-failure ejections at 0% by default: a
		// threshold without enforcement would do nothing.
		o.EnforcingConsecutiveGatewayFailure = wrapperspb.UInt32(100)
	}
	if d := od.Interval.D(); d > 0 {
		o.Interval = durationpb.New(d)
	}
	if d := od.BaseEjectionTime.D(); d > 0 {
		o.BaseEjectionTime = durationpb.New(d)
	}
	if d := od.MaxEjectionTime.D(); d > 0 {
		o.MaxEjectionTime = durationpb.New(d)
	}
	c.OutlierDetection = o
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"consecutive_5xx", od.Consecutive5xx != nil},
		{"consecutive_gateway_failure", od.ConsecutiveGatewayFailure != nil},
		{"enforcing_consecutive_5xx", od.EnforcingConsecutive5xx != nil},
	} {
		if f.set {
			diag("outlier_detection."+f.name, "grpc clients ignore it: they eject on success rate and failure percentage (gRFC A50)")
		}
	}
}

// upstreamTLS sets the TLS transport socket: SNI (default: the service's
// name) and, with a CA file, verification of the chain and of the SNI as a
// DNS subject alternative name. A gRPC certificate provider instance, if
// given, is named in the validation context for gRPC clients; Envoy 1.40
// does not implement ca_certificate_provider_instance and verifies with
// trusted_ca as without it (measured: POLICY.md).
func upstreamTLS(c *cluster.Cluster, service string, t *policy.UpstreamTLS, grpcProvider string) {
	sni := t.SNI
	if sni == "" {
		sni = service
	}
	ctx := &tls.UpstreamTlsContext{Sni: sni, CommonTlsContext: &tls.CommonTlsContext{}}
	var vc *tls.CertificateValidationContext
	if t.CAFile != "" {
		vc = &tls.CertificateValidationContext{
			TrustedCa: &core.DataSource{Specifier: &core.DataSource_Filename{Filename: t.CAFile}},
			MatchTypedSubjectAltNames: []*tls.SubjectAltNameMatcher{{
				SanType: tls.SubjectAltNameMatcher_DNS,
				Matcher: &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: sni}},
			}},
		}
	}
	if grpcProvider != "" {
		if vc == nil {
			vc = &tls.CertificateValidationContext{}
		}
		vc.CaCertificateProviderInstance = &tls.CertificateProviderPluginInstance{InstanceName: grpcProvider}
	}
	if vc != nil {
		ctx.CommonTlsContext.ValidationContextType = &tls.CommonTlsContext_ValidationContext{ValidationContext: vc}
	}
	a, _ := anypb.New(ctx)
	c.TransportSocket = &core.TransportSocket{Name: tlsTransportSocket, ConfigType: &core.TransportSocket_TypedConfig{TypedConfig: a}}
}
