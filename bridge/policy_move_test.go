package bridge

import (
	"testing"
	"time"

	"github.com/xdsbridge/xdsbridge/policy"
)

// A service whose policy moves to another key (or source) with the
// same content is not translated again (its options compare equal), and
// Policies must still say where its policy is now from.
func TestPoliciesFollowSameContentMove(t *testing.T) {
	rec := newRecorder()
	l := run(t, Options{Sources: []string{"a", "policy"}, Quiet: time.Millisecond}, rec)
	publish(t, l, "a", service("web", 1), service("api-eu", 1))
	publishPolicy(t, l, "policy", map[string]policy.Service{"web": {Protocol: policy.ProtocolGRPC}, "api-*": {Protocol: policy.ProtocolHTTP2}})
	rec.next(t)
	waitTrue(t, l.Ready)
	waitPolicies(t, l, "first", map[string]string{"web": "policy: web", "api-eu": "policy: api-*"})
	// api-eu now has a policy by name, the same as the pattern's; web's
	// changes (so that there is a publish to wait for).
	publishPolicy(t, l, "policy", map[string]policy.Service{"web": {Protocol: policy.ProtocolHTTP2}, "api-*": {Protocol: policy.ProtocolHTTP2}, "api-eu": {Protocol: policy.ProtocolHTTP2}})
	rec.next(t)
	waitPolicies(t, l, "after api-eu got a policy by name", map[string]string{"web": "policy: web", "api-eu": "policy: api-eu"})
}
