package translate

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/xdsbridge/xdsbridge/policy"
	"github.com/xdsbridge/xdsbridge/sources"
)

// hostsByPriority lists an assignment's hosts as "priority address:port".
func hostsByPriority(t *testing.T, r Result, cluster string) []string {
	t.Helper()
	cla := r.Load
	for _, s := range r.Subsets {
		if s.Load.GetClusterName() == cluster {
			cla = s.Load
		}
	}
	var out []string
	for _, g := range cla.GetEndpoints() {
		for _, e := range g.GetLbEndpoints() {
			a := e.GetEndpoint().GetAddress().GetSocketAddress()
			out = append(out, fmt.Sprintf("%d %s:%d", g.GetPriority(), a.GetAddress(), a.GetPortValue()))
		}
	}
	return out
}

// Failover targets' hosts follow the service's own, each target's
// priorities after those before it, in the service's assignment and in
// each of its subsets'; a datacenter, an unpublished service and a
// missing subset add nothing, with a diagnostic.
func TestFailoverPriorities(t *testing.T) {
	web := sources.Service{Name: "web", Endpoints: []sources.Endpoint{
		{Address: "10.0.0.1", Port: 80},
		{Address: "10.0.0.2", Port: 80, Priority: 1},
		{Address: "10.0.0.3", Port: 80, Metadata: sources.Metadata{"consul": {"meta.version": "2"}}},
	}}
	backup := &sources.Service{Name: "backup", Endpoints: []sources.Endpoint{{Address: "10.0.1.1", Port: 80}, {Address: "10.0.1.2", Port: 80, Priority: 1}}}
	other := &sources.Service{Name: "other", Endpoints: []sources.Endpoint{
		{Address: "10.0.2.1", Port: 80, Metadata: sources.Metadata{"consul": {"meta.version": "2"}}},
		{Address: "10.0.2.2", Port: 80},
	}}
	v2 := policy.Subset{Filter: `Service.Meta.version == "2"`}
	otherPolicy := &policy.Service{Subsets: map[string]policy.Subset{"v2": v2}}
	pol := &policy.Service{
		Subsets:  map[string]policy.Subset{"v2": v2},
		Failover: []policy.Target{{Service: "backup"}, {Datacenter: "dc2"}, {Service: "gone"}, {Service: "other", Subset: "v2"}, {Service: "other", Subset: "v9"}},
	}
	o := Options{Policy: pol, Failover: []FailoverTarget{
		{Target: pol.Failover[0], Service: backup},
		{Target: pol.Failover[1]},
		{Target: pol.Failover[2]},
		{Target: pol.Failover[3], Service: other, Policy: otherPolicy},
		{Target: pol.Failover[4], Service: other, Policy: otherPolicy},
	}}
	r := o.ServiceWithin(web, DefaultLimits())
	if r.Refused {
		t.Fatalf("refused: %v", r.Diagnostics)
	}
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	want := []string{"0 10.0.0.1:80", "0 10.0.0.3:80", "1 10.0.0.2:80", "2 10.0.1.1:80", "3 10.0.1.2:80", "4 10.0.2.1:80"}
	if d := cmp.Diff(want, hostsByPriority(t, r, "web")); d != "" {
		t.Errorf("web (-want +got):\n%s", d)
	}
	want = []string{"0 10.0.0.3:80", "1 10.0.1.1:80", "2 10.0.1.2:80", "3 10.0.2.1:80"}
	if d := cmp.Diff(want, hostsByPriority(t, r, "web/v2")); d != "" {
		t.Errorf("web/v2 (-want +got):\n%s", d)
	}
	var fields []string
	for _, d := range r.Diagnostics {
		fields = append(fields, d.Field)
	}
	if d := cmp.Diff([]string{"failover[1]", "failover[2]", "failover[4]"}, fields); d != "" {
		t.Errorf("diagnostics %v (-want +got):\n%s", r.Diagnostics, d)
	}
	// Without failover, the same service as before.
	plain := Options{Policy: &policy.Service{Subsets: pol.Subsets}}.ServiceWithin(web, DefaultLimits())
	if d := cmp.Diff([]string{"0 10.0.0.1:80", "0 10.0.0.3:80", "1 10.0.0.2:80"}, hostsByPriority(t, plain, "web")); d != "" {
		t.Errorf("no failover (-want +got):\n%s", d)
	}
}
