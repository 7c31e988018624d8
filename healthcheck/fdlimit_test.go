//go:build unix

package healthcheck

import (
	"strings"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// HTTP and gRPC checks that dial at every probe (reuse_connection: false)
// with the bridge out of file descriptors keep their verdicts, as TCP
// checks do (TestTCPCheckOutOfDescriptorsKeepsVerdict).
func TestDialingChecksOutOfDescriptorsKeepVerdict(t *testing.T) {
	noReuse := func(c *Config) {
		f := false
		c.ReuseConnection = &f
		c.UnhealthyThreshold = 2
		c.Interval = ms(100)
	}
	for _, typ := range []string{TypeHTTP, TypeGRPC} {
		t.Run(typ, func(t *testing.T) {
			var tg Target
			switch typ {
			case TypeHTTP:
				b := newHTTPBackend(t)
				tg = Target{Host: b.host, Check: httpCheck(100, noReuse)}
			case TypeGRPC:
				_, hs, cl := startGRPC(t, "127.0.0.1:0")
				hs.SetServingStatus("echo", healthpb.HealthCheckResponse_SERVING)
				tg = Target{Host: hostOf(cl.Addr()), Check: Config{Type: TypeGRPC, Timeout: ms(1000), GRPC: &GRPCConfig{ServiceName: "echo"}}}
				noReuse(&tg.Check)
			}
			h := startChecker(t, Options{}, tg)
			h.waitVerdict(tg.Key(), Healthy)
			outOfDescriptors(t, h, tg.Key())
			waitFor(t, "a probe that succeeds", func() bool { return h.state(tg.Key()).LastResult == "ok" })
		})
	}
}

// outOfDescriptors waits for a quiet moment between probes of key, takes
// the process's descriptors away for four probes and checks that they
// failed as the bridge's own error without changing the verdict.
func outOfDescriptors(t *testing.T, h *harness, key TargetKey) {
	t.Helper()
	waitFor(t, "a quiet moment between probes", func() bool {
		st := h.state(key)
		return !st.NextProbe.IsZero() && time.Until(st.NextProbe) > 30*time.Millisecond
	})
	restore := limitFDs(t)
	before := h.state(key).Probes
	st := h.waitProbes(key, before+4)
	restore()
	if st.Verdict != Healthy || st.ConsecutiveFailures != 0 {
		t.Errorf("out of descriptors, the verdict changed: %+v", st)
	}
	if st.LastResult != "error" || !strings.Contains(st.LastError, "too many open files") {
		t.Errorf("out of descriptors, last result %q, error %q", st.LastResult, st.LastError)
	}
}
