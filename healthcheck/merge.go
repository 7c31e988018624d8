package healthcheck

import (
	"time"

	"github.com/xdsbridge/xdsbridge/sources"
)

// Rule names the cell of the discovery × health-check matrix (or the
// precedence rule) that decided a host's published state.
type Rule string

const (
	// RuleDiscoveryOnly: no active check for the host; discovery decides.
	RuleDiscoveryOnly Rule = "discovered, no health check: source health stands"
	// RuleNotYetChecked: a check is configured but has no verdict yet; the
	// source's health stands until it has one.
	RuleNotYetChecked Rule = "discovered, not yet checked: source health stands"
	// RuleDiscoveredOK: discovered and the check passes: route.
	RuleDiscoveredOK Rule = "discovered, health check OK: route"
	// RuleDiscoveredFailed: discovered and the check fails: published UNHEALTHY.
	RuleDiscoveredFailed Rule = "discovered, health check failed: don't route (UNHEALTHY)"
	// RuleDrain: the source says DRAINING (drain or maintenance): it always wins.
	RuleDrain Rule = "source drains the host: DRAINING wins over health checks"
	// RuleRetained: absent from discovery but the check passes: keep routing.
	RuleRetained Rule = "absent from discovery, health check OK: retained (discovery may be down)"
	// RuleAbsentUnchecked: absent and no check (or no verdict yet): removed.
	RuleAbsentUnchecked Rule = "absent from discovery, no health check verdict: removed"
	// RuleAbsentFailed: absent and the check fails: removed.
	RuleAbsentFailed Rule = "absent from discovery, health check failed: removed"
	// RuleRetentionExpired: retained for the configured maximum: removed.
	RuleRetentionExpired Rule = "absent from discovery longer than max retention: removed"
)

// Decision is the published state of one host and why.
type Decision struct {
	// Publish is false when the host is left out of the service.
	Publish bool
	Health  sources.HealthStatus
	Rule    Rule
}

// Decide applies the discovery × health-check matrix to one host:
//
//	                      | check OK               | check failed
//	discovered            | route (HEALTHY)        | don't route (UNHEALTHY, published)
//	absent from discovery | keep routing (retained)| don't route, delete
//
// Precedence: a source's DRAINING (drain or maintenance) always wins; a
// passing active check outranks a source's UNHEALTHY or DEGRADED (active
// check data is more accurate than discovery's); with no check configured,
// or before a check's first verdict, the source's health stands.
//
// absentFor is how long the host has been absent (ignored when discovered);
// maxRetention 0 means retain without limit; otherwise a host absent for
// maxRetention or longer is removed.
func Decide(discovered bool, sourceHealth sources.HealthStatus, check Verdict, absentFor, maxRetention time.Duration) Decision {
	if discovered {
		if sourceHealth == sources.HealthDraining {
			return Decision{true, sources.HealthDraining, RuleDrain}
		}
		switch check {
		case Healthy:
			return Decision{true, sources.HealthHealthy, RuleDiscoveredOK}
		case Unhealthy:
			return Decision{true, sources.HealthUnhealthy, RuleDiscoveredFailed}
		case Unknown:
			return Decision{true, sourceHealth, RuleNotYetChecked}
		default:
			return Decision{true, sourceHealth, RuleDiscoveryOnly}
		}
	}
	switch check {
	case Healthy:
		if maxRetention > 0 && absentFor >= maxRetention {
			return Decision{false, sources.HealthUnknown, RuleRetentionExpired}
		}
		return Decision{true, sources.HealthHealthy, RuleRetained}
	case Unhealthy:
		return Decision{false, sources.HealthUnknown, RuleAbsentFailed}
	default:
		return Decision{false, sources.HealthUnknown, RuleAbsentUnchecked}
	}
}
