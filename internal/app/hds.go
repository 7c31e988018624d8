package app

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xdsbridge/xdsbridge/config"
	"github.com/xdsbridge/xdsbridge/hds"
	"github.com/xdsbridge/xdsbridge/healthcheck"
)

// buildHDS builds the HDS server health_checks.hds asks for (nil when not
// enabled), and the fallback for the targets its checkers cannot take.
func buildHDS(c config.HDS, log *slog.Logger, reg prometheus.Registerer) (*hds.Server, healthcheck.Fallback, error) {
	if !c.Enabled {
		return nil, 0, nil
	}
	s, err := hds.New(hds.Options{
		K:              c.K,
		Rule:           c.Rule,
		ReportInterval: c.ReportInterval.D(),
		Silence:        c.Silence.D(),
		Logger:         log,
		Metrics:        reg,
	})
	if err != nil {
		return nil, 0, err
	}
	fb := healthcheck.FallbackLocal
	if c.Fallback == config.HDSFallbackSource {
		fb = healthcheck.FallbackSource
	}
	return s, fb, nil
}
