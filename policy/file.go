package policy

import (
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/xdsbridge/xdsbridge/config/decode"
)

// File is a policy file: the policy of services, each under its name or
// under a name pattern (path.Match syntax: *, ?, [a-z]) that gives every
// matching service the same policy.
type File struct {
	Services map[string]Service `json:"services"`
}

// MaxFileErrors is how many problems ParseFile reports at most.
const MaxFileErrors = 20

// ParseFile decodes a policy file (YAML or JSON; unknown fields and keys
// given twice are errors) and checks it. Each problem is reported with its
// line and field:
//
//	line 12, column 9: services.web.routes[0].retry.num_retries: 0: want 1..100 (gRFC A44: at least 1)
//
// A file that does not decode gets the decoder's one error.
func ParseFile(data []byte) (*File, error) {
	var f File
	if err := decode.Strict(data, &f); err != nil {
		return nil, err
	}
	if f.Services == nil {
		return nil, errors.New("no services: (write `services: {}` for no policy)")
	}
	errs := f.Check()
	if len(errs) == 0 {
		return &f, nil
	}
	paths := make([][]string, len(errs))
	for i, e := range errs {
		paths[i] = e.Path
	}
	pos := decode.Positions(data, paths...)
	order := make([]int, len(errs))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(i, j int) bool {
		a, b := pos[order[i]], pos[order[j]]
		return a.Line < b.Line || a.Line == b.Line && a.Column < b.Column
	})
	var out []error
	for n, i := range order {
		if n == MaxFileErrors {
			out = append(out, fmt.Errorf("and %d more", len(errs)-n))
			break
		}
		if p := pos[i]; p.Line > 0 {
			out = append(out, fmt.Errorf("line %d, column %d: %w", p.Line, p.Column, errs[i]))
		} else {
			out = append(out, errs[i])
		}
	}
	return nil, errors.Join(out...)
}

// IsPattern reports whether a key of File.Services is a name pattern.
func IsPattern(key string) bool { return strings.ContainsAny(key, `*?[\`) }

// Check reports every problem of the file: each service's own (Service.
// Check), bad patterns, and destinations naming a subset that the policy
// this file gives the destination service does not have. A destination
// service the file says nothing about is left to the translator (another
// policy source may give it that subset).
func (f *File) Check() []*FieldError {
	var errs []*FieldError
	for _, key := range slices.Sorted(maps.Keys(f.Services)) {
		p := []string{"services", key}
		if key == "" {
			errs = append(errs, &FieldError{Path: p, Msg: "empty service name"})
			continue
		}
		if IsPattern(key) {
			if _, err := path.Match(key, ""); err != nil {
				errs = append(errs, &FieldError{Path: p, Msg: fmt.Sprintf("bad pattern %q: %v", key, err)})
				continue
			}
		}
		s := f.Services[key]
		errs = append(errs, s.Check(p...)...)
		errs = append(errs, f.checkTargets(p, &s)...)
	}
	return errs
}

// checkTargets checks that the subsets this service's routes, splits,
// redirect and failover name in other services exist in those services'
// policy from this file.
func (f *File) checkTargets(p []string, s *Service) []*FieldError {
	var errs []*FieldError
	check := func(field string, t Target) {
		if t.Service == "" || t.Subset == "" || t.Datacenter != "" {
			return
		}
		other, key, ok := f.For(t.Service)
		if !ok {
			return
		}
		if _, ok := other.Subsets[t.Subset]; !ok {
			errs = append(errs, &FieldError{Path: sub(p, field), Msg: fmt.Sprintf("service %q has no subset %q (its policy is services.%s)", t.Service, t.Subset, FieldPath([]string{key}))})
		}
	}
	splits := func(field string, ss []Split) {
		for i, sp := range ss {
			check(fmt.Sprintf("%s[%d]", field, i), Target{Service: sp.Service, Subset: sp.Subset})
		}
	}
	if s.Redirect != nil {
		check("redirect", *s.Redirect)
	}
	for i, t := range s.Failover {
		check(fmt.Sprintf("failover[%d]", i), t)
	}
	splits("split", s.Split)
	for i, r := range s.Routes {
		if r.Destination != nil {
			check(fmt.Sprintf("routes[%d].destination", i), *r.Destination)
		}
		splits(fmt.Sprintf("routes[%d].split", i), r.Split)
	}
	return errs
}

// For returns the policy the file gives the service called name, and the
// key it is under: the service's own entry, else the most specific
// pattern matching the name (the one with the most characters other than
// wildcards; of equals, the first in byte order). ok is false if there is
// none.
func (f *File) For(name string) (s Service, key string, ok bool) {
	if s, ok := f.Services[name]; ok {
		return s, name, true
	}
	best, bestLen := "", -1
	for _, k := range slices.Sorted(maps.Keys(f.Services)) {
		if !IsPattern(k) {
			continue
		}
		if m, err := path.Match(k, name); err != nil || !m {
			continue
		}
		if n := Specificity(k); n > bestLen {
			best, bestLen = k, n
		}
	}
	if bestLen < 0 {
		return Service{}, "", false
	}
	return f.Services[best], best, true
}

// Specificity counts a pattern's characters outside wildcards and classes:
// of two patterns matching a name, the one with more is the more specific.
func Specificity(p string) int {
	n, inClass := 0, false
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case inClass:
			if c == ']' {
				inClass = false
			}
		case c == '[':
			inClass = true
		case c == '*' || c == '?':
		case c == '\\':
			i++
			n++
		default:
			n++
		}
	}
	return n
}
