package sources

import (
	"errors"
	"fmt"
)

// CheckClaims returns an error when two sources claim the same service
// name before running (StaticClaimer: from their configs or files). At run
// time the merge loop settles conflicts instead: the first owner keeps the
// name.
func CheckClaims(srcs []Source) error {
	owner := map[string]string{}
	var errs []error
	for _, s := range srcs {
		c, ok := s.(StaticClaimer)
		if !ok {
			continue
		}
		names, err := c.ClaimedNames()
		if err != nil {
			errs = append(errs, fmt.Errorf("source %s: %w", s.Name(), err))
			continue
		}
		for _, n := range names {
			if o, taken := owner[n]; taken && o != s.Name() {
				errs = append(errs, fmt.Errorf("service %q is claimed by sources %q and %q: a service name is owned by one source", n, o, s.Name()))
				continue
			}
			owner[n] = s.Name()
		}
	}
	return errors.Join(errs...)
}
