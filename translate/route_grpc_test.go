package translate

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"testing"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/xdsbridge/xdsbridge/policy"
)

// grpc-go's RDS validation (google.golang.org/grpc/internal/xds/
// xdsclient/xdsresource, v1.85) is internal: it cannot be imported. These
// are its rules that NACK a RouteConfiguration, restated from
// unmarshal_rds.go (unmarshalRouteConfigResource, routesProtoToSlice,
// generateRetryConfig, hashPoliciesProtoToSlice) and
// internal/xds/matcher/string_matcher.go (StringMatcherFromProto), plus
// what makes RPCs fail without a NACK (no virtual host for the target, a
// route action that is not a route). Real grpc-go clients take the same
// routes in route_grpcgo_test.go; this check runs on every route the
// unit tests build, and on unchecked input.

// checkGRPCAccepts fails t when grpc-go would NACK rc or fail RPCs for
// the target named as rc.
func checkGRPCAccepts(t *testing.T, rc *route.RouteConfiguration) {
	t.Helper()
	if err := grpcRDSCheck(rc); err != nil {
		t.Errorf("grpc-go would refuse the route configuration: %v", err)
	}
}

func grpcRDSCheck(rc *route.RouteConfiguration) error {
	if rc.GetName() == "" {
		return errors.New("empty resource name in route config resource")
	}
	found := false
	for _, vh := range rc.GetVirtualHosts() {
		for _, d := range vh.GetDomains() {
			found = found || d == rc.GetName()
		}
		if err := grpcRetryCheck(vh.GetRetryPolicy()); err != nil {
			return err
		}
		for i, r := range vh.GetRoutes() {
			if err := grpcRouteCheck(r); err != nil {
				return fmt.Errorf("virtual host %q route %d: %w", vh.GetName(), i, err)
			}
		}
	}
	if !found {
		return fmt.Errorf("no virtual host has the domain %q: RPCs to xds:///%s fail", rc.GetName(), rc.GetName())
	}
	return nil
}

func grpcRouteCheck(r *route.Route) error {
	m := r.GetMatch()
	if m == nil {
		return errors.New("no match")
	}
	if len(m.GetQueryParameters()) > 0 {
		return nil // the whole route is ignored
	}
	switch ps := m.GetPathSpecifier().(type) {
	case *route.RouteMatch_Prefix, *route.RouteMatch_Path:
	case *route.RouteMatch_SafeRegex:
		if _, err := regexp.Compile(ps.SafeRegex.GetRegex()); err != nil {
			return fmt.Errorf("invalid regex %q", ps.SafeRegex.GetRegex())
		}
	default:
		return fmt.Errorf("path specifier %T", ps)
	}
	for _, h := range m.GetHeaders() {
		var sm *matcher.StringMatcher
		switch hs := h.GetHeaderMatchSpecifier().(type) {
		case *route.HeaderMatcher_ExactMatch:
		case *route.HeaderMatcher_SafeRegexMatch:
			if _, err := regexp.Compile(hs.SafeRegexMatch.GetRegex()); err != nil {
				return fmt.Errorf("invalid regex %q", hs.SafeRegexMatch.GetRegex())
			}
		case *route.HeaderMatcher_RangeMatch, *route.HeaderMatcher_PresentMatch:
		case *route.HeaderMatcher_PrefixMatch:
			sm = &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Prefix{Prefix: hs.PrefixMatch}}
		case *route.HeaderMatcher_SuffixMatch:
			sm = &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Suffix{Suffix: hs.SuffixMatch}}
		case *route.HeaderMatcher_ContainsMatch:
			sm = &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Contains{Contains: hs.ContainsMatch}}
		case *route.HeaderMatcher_StringMatch:
			if hs.StringMatch == nil {
				return errors.New("empty string matcher")
			}
			sm = hs.StringMatch
		default:
			return fmt.Errorf("header matcher %T", hs)
		}
		if sm != nil {
			if err := grpcStringMatcherCheck(sm); err != nil {
				return fmt.Errorf("header %q: %w", h.GetName(), err)
			}
		}
	}
	a, ok := r.GetAction().(*route.Route_Route)
	if !ok {
		return fmt.Errorf("action %T: RPCs taking the route fail", r.GetAction())
	}
	for _, hp := range a.Route.GetHashPolicy() {
		if rr := hp.GetHeader().GetRegexRewrite(); rr != nil {
			if _, err := regexp.Compile(rr.GetPattern().GetRegex()); err != nil {
				return fmt.Errorf("hash policy regex %q", rr.GetPattern().GetRegex())
			}
		}
	}
	switch cs := a.Route.GetClusterSpecifier().(type) {
	case *route.RouteAction_Cluster:
		if cs.Cluster == "" {
			return errors.New("empty cluster name")
		}
	case *route.RouteAction_WeightedClusters:
		var total uint64
		for _, c := range cs.WeightedClusters.GetClusters() {
			if w := c.GetWeight().GetValue(); w > 0 {
				total += uint64(w)
				if total > math.MaxUint32 {
					return errors.New("total weight of clusters exceeds MaxUint32")
				}
				if c.GetName() == "" {
					return errors.New("weighted cluster without a name")
				}
			}
		}
		if total == 0 {
			return errors.New("no valid cluster in WeightedCluster action")
		}
	default:
		return fmt.Errorf("cluster specifier %T: the route is ignored", cs)
	}
	return grpcRetryCheck(a.Route.GetRetryPolicy())
}

func grpcStringMatcherCheck(sm *matcher.StringMatcher) error {
	switch p := sm.GetMatchPattern().(type) {
	case *matcher.StringMatcher_Exact:
	case *matcher.StringMatcher_Prefix:
		if p.Prefix == "" {
			return errors.New("empty prefix is not allowed in StringMatcher")
		}
	case *matcher.StringMatcher_Suffix:
		if p.Suffix == "" {
			return errors.New("empty suffix is not allowed in StringMatcher")
		}
	case *matcher.StringMatcher_Contains:
		if p.Contains == "" {
			return errors.New("empty contains is not allowed in StringMatcher")
		}
	case *matcher.StringMatcher_SafeRegex:
		if _, err := regexp.Compile(p.SafeRegex.GetRegex()); err != nil {
			return fmt.Errorf("safe_regex matcher %q is invalid", p.SafeRegex.GetRegex())
		}
	default:
		return fmt.Errorf("unrecognized string matcher %T", p)
	}
	return nil
}

func grpcRetryCheck(rp *route.RetryPolicy) error {
	if rp == nil {
		return nil
	}
	if n := rp.GetNumRetries(); n != nil && n.GetValue() < 1 {
		return fmt.Errorf("retry_policy.num_retries = %d; must be >= 1", n.GetValue())
	}
	if b := rp.GetRetryBackOff(); b != nil && b.GetBaseInterval().AsDuration() <= 0 {
		return fmt.Errorf("retry_policy.base_interval = %v; must be > 0", b.GetBaseInterval().AsDuration())
	}
	if m := rp.GetRetryBackOff().GetMaxInterval(); m != nil && m.AsDuration() <= 0 {
		return fmt.Errorf("retry_policy.max_interval = %v; must be > 0", m.AsDuration())
	}
	return nil
}

// The check refuses what grpc-go refuses: it can fail.
func TestGRPCRDSCheckRefuses(t *testing.T) {
	bad := func(mut func(*route.RouteConfiguration)) *route.RouteConfiguration {
		rc := RouteConfig("s")
		mut(rc)
		return rc
	}
	def := func(rc *route.RouteConfiguration) *route.RouteAction { return rc.VirtualHosts[0].Routes[0].GetRoute() }
	for name, rc := range map[string]*route.RouteConfiguration{
		"no domain":   bad(func(rc *route.RouteConfiguration) { rc.VirtualHosts[0].Domains = []string{"other"} }),
		"num_retries": bad(func(rc *route.RouteConfiguration) { def(rc).RetryPolicy = retryPolicyWithZeroRetries() }),
		"back-off": bad(func(rc *route.RouteConfiguration) {
			def(rc).RetryPolicy = &route.RetryPolicy{RetryOn: "unavailable", RetryBackOff: &route.RetryPolicy_RetryBackOff{}}
		}),
		"zero weights": bad(func(rc *route.RouteConfiguration) {
			def(rc).ClusterSpecifier = &route.RouteAction_WeightedClusters{WeightedClusters: &route.WeightedCluster{Clusters: []*route.WeightedCluster_ClusterWeight{{Name: "a"}}}}
		}),
		"empty prefix": bad(func(rc *route.RouteConfiguration) {
			rc.VirtualHosts[0].Routes[0].Match.Headers = []*route.HeaderMatcher{{Name: "x", HeaderMatchSpecifier: stringMatch(&matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Prefix{}})}}
		}),
	} {
		if grpcRDSCheck(rc) == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if err := grpcRDSCheck(RouteConfig("s")); err != nil {
		t.Errorf("default route: %v", err)
	}
}

func retryPolicyWithZeroRetries() *route.RetryPolicy {
	rp := retryPolicy(&policy.Retry{On: []string{"unavailable"}})
	rp.NumRetries = wrapperspb.UInt32(0)
	return rp
}
