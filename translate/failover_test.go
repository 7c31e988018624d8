package translate

import (
	"fmt"
	"strings"
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

// An address is listed once per assignment, at its highest priority: a
// failover to the service itself, to a subset of it, or to a service
// sharing hosts adds only the hosts not yet listed, and says so.
func TestFailoverDuplicateAddress(t *testing.T) {
	back := sources.Service{Name: "back", Endpoints: []sources.Endpoint{
		{Address: "10.0.0.1", Port: 80, Metadata: sources.Metadata{"consul": {"meta.version": "1"}}},
		{Address: "10.0.0.2", Port: 80},
	}}
	shared := &sources.Service{Name: "shared", Endpoints: []sources.Endpoint{
		{Address: "10.0.0.2", Port: 80},
		{Address: "::ffff:10.0.0.2", Port: 81},
		{Address: "10.0.9.1", Port: 80, Priority: 3},
	}}
	v1 := policy.Subset{Filter: `Service.Meta.version == "1"`}
	pol := &policy.Service{
		Subsets:  map[string]policy.Subset{"v1": v1},
		Failover: []policy.Target{{Service: "back"}, {Service: "back", Subset: "v1"}, {Service: "shared"}},
	}
	o := Options{Policy: pol, Failover: []FailoverTarget{
		{Target: pol.Failover[0], Service: &back},
		{Target: pol.Failover[1], Service: &back, Policy: pol},
		{Target: pol.Failover[2], Service: shared},
	}}
	r := o.ServiceWithin(back, DefaultLimits())
	if r.Refused {
		t.Fatalf("refused: %v", r.Diagnostics)
	}
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	want := []string{"0 10.0.0.1:80", "0 10.0.0.2:80", "1 10.0.0.2:81", "2 10.0.9.1:80"}
	if d := cmp.Diff(want, hostsByPriority(t, r, "back")); d != "" {
		t.Errorf("back (-want +got):\n%s", d)
	}
	// The subset fails over to all of back's hosts: those it lacks.
	want = []string{"0 10.0.0.1:80", "1 10.0.0.2:80", "2 10.0.0.2:81", "3 10.0.9.1:80"}
	if d := cmp.Diff(want, hostsByPriority(t, r, "back/v1")); d != "" {
		t.Errorf("back/v1 (-want +got):\n%s", d)
	}
	var got []string
	for _, d := range r.Diagnostics {
		got = append(got, d.Field+": "+d.Message)
	}
	want = []string{
		`failover[0]: service "back" is the service itself: its hosts are already listed; nothing added`,
		`failover[1]: every host of subset "v1" of service "back" (1) is already listed at a higher priority (each address is listed once); nothing added`,
		`failover[2]: 1 of the 3 hosts of service "shared" are already listed at a higher priority (each address is listed once); the other 2 added`,
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("diagnostics (-want +got):\n%s", d)
	}
	if r.FailoverEndpoints != 2+3 {
		t.Errorf("FailoverEndpoints = %d, want 5 (2 to back, 3 to back/v1)", r.FailoverEndpoints)
	}
}

// manyHosts returns n endpoints, 10.<base>.x.y:80.
func manyHosts(base, n int) []sources.Endpoint {
	eps := make([]sources.Endpoint, n)
	for i := range eps {
		eps[i] = sources.Endpoint{Address: fmt.Sprintf("10.%d.%d.%d", base, i/256, i%256), Port: 80}
	}
	return eps
}

// What failover adds is bounded: per assignment (a target that would go
// over adds nothing), across the catalog (the budget the merge loop
// passes), and by the encoded size; in each case the service's own hosts
// stay and a diagnostic names the failover target and the limit.
func TestFailoverLimits(t *testing.T) {
	web := sources.Service{Name: "web", Endpoints: manyHosts(0, 3)}
	big := &sources.Service{Name: "big", Endpoints: manyHosts(1, 8)}
	small := &sources.Service{Name: "small", Endpoints: manyHosts(2, 2)}
	pol := &policy.Service{Failover: []policy.Target{{Service: "big"}, {Service: "small"}}}
	o := Options{Policy: pol, Failover: []FailoverTarget{{Target: pol.Failover[0], Service: big}, {Target: pol.Failover[1], Service: small}}}
	count := func(r Result) int {
		n := 0
		for _, g := range r.Load.GetEndpoints() {
			n += len(g.GetLbEndpoints())
		}
		return n
	}
	fields := func(r Result) []string {
		var out []string
		for _, d := range r.Diagnostics {
			out = append(out, d.Field)
		}
		return out
	}
	lim := DefaultLimits()
	if r := o.ServiceWithin(web, lim); count(r) != 13 || r.FailoverEndpoints != 10 || len(r.Diagnostics) != 0 {
		t.Fatalf("within the limits: %d hosts, %d by failover, %v; want 13, 10, none", count(r), r.FailoverEndpoints, r.Diagnostics)
	}

	lim.MaxAssignmentEndpoints = 10
	r := o.ServiceWithin(web, lim)
	if count(r) != 5 || r.FailoverEndpoints != 2 || r.Exceeded[LimitAssignmentEndpoints] != 1 {
		t.Errorf("max_assignment_endpoints 10: %d hosts, %d by failover, exceeded %v; want 5 (big dropped), 2, 1", count(r), r.FailoverEndpoints, r.Exceeded)
	}
	if d := cmp.Diff([]string{"failover[0]"}, fields(r)); d != "" || !strings.Contains(r.Diagnostics[0].Message, LimitAssignmentEndpoints) {
		t.Errorf("diagnostics %v (-want +got):\n%s", r.Diagnostics, d)
	}
	// Own hosts over the limit are all served; failover adds nothing.
	lim.MaxAssignmentEndpoints = 2
	if r := o.ServiceWithin(web, lim); count(r) != 3 || r.FailoverEndpoints != 0 {
		t.Errorf("max_assignment_endpoints 2: %d hosts, %d by failover; want 3, 0", count(r), r.FailoverEndpoints)
	}

	lim = DefaultLimits()
	r = o.ServiceWithinBudget(web, lim, 5)
	if count(r) != 5 || r.FailoverEndpoints != 2 || r.Exceeded[LimitFailoverEndpoints] != 1 {
		t.Errorf("budget 5: %d hosts, %d by failover, exceeded %v; want 5, 2, 1", count(r), r.FailoverEndpoints, r.Exceeded)
	}
	if d := cmp.Diff([]string{"failover[0]"}, fields(r)); d != "" || !strings.Contains(r.Diagnostics[0].Message, LimitFailoverEndpoints) {
		t.Errorf("diagnostics %v (-want +got):\n%s", r.Diagnostics, d)
	}

	// A failover host carrying large metadata takes the assignment over
	// max_resource_bytes: the failover goes, not the service.
	lim = DefaultLimits()
	lim.MaxResourceBytes = MinResourceBytes
	fat := &sources.Service{Name: "fat", Endpoints: manyHosts(3, 4)}
	for i := range fat.Endpoints {
		fat.Endpoints[i].Metadata = sources.Metadata{"x": {"v": strings.Repeat("a", 2000)}}
	}
	fp := &policy.Service{Failover: []policy.Target{{Service: "fat"}}}
	r = Options{Policy: fp, Failover: []FailoverTarget{{Target: fp.Failover[0], Service: fat}}}.ServiceWithin(web, lim)
	if r.Refused || count(r) != 3 || r.FailoverEndpoints != 0 || r.Exceeded[LimitResourceBytes] != 1 {
		t.Errorf("fat failover: refused %v, %d hosts, %d by failover, exceeded %v; want served with 3, 0, 1: %v", r.Refused, count(r), r.FailoverEndpoints, r.Exceeded, r.Diagnostics)
	}
}
