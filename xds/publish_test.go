package xds

import (
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/xdsbridge/xdsbridge/sources"
	"github.com/xdsbridge/xdsbridge/translate"
)

func names(c *Cache, typeURL string) []string {
	var out []string
	for _, r := range c.List(typeURL) {
		out = append(out, r.Name)
	}
	sort.Strings(out)
	return out
}

func withSubsets(name string, subsets ...string) translate.Resources {
	r, _ := translate.Service(sources.Service{Name: name})
	for _, s := range subsets {
		n := translate.SubsetCluster(name, s)
		cla, _ := translate.LoadAssignment(sources.Service{Name: n})
		r.Subsets = append(r.Subsets, translate.SubsetResources{Cluster: translate.Cluster(n), Load: cla})
	}
	return r
}

// A service's subset clusters are published with it; those it no longer
// has, and a removed service's, are removed.
func TestPublishServicesSubsets(t *testing.T) {
	c := NewCache()
	steps := []struct {
		changed []translate.Resources
		removed []string
		want    []string // clusters and assignments after
	}{
		{[]translate.Resources{withSubsets("web", "v1", "v2"), withSubsets("api", "canary")}, nil, []string{"api", "api/canary", "web", "web/v1", "web/v2"}},
		{[]translate.Resources{withSubsets("web", "v2", "v3")}, nil, []string{"api", "api/canary", "web", "web/v2", "web/v3"}},
		{[]translate.Resources{withSubsets("api")}, nil, []string{"api", "web", "web/v2", "web/v3"}},
		{nil, []string{"web"}, []string{"api"}},
		{[]translate.Resources{withSubsets("web", "v1")}, nil, []string{"api", "web", "web/v1"}},
	}
	for i, s := range steps {
		if err := c.PublishServices(s.changed, s.removed); err != nil {
			t.Fatal(err)
		}
		for _, typ := range []string{ClusterType, EndpointType} {
			if d := cmp.Diff(s.want, names(c, typ)); d != "" {
				t.Errorf("step %d: %s (-want +got):\n%s", i, typ, d)
			}
		}
		// Listeners and routes: one per service.
		var svcs []string
		for _, n := range s.want {
			if n == "web" || n == "api" {
				svcs = append(svcs, n)
			}
		}
		if d := cmp.Diff(svcs, names(c, RouteType)); d != "" {
			t.Errorf("step %d: routes (-want +got):\n%s", i, d)
		}
	}
}
