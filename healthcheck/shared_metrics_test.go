package healthcheck

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/xdsbridge/xdsbridge/sources"
)

// Checkers on one registry share its collectors (internal/metrics.Shared):
// the targets gauge is then their total, not whichever checker set it
// last.
func TestSharedTargetsGauge(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := NewChecker(Options{Metrics: reg})
	b := NewChecker(Options{Metrics: reg})
	tgs := func(n int) []Target {
		var out []Target
		for i := range n {
			out = append(out, Target{Host: sources.HostKey{Address: "127.0.0.1", Port: uint32(1000 + i)}, Check: tcpCheck(1000)})
		}
		return out
	}
	if err := a.SetTargets(tgs(3)); err != nil {
		t.Fatal(err)
	}
	if err := b.SetTargets(tgs(2)); err != nil {
		t.Fatal(err)
	}
	if v := testutil.ToFloat64(a.m.targets); v != 5 {
		t.Errorf("targets gauge %v with 3 and 2 targets, want 5", v)
	}
	if err := a.SetTargets(tgs(1)); err != nil {
		t.Fatal(err)
	}
	if v := testutil.ToFloat64(b.m.targets); v != 3 {
		t.Errorf("targets gauge %v with 1 and 2 targets, want 3", v)
	}
}
