package consul

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/xdsbridge/xdsbridge/sources"
	"github.com/xdsbridge/xdsbridge/sources/consul/consultest"
)

// TestRecoveryAfterAgentKill runs a persistent single-server agent (its
// catalog survives restarts), kills it (SIGKILL) three times for 8 s —
// longer than the backoff grows to from the default retry_min — restarts
// it on the same ports and data directory, registers one more instance and
// checks the source publishes it within 2 s of the agent first answering
// /v1/status/leader with a leader.
func TestRecoveryAfterAgentKill(t *testing.T) {
	if testing.Short() {
		t.Skip("kills and restarts a Consul agent three times (about 45 s)")
	}
	a := consultest.StartPersistentAgent(t, "dc1")
	a.Register(ttlService("web-0", "web", "127.0.4.1", 9000, nil, nil, api.HealthPassing))
	s, sink := startSource(t, fmt.Sprintf(`{"address": %q, "coalesce": "10ms", "services": {"include": ["web"]}}`, a.Addr()))
	hasPort := func(port int) func([]sources.Update, []error) bool {
		return func(us []sources.Update, _ []error) bool {
			if len(us) == 0 {
				return false
			}
			for _, p := range webPorts(us[len(us)-1]) {
				if p == port {
					return true
				}
			}
			return false
		}
	}
	sink.WaitFor(t, waitLong, "web-0", hasPort(9000))

	var took []string
	for i := 1; i <= 3; i++ {
		errs := len(sink.Errors())
		a.Stop() // SIGKILL
		time.Sleep(8 * time.Second)
		// The bridge marks the source stale in /readyz on these Fail calls.
		if len(sink.Errors()) == errs {
			t.Errorf("run %d: no Fail call while the agent is down", i)
		}
		if d := s.DebugInfo().(Debug); !d.Stale {
			t.Errorf("run %d: DebugInfo while the agent is down: stale=false", i)
		}
		a.Start()
		serving := waitLeaderAnswer(t, a)
		port := 9000 + i
		a.Register(ttlService(fmt.Sprintf("web-%d", i), "web", "127.0.4.1", port, nil, nil, api.HealthPassing))
		sink.WaitFor(t, 10*time.Second, fmt.Sprintf("web-%d", i), hasPort(port))
		d := time.Since(serving)
		took = append(took, d.Round(time.Millisecond).String())
		t.Logf("run %d: web-%d published %v after the agent answered with a leader", i, i, d)
		if d > 2*time.Second {
			t.Errorf("run %d: published %v after the agent served again, want ≤ 2s", i, d)
		}
		a.WaitLeader()
		waitFor(t, "DebugInfo to stop showing stale data", func() bool { return !s.DebugInfo().(Debug).Stale })
	}
	t.Logf("recovery times: %s", strings.Join(took, ", "))
}

// waitLeaderAnswer polls /v1/status/leader every 10 ms until it names a
// leader and returns when it first did.
func waitLeaderAnswer(t *testing.T, a *agent) time.Time {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if l, err := a.Client.Status().Leader(); err == nil && l != "" {
			return time.Now()
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("the restarted agent named no leader (%s); log:\n%s", a.State(), a.Log.String())
	return time.Time{}
}
