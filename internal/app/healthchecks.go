package app

import (
	"fmt"

	"github.com/xdsbridge/xdsbridge/config"
	"github.com/xdsbridge/xdsbridge/config/decode"
	"github.com/xdsbridge/xdsbridge/healthcheck"
)

// healthChecksFromConfig parses the configured checks: per source (a
// source entry's health_check) and per service (health_checks.services),
// for healthcheck.NewManager. Errors name the field.
func healthChecksFromConfig(c *config.Config) (perSource, perService map[string]healthcheck.Config, err error) {
	perSource, perService = map[string]healthcheck.Config{}, map[string]healthcheck.Config{}
	for i, sc := range c.Sources {
		if len(sc.HealthCheck) == 0 {
			continue
		}
		hc, err := healthcheck.ParseConfig(sc.HealthCheck, fmt.Sprintf("sources[%d].health_check", i))
		if err != nil {
			return nil, nil, err
		}
		perSource[sc.Name] = hc
	}
	for name, raw := range c.HealthChecks.Services {
		hc, err := healthcheck.ParseConfig(raw, decode.FieldPath([]string{"health_checks", "services", name}))
		if err != nil {
			return nil, nil, err
		}
		perService[name] = hc
	}
	return perSource, perService, nil
}
