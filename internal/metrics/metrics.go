// Package metrics is how every package of the bridge registers its
// Prometheus collectors: Register for its own (a second registration of
// the same metric is an error), Shared for those several instances on one
// registry share (the health checkers, the TLS watchers of the listeners).
// Both do nothing on a nil registry and return errors, which constructors
// that return none turn into a panic, as prometheus.MustRegister would.
package metrics

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers each collector with reg, stopping at the first
// error. A nil reg registers nothing.
func Register(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	if reg == nil {
		return nil
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("registering metrics: %w", err)
		}
	}
	return nil
}

// Shared registers c with reg, or returns the collector of the same type
// already registered there with the same descriptors, which the caller
// then uses instead of c. A nil reg registers nothing and returns c.
func Shared[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if reg == nil {
		return c, nil
	}
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, fmt.Errorf("registering metrics: %w", err)
}
