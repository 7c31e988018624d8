package translate

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/xdsbridge/xdsbridge/policy"
)

// The RouteConfiguration of a service under its traffic policy.
//
// One RouteConfiguration per service, named after it, serves both kinds of
// client: gRPC clients resolving xds:///<service> (the APIListener names
// it) and Envoys whose HTTP connection manager asks for it over RDS/ADS.
// What one kind of client cannot do is still sent for the other and
// reported as a Diagnostic; nothing is sent that either kind rejects
// (grpc-go v1.85's checks are in internal/xds/xdsclient/xdsresource/
// unmarshal_rds.go: generateRetryConfig, routesProtoToSlice).
//
// Layout: one virtual host whose domains are the service's name then the
// policy's Domains; the policy's routes in order; last the default route
// (prefix "/") to the service's Split, else to the service's default
// target. Every route action carries the service's hash policies.
//
// Where a target goes (Policy.Redirect, DefaultSubset, Target):
//   - the service itself (Service empty or the service's name) without a
//     subset: the Redirect's target if there is one, else the
//     DefaultSubset's cluster, else the service's cluster;
//   - a subset of the service itself: SubsetCluster(service, subset), even
//     when the service is redirected (a route naming a subset means it);
//   - another service: its cluster (its name), or SubsetCluster(other,
//     subset). Whether it exists is not known here.
//   - a Datacenter cannot be expressed: cluster names of other datacenters
//     are the Consul source's (its mapping.cluster_name template, by
//     default "{service}", which merges every watched datacenter into one
//     cluster as failover priorities), unknown to the translator. The
//     datacenter is dropped, the target is its service (and subset) as
//     above, and a Diagnostic says so.
//
// Timeouts: Timeout is sent as RouteAction.timeout (Envoy) and as
// max_stream_duration.max_stream_duration (gRPC clients read only that,
// gRFC A31). A zero Timeout sets neither: Envoy's default route timeout
// (15s) applies to Envoys, none to gRPC clients.

// RouteConfigFor builds the RouteConfiguration of the service called name
// under policy p, and the Diagnostics of what clients cannot honour. A nil
// p is RouteConfig(name), as is the zero policy. p is assumed to pass its
// Check; it is not modified.
func RouteConfigFor(name string, p *policy.Service) (*route.RouteConfiguration, []Diagnostic) {
	return routeConfig(name, p, nil)
}

// routeConfig is RouteConfigFor with the policies of the other services the
// policy sends requests to (Options.Targets): a destination naming one of
// them without a subset goes where its own policy sends its default route
// (its redirect, else its default subset), as Consul's discovery chain
// does; one naming a subset it does not have is a Diagnostic.
func routeConfig(name string, p *policy.Service, targets map[string]*policy.Service) (*route.RouteConfiguration, []Diagnostic) {
	if p == nil {
		return RouteConfig(name), nil
	}
	b := &routeBuilder{name: name, p: p, targets: targets}
	b.hashPolicies()
	if r := p.Redirect; r != nil && r.Datacenter != "" {
		b.datacenter("redirect", *r)
	}
	if p.Retry != nil {
		b.retryDiags("retry", p.Retry)
	}
	vh := &route.VirtualHost{Name: name, Domains: b.domains()}
	for i := range p.Routes {
		if r := b.route(fmt.Sprintf("routes[%d]", i), &p.Routes[i]); r != nil {
			vh.Routes = append(vh.Routes, r)
		}
	}
	def := &route.Route{
		Match:  &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}},
		Action: &route.Route_Route{Route: b.action("", nil, p.Split, 0, nil)},
	}
	vh.Routes = append(vh.Routes, def)
	return &route.RouteConfiguration{Name: name, VirtualHosts: []*route.VirtualHost{vh}}, b.diags
}

// RouteClusters lists the clusters the routes of rc send to, each once,
// in order of first appearance.
func RouteClusters(rc *route.RouteConfiguration) []string {
	var out []string
	seen := map[string]bool{}
	add := func(c string) {
		if c != "" && !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	for _, vh := range rc.GetVirtualHosts() {
		for _, r := range vh.GetRoutes() {
			a := r.GetRoute()
			add(a.GetCluster())
			for _, wc := range a.GetWeightedClusters().GetClusters() {
				add(wc.GetName())
			}
		}
	}
	return out
}

type routeBuilder struct {
	name    string
	p       *policy.Service
	targets map[string]*policy.Service
	hash    []*route.RouteAction_HashPolicy
	diags   []Diagnostic
}

func (b *routeBuilder) diag(field, format string, args ...any) {
	b.diags = append(b.diags, Diagnostic{b.name, field, fmt.Sprintf(format, args...)})
}

func routeField(prefix, field string) string {
	if prefix == "" {
		return field
	}
	return prefix + "." + field
}

// domains are the service's name, then the policy's domains but the name
// again (Envoy refuses a domain twice in a RouteConfiguration, compared
// without case).
func (b *routeBuilder) domains() []string {
	out := []string{b.name}
	for i, d := range b.p.Domains {
		if strings.EqualFold(d, b.name) {
			b.diag(fmt.Sprintf("domains[%d]", i), "%q is the service's name, always a domain; dropped (Envoy refuses a domain twice)", d)
			continue
		}
		out = append(out, d)
	}
	return out
}

// target is the cluster a target names (see the comment at the top).
func (b *routeBuilder) target(field string, t policy.Target) string {
	if t.Datacenter != "" {
		b.datacenter(field, t)
	}
	switch {
	case t.Service != "" && t.Service != b.name && t.Subset != "":
		if tp, known := b.targets[t.Service]; known && !tp.HasSubset(t.Subset) {
			b.diag(field, "service %q has no subset %q in its policy: its cluster %s does not exist", t.Service, t.Subset, SubsetCluster(t.Service, t.Subset))
		}
		return SubsetCluster(t.Service, t.Subset)
	case t.Service != "" && t.Service != b.name:
		return b.other(t.Service)
	case t.Subset != "":
		return SubsetCluster(b.name, t.Subset)
	}
	return b.self()
}

// other is the cluster a request for another service goes to: where that
// service's policy sends its default route (its redirect's target, else
// its default subset), else all its hosts. One level: a redirect's
// target is taken as it is.
func (b *routeBuilder) other(service string) string {
	tp := b.targets[service]
	if tp == nil {
		return service
	}
	if r := tp.Redirect; r != nil {
		svc := r.Service
		if svc == "" {
			svc = service
		}
		if r.Subset != "" {
			return SubsetCluster(svc, r.Subset)
		}
		return svc
	}
	if tp.DefaultSubset != "" {
		return SubsetCluster(service, tp.DefaultSubset)
	}
	return service
}

// self is the cluster of the service itself without a subset.
func (b *routeBuilder) self() string {
	if r := b.p.Redirect; r != nil {
		svc := r.Service
		if svc == "" {
			svc = b.name
		}
		if r.Subset != "" {
			return SubsetCluster(svc, r.Subset)
		}
		if svc != b.name {
			return b.other(svc)
		}
		return svc
	}
	if b.p.DefaultSubset != "" {
		return SubsetCluster(b.name, b.p.DefaultSubset)
	}
	return b.name
}

func (b *routeBuilder) datacenter(field string, t policy.Target) {
	svc := t.Service
	if svc == "" {
		svc = b.name
	}
	b.diag(routeField(field, "datacenter"), "datacenter %q cannot be routed to: the clusters of other datacenters are named by the Consul source's cluster_name template, unknown here; sent to service %q's own cluster (with the default template, every datacenter's hosts, as failover priorities)", t.Datacenter, svc)
}

// route builds one policy route; field is "routes[i]". Nil when Envoy
// would refuse one of its regexes (see regexTooBig).
func (b *routeBuilder) route(field string, r *policy.Route) *route.Route {
	if b.regexTooBig(routeField(field, "match"), &r.Match) {
		return nil
	}
	if r.Retry != nil {
		b.retryDiags(routeField(field, "retry"), r.Retry)
	}
	a := b.action(field, r.Destination, r.Split, r.Timeout.D(), r.Retry)
	if r.PrefixRewrite != "" {
		a.PrefixRewrite = r.PrefixRewrite
		b.diag(routeField(field, "prefix_rewrite"), "gRPC clients cannot rewrite paths and ignore it (Envoy only)")
	}
	return &route.Route{
		Match:  b.match(routeField(field, "match"), &r.Match),
		Action: &route.Route_Route{Route: a},
	}
}

// action builds a route action: to the split if any, else to dest (nil:
// the service itself), with the timeout (0: the service's) and retry (nil:
// the service's). field is "" for the default route.
func (b *routeBuilder) action(field string, dest *policy.Target, split []policy.Split, timeout time.Duration, retry *policy.Retry) *route.RouteAction {
	a := &route.RouteAction{}
	if len(split) > 0 {
		if wc := b.weighted(routeField(field, "split"), split); wc != nil {
			a.ClusterSpecifier = &route.RouteAction_WeightedClusters{WeightedClusters: wc}
		}
	}
	if a.ClusterSpecifier == nil {
		c := b.self()
		if dest != nil {
			c = b.target(routeField(field, "destination"), *dest)
		}
		a.ClusterSpecifier = &route.RouteAction_Cluster{Cluster: c}
	}
	if timeout == 0 {
		timeout = b.p.Timeout.D()
	}
	if timeout > 0 {
		a.Timeout = durationpb.New(timeout)
		a.MaxStreamDuration = &route.RouteAction_MaxStreamDuration{MaxStreamDuration: durationpb.New(timeout)}
	}
	if retry == nil {
		retry = b.p.Retry
	}
	if retry != nil {
		a.RetryPolicy = retryPolicy(retry)
	}
	for _, h := range b.hash {
		a.HashPolicy = append(a.HashPolicy, proto.Clone(h).(*route.RouteAction_HashPolicy))
	}
	return a
}

// weighted builds weighted_clusters from a split: weights are
// percentages with 2 decimals, sent as integers (× 100). Shares of weight
// 0 are left out (gRPC clients skip them, Envoy never picks them), shares
// naming the same cluster are one share of their summed weight (at the
// first's place). Nil when no share is left: the policy's Check refuses
// that; the route then goes to the service itself.
func (b *routeBuilder) weighted(field string, split []policy.Split) *route.WeightedCluster {
	wc := &route.WeightedCluster{}
	at := map[string]*route.WeightedCluster_ClusterWeight{}
	for i, s := range split {
		c := b.target(fmt.Sprintf("%s[%d]", field, i), policy.Target{Service: s.Service, Subset: s.Subset})
		w := math.Round(s.Weight * 100)
		if !(w >= 1) || w > 10000 {
			continue
		}
		if cw, ok := at[c]; ok {
			cw.Weight = wrapperspb.UInt32(cw.Weight.GetValue() + uint32(w))
			continue
		}
		cw := &route.WeightedCluster_ClusterWeight{Name: c, Weight: wrapperspb.UInt32(uint32(w))}
		at[c] = cw
		wc.Clusters = append(wc.Clusters, cw)
	}
	if len(wc.Clusters) == 0 {
		b.diag(field, "no share has a weight above 0; the route goes to the service itself")
		return nil
	}
	return wc
}

// retryPolicy is a policy Retry as gRFC A44 and Envoy read it. grpc-go
// NACKs num_retries < 1 and a back-off whose base or max interval is not
// above 0: none is sent (policy.Check refuses them; a missing base
// interval leaves the back-off out).
func retryPolicy(r *policy.Retry) *route.RetryPolicy {
	rp := &route.RetryPolicy{RetryOn: strings.Join(r.On, ",")}
	if r.NumRetries != nil && *r.NumRetries >= 1 {
		rp.NumRetries = wrapperspb.UInt32(*r.NumRetries)
	}
	if base := r.BaseInterval.D(); base > 0 {
		rp.RetryBackOff = &route.RetryPolicy_RetryBackOff{BaseInterval: durationpb.New(base)}
		if max := r.MaxInterval.D(); max >= base {
			rp.RetryBackOff.MaxInterval = durationpb.New(max)
		}
	}
	if d := r.PerTryTimeout.D(); d > 0 {
		rp.PerTryTimeout = durationpb.New(d)
	}
	rp.RetriableStatusCodes = append(rp.RetriableStatusCodes, r.StatusCodes...)
	return rp
}

// grpcMaxRetries is what gRPC clients make of num_retries at most: 5
// attempts in all (gRFC A6, A44). grpc-go v1.85 does not cap retries
// configured over xDS (TestPolicyRoutesGRPCGoRetriesAndTimeouts).
const grpcMaxRetries = 4

// retryDiags reports what gRPC clients ignore of a retry policy.
func (b *routeBuilder) retryDiags(field string, r *policy.Retry) {
	var envoyOnly []string
	grpc := false
	for _, on := range r.On {
		if slices.Contains(policy.GRPCRetryOn, on) {
			grpc = true
		} else {
			envoyOnly = append(envoyOnly, on)
		}
	}
	switch {
	case !grpc:
		b.diag(routeField(field, "retry_on"), "no gRPC condition (%s): gRPC clients do not retry", strings.Join(policy.GRPCRetryOn, ", "))
	case len(envoyOnly) > 0:
		b.diag(routeField(field, "retry_on"), "gRPC clients ignore %s (Envoy only)", strings.Join(envoyOnly, ", "))
	}
	if n := r.NumRetries; n != nil && *n > grpcMaxRetries {
		b.diag(routeField(field, "num_retries"), "%d: gRFC A44 caps gRPC clients at 5 attempts, %d retries (grpc-go v1.85 does not: it makes all %d)", *n, grpcMaxRetries, *n+1)
	}
	if r.PerTryTimeout != 0 {
		b.diag(routeField(field, "per_try_timeout"), "gRPC clients ignore it (gRFC A44: not without hedging); Envoy only")
	}
}

// hashPolicies builds the hash policies of every route action. gRPC
// clients hash only headers (and filter state, which the policy does not
// have); they skip the others, and binary headers.
func (b *routeBuilder) hashPolicies() {
	lb := b.p.LoadBalancer
	if lb == nil {
		return
	}
	for i, h := range lb.HashPolicies {
		field := fmt.Sprintf("load_balancer.hash_policies[%d]", i)
		hp := &route.RouteAction_HashPolicy{Terminal: h.Terminal}
		switch {
		case h.Header != "":
			name := strings.ToLower(h.Header)
			hp.PolicySpecifier = &route.RouteAction_HashPolicy_Header_{Header: &route.RouteAction_HashPolicy_Header{HeaderName: name}}
			if strings.HasSuffix(name, "-bin") {
				b.diag(field+".header", "gRPC clients do not hash binary (-bin) headers (Envoy only)")
			}
		case h.Cookie != nil:
			c := &route.RouteAction_HashPolicy_Cookie{Name: h.Cookie.Name, Path: h.Cookie.Path}
			if ttl := h.Cookie.TTL.D(); ttl > 0 {
				c.Ttl = durationpb.New(ttl)
			}
			hp.PolicySpecifier = &route.RouteAction_HashPolicy_Cookie_{Cookie: c}
			b.diag(field+".cookie", "gRPC clients hash only headers and ignore it (Envoy only)")
		case h.SourceIP:
			hp.PolicySpecifier = &route.RouteAction_HashPolicy_ConnectionProperties_{ConnectionProperties: &route.RouteAction_HashPolicy_ConnectionProperties{SourceIp: true}}
			b.diag(field+".source_ip", "gRPC clients hash only headers and ignore it (Envoy only)")
		case h.QueryParameter != "":
			hp.PolicySpecifier = &route.RouteAction_HashPolicy_QueryParameter_{QueryParameter: &route.RouteAction_HashPolicy_QueryParameter{Name: h.QueryParameter}}
			b.diag(field+".query_parameter", "gRPC clients hash only headers and ignore it (Envoy only)")
		default:
			b.diag(field, "names nothing to hash; dropped")
			continue
		}
		b.hash = append(b.hash, hp)
	}
}

// match builds a route's match; field is "routes[i].match".
func (b *routeBuilder) match(field string, m *policy.Match) *route.RouteMatch {
	rm := &route.RouteMatch{}
	switch {
	case m.Path != "":
		rm.PathSpecifier = &route.RouteMatch_Path{Path: m.Path}
	case m.Regex != "":
		rm.PathSpecifier = &route.RouteMatch_SafeRegex{SafeRegex: &matcher.RegexMatcher{Regex: m.Regex}}
	case m.Prefix != "":
		rm.PathSpecifier = &route.RouteMatch_Prefix{Prefix: m.Prefix}
	default:
		rm.PathSpecifier = &route.RouteMatch_Prefix{Prefix: "/"}
	}
	if m.CaseInsensitive {
		// grpc-go v1.85 compares prefix and path without case when
		// case_sensitive is false (xdsresource/matcher_path.go); gRFC
		// A28's NACK is gone. Measured in TestPolicyRoutesGRPCGoRouting.
		if m.Regex != "" {
			b.diag(routeField(field, "case_insensitive"), "ignored with a regex (write (?i) in it)")
		} else {
			rm.CaseSensitive = wrapperspb.Bool(false)
		}
	}
	for i, h := range m.Headers {
		f := fmt.Sprintf("%s.headers[%d]", field, i)
		hm := headerMatcher(h)
		if hm == nil {
			b.diag(f, "matches nothing (give one of exact, prefix, suffix, contains, regex, present and range); dropped")
			continue
		}
		b.headerDiags(f, hm)
		rm.Headers = append(rm.Headers, hm)
	}
	if len(m.Methods) > 0 {
		hm := &route.HeaderMatcher{Name: ":method"}
		if len(m.Methods) == 1 {
			hm.HeaderMatchSpecifier = stringMatch(&matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: m.Methods[0]}})
		} else {
			hm.HeaderMatchSpecifier = stringMatch(&matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_SafeRegex{SafeRegex: &matcher.RegexMatcher{Regex: policy.MethodsRegex(m.Methods)}}})
		}
		rm.Headers = append(rm.Headers, hm)
		b.diag(routeField(field, "methods"), "gRPC clients choose the route before their transport adds \":method\": they never take this route")
	}
	for _, q := range m.QueryParameters {
		qm := &route.QueryParameterMatcher{Name: q.Name}
		switch {
		case q.Exact != "":
			qm.QueryParameterMatchSpecifier = &route.QueryParameterMatcher_StringMatch{StringMatch: &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: q.Exact}}}
		case q.Regex != "":
			qm.QueryParameterMatchSpecifier = &route.QueryParameterMatcher_StringMatch{StringMatch: &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_SafeRegex{SafeRegex: &matcher.RegexMatcher{Regex: q.Regex}}}}
		default:
			qm.QueryParameterMatchSpecifier = &route.QueryParameterMatcher_PresentMatch{PresentMatch: true}
		}
		rm.QueryParameters = append(rm.QueryParameters, qm)
	}
	if len(m.QueryParameters) > 0 {
		b.diag(routeField(field, "query_parameters"), "gRPC clients ignore every route that matches query parameters (gRFC A28): they never take this route")
	}
	if fr := m.Fraction; fr != nil {
		// MILLION holds 4 decimals of a percentage exactly, and is what
		// gRPC clients scale every denominator to.
		n := math.Round(*fr * 10000)
		n = max(0, min(n, 1_000_000))
		rm.RuntimeFraction = &core.RuntimeFractionalPercent{DefaultValue: &typev3.FractionalPercent{Numerator: uint32(n), Denominator: typev3.FractionalPercent_MILLION}}
	}
	return rm
}

func stringMatch(sm *matcher.StringMatcher) *route.HeaderMatcher_StringMatch {
	return &route.HeaderMatcher_StringMatch{StringMatch: sm}
}

// headerMatcher is a policy header match; nil when it names no match.
// Names are lower case, as HTTP/2 sends them and gRPC metadata holds them.
func headerMatcher(h policy.HeaderMatch) *route.HeaderMatcher {
	hm := &route.HeaderMatcher{Name: strings.ToLower(h.Name), InvertMatch: h.Invert}
	var sm matcher.StringMatcher
	switch {
	case h.Exact != "":
		sm.MatchPattern = &matcher.StringMatcher_Exact{Exact: h.Exact}
	case h.Prefix != "":
		sm.MatchPattern = &matcher.StringMatcher_Prefix{Prefix: h.Prefix}
	case h.Suffix != "":
		sm.MatchPattern = &matcher.StringMatcher_Suffix{Suffix: h.Suffix}
	case h.Contains != "":
		sm.MatchPattern = &matcher.StringMatcher_Contains{Contains: h.Contains}
	case h.Regex != "":
		sm.MatchPattern = &matcher.StringMatcher_SafeRegex{SafeRegex: &matcher.RegexMatcher{Regex: h.Regex}}
	case h.Present:
		hm.HeaderMatchSpecifier = &route.HeaderMatcher_PresentMatch{PresentMatch: true}
	case h.Range != nil:
		hm.HeaderMatchSpecifier = &route.HeaderMatcher_RangeMatch{RangeMatch: &typev3.Int64Range{Start: h.Range.Start, End: h.Range.End}}
	default:
		return nil
	}
	if sm.MatchPattern != nil {
		hm.HeaderMatchSpecifier = stringMatch(&sm)
	}
	return hm
}

// headerDiags reports header matches gRPC clients cannot honour as Envoy
// does. grpc-go (v1.85, measured in TestPolicyRoutesGRPCGoRouting)
// matches a call's routes against the metadata the application set, before
// its transport adds the headers Envoy sees: pseudo-headers, content-type,
// te, user-agent, grpc-* (grpc-timeout, ...). To gRPC clients those are
// absent: a present match fails, an inverted present match holds, every
// other match fails, inverted or not. Binary (-bin) headers are matched on
// their raw bytes, where Envoy sees base64 text (grpc-go's resolver means
// to drop them, and does when it knows the content-type): only a present
// match means the same to both.
func (b *routeBuilder) headerDiags(field string, hm *route.HeaderMatcher) {
	name := hm.Name
	switch {
	case strings.HasPrefix(name, ":"), name == "content-type", name == "te", name == "user-agent", strings.HasPrefix(name, "grpc-"):
		effect := "the match always fails for them: they never take this route"
		if hm.GetPresentMatch() && hm.InvertMatch {
			effect = "the match always holds for them"
		}
		b.diag(routeField(field, "name"), "gRPC clients choose the route before their transport adds %q: it is absent to them, %s", name, effect)
	case strings.HasSuffix(name, "-bin") && !hm.GetPresentMatch():
		b.diag(routeField(field, "name"), "gRPC clients match binary (-bin) headers on their raw bytes, Envoy on their base64 text: only a present match means the same to both")
	}
}

// regexTooBig reports, with a Diagnostic, the first regex of a route's
// match that gRPC clients or Envoy refuse (policy.RegexError): either
// would refuse the whole RouteConfiguration with it. The route cannot be sent
// without it (a route without one of its matchers takes requests it
// should not), so it is dropped. Policy.Check refuses such a regex
// first; this keeps the published routes safe from a policy that did
// not pass it.
func (b *routeBuilder) regexTooBig(field string, m *policy.Match) bool {
	type named struct{ field, re string }
	var res []named
	if m.Regex != "" {
		res = append(res, named{"regex", m.Regex})
	}
	for i, h := range m.Headers {
		if h.Regex != "" && h.Exact == "" && h.Prefix == "" && h.Suffix == "" && h.Contains == "" {
			res = append(res, named{fmt.Sprintf("headers[%d].regex", i), h.Regex})
		}
	}
	if len(m.Methods) > 1 {
		res = append(res, named{"methods", policy.MethodsRegex(m.Methods)})
	}
	for i, q := range m.QueryParameters {
		if q.Regex != "" && q.Exact == "" {
			res = append(res, named{fmt.Sprintf("query_parameters[%d].regex", i), q.Regex})
		}
	}
	for _, r := range res {
		if err := policy.RegexError(r.re); err != nil {
			b.diag(routeField(field, r.field), "%v; route dropped", err)
			return true
		}
	}
	return false
}
