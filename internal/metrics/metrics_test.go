package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func testCounter() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "td_total", Help: "h"}, []string{"l"})
}

func TestRegister(t *testing.T) {
	if err := Register(nil, testCounter()); err != nil {
		t.Fatalf("nil registry: %v", err)
	}
	reg := prometheus.NewRegistry()
	a := testCounter()
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "td_gauge", Help: "h"})
	if err := Register(reg, a, g); err != nil {
		t.Fatal(err)
	}
	a.WithLabelValues("x").Inc()
	if n := testutil.CollectAndCount(reg); n != 2 {
		t.Errorf("%d series registered, want 2", n)
	}
	// The same metric again is an error, named.
	err := Register(reg, testCounter())
	if err == nil || !strings.Contains(err.Error(), "registering metrics: duplicate metrics collector registration attempted") {
		t.Errorf("second registration: %v", err)
	}
	// So is another metric of the name with other labels.
	err = Register(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "td_total", Help: "h"}))
	if err == nil || !strings.HasPrefix(err.Error(), "registering metrics: ") {
		t.Errorf("conflicting registration: %v", err)
	}
}

func TestShared(t *testing.T) {
	if c, err := Shared(nil, testCounter()); err != nil || c == nil {
		t.Fatalf("nil registry: %v %v", c, err)
	}
	reg := prometheus.NewRegistry()
	first, err := Shared(reg, testCounter())
	if err != nil {
		t.Fatal(err)
	}
	second, err := Shared(reg, testCounter())
	if err != nil || second != first {
		t.Fatalf("second instance got %p (%v), want the first's %p", second, err, first)
	}
	first.WithLabelValues("x").Inc()
	second.WithLabelValues("x").Inc()
	if v := testutil.ToFloat64(first.WithLabelValues("x")); v != 2 {
		t.Errorf("shared counter %v, want 2", v)
	}
	// A conflicting metric of the name (other type) is an error.
	if _, err := Shared(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "td_total", Help: "h"})); err == nil {
		t.Error("conflicting metric shared")
	}
}
