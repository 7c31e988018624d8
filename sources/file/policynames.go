package file

import (
	"sort"

	"github.com/xdsbridge/xdsbridge/policy"
)

// PolicyNames implements sources.StaticPolicyNamer for a policy file: the
// service names (not patterns) it gives a policy, sorted. A service file
// names none; a policy file that does not exist yet names none.
func (s *Source) PolicyNames() ([]string, error) {
	f, _, _, err := s.PolicyFile()
	if err != nil || f == nil {
		return nil, err
	}
	var out []string
	for name := range f.Services {
		if !policy.IsPattern(name) {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out, nil
}
