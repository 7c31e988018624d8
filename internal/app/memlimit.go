package app

import (
	"log/slog"
	"os"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xdsbridge/xdsbridge/config"
	"github.com/xdsbridge/xdsbridge/internal/memlimit"
	promreg "github.com/xdsbridge/xdsbridge/internal/metrics"
)

// ApplyMemoryLimit sets the runtime's soft memory limit as memory_limit
// says (internal/memlimit), logs it, and exports it as the gauge
// xdsbridge_memory_limit_bytes (0: none set by the bridge).
func ApplyMemoryLimit(c *config.Config, log *slog.Logger, reg prometheus.Registerer) error {
	s, err := memlimit.Parse(c.MemoryLimit)
	if err != nil {
		return err
	}
	r := memlimit.Apply(s, memlimit.DefaultCgroupRoot, os.Getenv)
	switch r.Source {
	case "cgroup":
		log.Info("memory limit set from the cgroup limit", "memory_limit_bytes", r.Limit, "cgroup_limit_bytes", r.Cgroup, "fraction", memlimit.Fraction)
	case "config":
		log.Info("memory limit set from memory_limit", "memory_limit_bytes", r.Limit)
	case "env":
		log.Info("memory limit set by GOMEMLIMIT (memory_limit not applied)", "memory_limit_bytes", r.Limit)
	default:
		log.Debug("no memory limit", "memory_limit", c.MemoryLimit, "reason", r.Source)
	}
	if reg != nil {
		g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "xdsbridge_memory_limit_bytes",
			Help: "The Go runtime's soft memory limit set at start (memory_limit; source: cgroup, config, env for GOMEMLIMIT), 0 when none (source none or off).",
		}, []string{"source"})
		g.WithLabelValues(r.Source).Set(float64(r.Limit))
		return promreg.Register(reg, g)
	}
	return nil
}
