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

// RankClaimants sorts the sources claiming one name by ClaimBefore: the
// first owns it.
func RankClaimants(claimants, order []string, priority map[string]int) {
	slices.SortStableFunc(claimants, func(a, b string) int {
		switch {
		case ClaimBefore(a, b, order, priority):
			return -1
		case ClaimBefore(b, a, order, priority):
			return 1
		}
		return 0
	})
}

// StaticConflicts lists the service names that more than one source claims
// before running (StaticClaimer: from their configs or files), sorted by
// name, each with its claimants ranked by ClaimBefore over the sources'
// order and priority. The error joins those of the sources that could not
// list their names.
func StaticConflicts(srcs []Source, priority map[string]int) ([]Conflict, error) {
	out, err := staticConflicts(srcs, func(s Source) ([]string, error) {
		if c, ok := s.(StaticClaimer); ok {
			return c.ClaimedNames()
		}
		return nil, nil
	})
	order := make([]string, len(srcs))
	for i, s := range srcs {
		order[i] = s.Name()
	}
	for _, c := range out {
		RankClaimants(c.Sources, order, priority)
	}
	return out, err
}

// StaticPolicyConflicts lists the service names that more than one policy
// source gives a policy by name before running (StaticPolicyNamer), sorted
// by name, each with its sources in config order: the first one's policy
// is used.
func StaticPolicyConflicts(srcs []Source) ([]Conflict, error) {
	return staticConflicts(srcs, func(s Source) ([]string, error) {
		if p, ok := s.(StaticPolicyNamer); ok {
			return p.PolicyNames()
		}
		return nil, nil
	})
}

// staticConflicts lists the names that names gives for more than one
// source, sorted, each with its sources in the order of srcs. The error
// joins those of names.
func staticConflicts(srcs []Source, names func(Source) ([]string, error)) ([]Conflict, error) {
	by := map[string][]string{}
	var errs []error
	for _, s := range srcs {
		ns, err := names(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("source %s: %w", s.Name(), err))
			continue
		}
		for _, n := range ns {
			if !slices.Contains(by[n], s.Name()) {
				by[n] = append(by[n], s.Name())
			}
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
