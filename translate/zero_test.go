package translate

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/xdsbridge/xdsbridge/policy"
)

// Zero follows one rule across the policy: a count, limit or duration of
// 0 publishes what leaving the field out publishes (the default). The
// durations (connect_timeout, timeout, routes[].timeout, the retry and
// outlier_detection durations, cookie.ttl) are that by construction: a
// decode.Duration of 0 is the one left out. The fields where 0 means
// something of its own are listed after, with that meaning. A count added
// to the policy belongs in one of the two lists.
func TestPolicyZeroIsTheDefault(t *testing.T) {
	zero := func() *uint32 { v := uint32(0); return &v }
	retry := func() *policy.Retry { return &policy.Retry{On: []string{"unavailable"}} }
	for _, tc := range []struct {
		field        string
		left, zeroed func(*policy.Service)
	}{
		{"circuit_breakers.max_connections", func(s *policy.Service) { s.CircuitBreakers = &policy.CircuitBreakers{} },
			func(s *policy.Service) { s.CircuitBreakers = &policy.CircuitBreakers{MaxConnections: zero()} }},
		{"circuit_breakers.max_pending_requests", func(s *policy.Service) { s.CircuitBreakers = &policy.CircuitBreakers{} },
			func(s *policy.Service) { s.CircuitBreakers = &policy.CircuitBreakers{MaxPendingRequests: zero()} }},
		{"circuit_breakers.max_requests", func(s *policy.Service) { s.CircuitBreakers = &policy.CircuitBreakers{} },
			func(s *policy.Service) { s.CircuitBreakers = &policy.CircuitBreakers{MaxRequests: zero()} }},
		{"outlier_detection.consecutive_5xx", func(s *policy.Service) { s.OutlierDetection = &policy.OutlierDetection{} },
			func(s *policy.Service) { s.OutlierDetection = &policy.OutlierDetection{Consecutive5xx: zero()} }},
		{"outlier_detection.consecutive_gateway_failure", func(s *policy.Service) { s.OutlierDetection = &policy.OutlierDetection{} },
			func(s *policy.Service) {
				s.OutlierDetection = &policy.OutlierDetection{ConsecutiveGatewayFailure: zero()}
			}},
		{"load_balancer.least_request.choice_count", func(s *policy.Service) { s.LoadBalancer = &policy.LoadBalancer{Policy: policy.LBLeastRequest} },
			func(s *policy.Service) {
				s.LoadBalancer = &policy.LoadBalancer{Policy: policy.LBLeastRequest, LeastRequest: &policy.LeastRequest{ChoiceCount: 0}}
			}},
		{"load_balancer.ring_hash.minimum_ring_size, maximum_ring_size", func(s *policy.Service) { s.LoadBalancer = &policy.LoadBalancer{Policy: policy.LBRingHash} },
			func(s *policy.Service) {
				s.LoadBalancer = &policy.LoadBalancer{Policy: policy.LBRingHash, RingHash: &policy.RingHash{}}
			}},
	} {
		t.Run(tc.field, func(t *testing.T) {
			left, zeroed := &policy.Service{Protocol: policy.ProtocolGRPC}, &policy.Service{Protocol: policy.ProtocolGRPC}
			if tc.left != nil {
				tc.left(left)
			}
			tc.zeroed(zeroed)
			if errs := zeroed.Check(); len(errs) > 0 {
				t.Fatalf("0 is refused: %v", errs)
			}
			cl, _ := Options{Policy: left}.ServiceCluster("s")
			cz, _ := Options{Policy: zeroed}.ServiceCluster("s")
			if !proto.Equal(cl, cz) {
				t.Errorf("cluster with 0:\n%v\nleft out:\n%v", cz, cl)
			}
			rl, _ := RouteConfigFor("s", left)
			rz, _ := RouteConfigFor("s", zeroed)
			if !proto.Equal(rl, rz) {
				t.Errorf("routes with 0:\n%v\nleft out:\n%v", rz, rl)
			}
		})
	}

	// Where 0 means something of its own.
	od := &policy.OutlierDetection{MaxEjectionPercent: zero(), EnforcingConsecutive5xx: zero()}
	cb := &policy.CircuitBreakers{MaxRetries: zero()}
	c, _ := Options{Policy: &policy.Service{OutlierDetection: od, CircuitBreakers: cb}}.ServiceCluster("s")
	o := c.GetOutlierDetection()
	if o.GetMaxEjectionPercent() == nil || o.GetMaxEjectionPercent().GetValue() != 0 {
		t.Errorf("outlier_detection.max_ejection_percent 0 (never eject) is %v", o.GetMaxEjectionPercent())
	}
	if o.GetEnforcingConsecutive_5Xx() == nil || o.GetEnforcingConsecutive_5Xx().GetValue() != 0 {
		t.Errorf("outlier_detection.enforcing_consecutive_5xx 0 (0 %%) is %v", o.GetEnforcingConsecutive_5Xx())
	}
	if th := c.GetCircuitBreakers().GetThresholds(); len(th) != 1 || th[0].GetMaxRetries() == nil || th[0].GetMaxRetries().GetValue() != 0 {
		t.Errorf("circuit_breakers.max_retries 0 (no retry in flight) is %v", th)
	}
	// retry.num_retries 0 is refused (at least 1: leave out retry for none).
	r := retry()
	r.NumRetries = zero()
	if errs := (&policy.Service{Retry: r}).Check(); len(errs) != 1 || errs[0].Path[len(errs[0].Path)-1] != "num_retries" {
		t.Errorf("retry.num_retries 0: %v, want refused", errs)
	}
}
