package healthcheck

import (
	"testing"
	"time"

	"github.com/xdsbridge/xdsbridge/sources"
)

func TestDecideMatrix(t *testing.T) {
	const (
		H  = sources.HealthHealthy
		U  = sources.HealthUnhealthy
		D  = sources.HealthDraining
		DG = sources.HealthDegraded
		UK = sources.HealthUnknown
	)
	tests := []struct {
		name         string
		discovered   bool
		source       sources.HealthStatus
		check        Verdict
		absentFor    time.Duration
		maxRetention time.Duration
		want         Decision
	}{
		// The four cells of the matrix.
		{"discovered, check OK: route", true, UK, Healthy, 0, 0, Decision{true, H, RuleDiscoveredOK}},
		{"discovered, check failed: published unhealthy", true, H, Unhealthy, 0, 0, Decision{true, U, RuleDiscoveredFailed}},
		{"absent, check OK: retained", false, UK, Healthy, time.Hour, 0, Decision{true, H, RuleRetained}},
		{"absent, check failed: deleted", false, UK, Unhealthy, 0, 0, Decision{false, UK, RuleAbsentFailed}},
		// No check configured: discovery alone decides.
		{"discovered, no check: source health stands", true, DG, NoCheck, 0, 0, Decision{true, DG, RuleDiscoveryOnly}},
		{"discovered unhealthy, no check", true, U, NoCheck, 0, 0, Decision{true, U, RuleDiscoveryOnly}},
		{"absent, no check: removed", false, UK, NoCheck, 0, 0, Decision{false, UK, RuleAbsentUnchecked}},
		// Before the first verdict, the source's health stands; an absent
		// host with no verdict is not retained.
		{"discovered, pending: source health stands", true, U, Unknown, 0, 0, Decision{true, U, RuleNotYetChecked}},
		{"absent, pending: removed", false, UK, Unknown, 0, 0, Decision{false, UK, RuleAbsentUnchecked}},
		// Precedence: a passing check outranks the source's critical;
		// DRAINING always wins.
		{"source unhealthy, check OK: route", true, U, Healthy, 0, 0, Decision{true, H, RuleDiscoveredOK}},
		{"source draining, check OK: draining", true, D, Healthy, 0, 0, Decision{true, D, RuleDrain}},
		{"source draining, check failed: draining", true, D, Unhealthy, 0, 0, Decision{true, D, RuleDrain}},
		{"source draining, no check: draining", true, D, NoCheck, 0, 0, Decision{true, D, RuleDrain}},
		// Optional maximum retention.
		{"absent within max retention: retained", false, UK, Healthy, time.Minute, time.Hour, Decision{true, H, RuleRetained}},
		{"absent beyond max retention: removed", false, UK, Healthy, 2 * time.Hour, time.Hour, Decision{false, UK, RuleRetentionExpired}},
		{"absent just under max retention: retained", false, UK, Healthy, time.Hour - time.Nanosecond, time.Hour, Decision{true, H, RuleRetained}},
		{"absent for exactly max retention: removed", false, UK, Healthy, time.Hour, time.Hour, Decision{false, UK, RuleRetentionExpired}},
		{"absent beyond max retention, check failed: failed rule", false, UK, Unhealthy, 2 * time.Hour, time.Hour, Decision{false, UK, RuleAbsentFailed}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Decide(tt.discovered, tt.source, tt.check, tt.absentFor, tt.maxRetention)
			if got != tt.want {
				t.Fatalf("Decide = %+v, want %+v", got, tt.want)
			}
		})
	}
}
