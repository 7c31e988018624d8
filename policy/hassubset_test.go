package policy

import "testing"

// TestServiceHasSubset: a subset is defined when the policy names it; a
// nil policy and a policy without subsets define none.
func TestServiceHasSubset(t *testing.T) {
	s := &Service{Subsets: map[string]Subset{"v1": {}}}
	for _, tt := range []struct {
		s    *Service
		name string
		want bool
	}{
		{s, "v1", true},
		{s, "v2", false},
		{&Service{}, "v1", false},
		{nil, "v1", false},
	} {
		if got := tt.s.HasSubset(tt.name); got != tt.want {
			t.Errorf("%+v.HasSubset(%q) = %v, want %v", tt.s, tt.name, got, tt.want)
		}
	}
}
