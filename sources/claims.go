package sources

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ClaimBefore reports whether source a ranks before source b for a service
// name both publish, so that a owns it: the higher priority (absent: 0),
// then the source listed first in order (a source not listed after every
// listed one), then the name. Ownership never depends on which source
// synced first.
func ClaimBefore(a, b string, order []string, priority map[string]int) bool {
	if pa, pb := priority[a], priority[b]; pa != pb {
		return pa > pb
	}
	ia, ib := slices.Index(order, a), slices.Index(order, b)
	if ia < 0 {
		ia = len(order)
	}
	if ib < 0 {
		ib = len(order)
	}
	if ia != ib {
		return ia < ib
	}
	return a < b
}

// Conflict is a service name that more than one source claims before
// running (StaticClaimer).
type Conflict struct {
	Service string
	// Sources claim it, ranked (ClaimBefore): the first owns it.
	Sources []string
}

// StaticPolicyConflicts lists the service names that more than one policy
// source gives a policy by name before running (StaticPolicyNamer), sorted
// by name, each with its sources in config order: the first one's policy
// is used.
func StaticPolicyConflicts(srcs []Source) ([]Conflict, error) {
	by := map[string][]string{}
	var errs []error
	for _, s := range srcs {
		p, ok := s.(StaticPolicyNamer)
		if !ok {
			continue
		}
		names, err := p.PolicyNames()
		if err != nil {
			errs = append(errs, fmt.Errorf("source %s: %w", s.Name(), err))
			continue
		}
		for _, n := range names {
			by[n] = append(by[n], s.Name())
		}
	}
	var out []Conflict
	for n, c := range by {
		if len(c) > 1 {
			out = append(out, Conflict{Service: n, Sources: c})
		}
	}
	slices.SortFunc(out, func(a, b Conflict) int { return strings.Compare(a.Service, b.Service) })
	return out, errors.Join(errs...)
}

// StaticConflicts lists the service names that more than one source claims
// before running (StaticClaimer: from their configs or files), sorted by
// name, each with its claimants ranked by ClaimBefore over the sources'
// order and priority. The error joins those of the sources that could not
// list their names.
func StaticConflicts(srcs []Source, priority map[string]int) ([]Conflict, error) {
	order := make([]string, len(srcs))
	for i, s := range srcs {
		order[i] = s.Name()
	}
	claimants := map[string][]string{}
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
			if !slices.Contains(claimants[n], s.Name()) {
				claimants[n] = append(claimants[n], s.Name())
			}
		}
	}
	var out []Conflict
	for n, c := range claimants {
		if len(c) < 2 {
			continue
		}
		slices.SortStableFunc(c, func(a, b string) int {
			switch {
			case ClaimBefore(a, b, order, priority):
				return -1
			case ClaimBefore(b, a, order, priority):
				return 1
			}
			return 0
		})
		out = append(out, Conflict{Service: n, Sources: c})
	}
	slices.SortFunc(out, func(a, b Conflict) int { return strings.Compare(a.Service, b.Service) })
	return out, errors.Join(errs...)
}
