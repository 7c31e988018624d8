package translate

import (
	"strings"
	"testing"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/google/go-cmp/cmp"

	"github.com/xdsbridge/xdsbridge/policy"
	"github.com/xdsbridge/xdsbridge/sources"
)

// Every reference to a service nobody publishes is a diagnostic and
// counted by kind; a split share to one is dropped (the others take its
// requests), a target whose policy fails over goes to its failover target,
// and a redirect cycle is reported.
func TestBlackHoles(t *testing.T) {
	web := sources.Service{Name: "web", Endpoints: []sources.Endpoint{{Address: "10.0.0.1", Port: 80}}}
	for _, tc := range []struct {
		name     string
		pol      *policy.Service
		failover []FailoverTarget
		targets  map[string]*policy.Service
		absent   []string
		clusters []string // RouteClusters of web's routes
		fields   []string
		counts   map[string]int
	}{
		{
			name:     "split share",
			pol:      &policy.Service{Split: []policy.Split{{Weight: 50, Service: "web"}, {Weight: 50, Service: "ghost"}}},
			absent:   []string{"ghost"},
			clusters: []string{"web"},
			fields:   []string{"split[1]"},
			counts:   map[string]int{BlackHoleSplit: 1},
		},
		{
			name:     "every split share",
			pol:      &policy.Service{Split: []policy.Split{{Weight: 50, Service: "ghost"}, {Weight: 50, Service: "ghost2"}}},
			absent:   []string{"ghost", "ghost2"},
			clusters: []string{"ghost", "ghost2"},
			fields:   []string{"split[0]", "split[1]", "split"},
			counts:   map[string]int{BlackHoleSplit: 2},
		},
		{
			name:     "route and route split",
			pol:      &policy.Service{Routes: []policy.Route{{Match: policy.Match{Prefix: "/a"}, Destination: &policy.Target{Service: "ghost"}}, {Match: policy.Match{Prefix: "/b"}, Split: []policy.Split{{Weight: 1, Service: "ghost"}, {Weight: 1, Service: "api"}}}}},
			absent:   []string{"ghost"},
			clusters: []string{"ghost", "api", "web"},
			fields:   []string{"routes[0].destination", "routes[1].split[0]"},
			counts:   map[string]int{BlackHoleRoute: 1, BlackHoleSplit: 1},
		},
		{
			name:     "redirect",
			pol:      &policy.Service{Redirect: &policy.Target{Service: "ghost3"}},
			absent:   []string{"ghost3"},
			clusters: []string{"ghost3"},
			fields:   []string{"redirect"},
			counts:   map[string]int{BlackHoleRedirect: 1},
		},
		{
			name:     "redirect cycle",
			pol:      &policy.Service{Redirect: &policy.Target{Service: "api"}},
			targets:  map[string]*policy.Service{"api": {Redirect: &policy.Target{Service: "web"}}},
			clusters: []string{"web"},
			fields:   []string{"redirect"},
			counts:   map[string]int{BlackHoleRedirectCycle: 1},
		},
		{
			name:     "redirect back to a subset is no cycle",
			pol:      &policy.Service{Redirect: &policy.Target{Service: "api"}},
			targets:  map[string]*policy.Service{"api": {Redirect: &policy.Target{Service: "web", Subset: "v1"}}},
			clusters: []string{"web/v1"},
		},
		{
			name:     "target without hosts follows its failover",
			pol:      &policy.Service{Routes: []policy.Route{{Match: policy.Match{Prefix: "/a"}, Destination: &policy.Target{Service: "empty"}}}, Split: []policy.Split{{Weight: 1, Service: "empty"}, {Weight: 1, Service: "web"}}},
			targets:  map[string]*policy.Service{"empty": {Failover: []policy.Target{{Service: "empty", Subset: "x"}, {Datacenter: "dc2"}, {Service: "gone"}, {Service: "backup", Subset: "v1"}}}},
			absent:   []string{"empty", "gone"},
			clusters: []string{"backup/v1", "web"},
			fields:   []string{"split[0]", "routes[0].destination"},
		},
		{
			name:     "failover",
			pol:      &policy.Service{Failover: []policy.Target{{Service: "ghost"}}},
			failover: []FailoverTarget{{Target: policy.Target{Service: "ghost"}}},
			absent:   []string{"ghost"},
			clusters: []string{"web"},
			fields:   []string{"failover[0]"},
			counts:   map[string]int{BlackHoleFailover: 1},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Options{Policy: tc.pol, Failover: tc.failover, Targets: tc.targets, Absent: tc.absent}
			r := o.ServiceWithin(web, DefaultLimits())
			if err := r.Validate(); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.clusters, RouteClusters(r.Route)); d != "" {
				t.Errorf("clusters (-want +got):\n%s", d)
			}
			var fields []string
			for _, d := range r.Diagnostics {
				fields = append(fields, d.Field)
			}
			if d := cmp.Diff(tc.fields, fields); d != "" {
				t.Errorf("diagnostics %v (-want +got):\n%s", r.Diagnostics, d)
			}
			if d := cmp.Diff(tc.counts, r.BlackHoles); d != "" {
				t.Errorf("black holes (-want +got):\n%s", d)
			}
		})
	}
}

// A real Envoy: of web's requests split half to a service nobody
// publishes, none fails: the share is dropped and web's hosts take them.
func TestBlackHoleSplitEnvoy(t *testing.T) {
	requireEnvoy(t)
	rig := startGRPCRig(t)
	pol := &policy.Service{Split: []policy.Split{{Weight: 50, Service: "web"}, {Weight: 50, Service: "ghost"}}}
	r := Options{Policy: pol, Absent: []string{"ghost"}}.ServiceWithin(sources.Service{Name: "web"}, DefaultLimits())
	addrs := runEnvoy(t, rig, map[string]*route.RouteConfiguration{"web": r.Route}, "ghost")
	conn := envoyConn(t, addrs["web"], "web")
	got := map[string]int{}
	for range 20 {
		c, err := envoyCall(t, conn, "/x.Y/Call")
		if c == "" {
			got["failed: "+strings.SplitN(err.Error(), ":", 3)[0]]++
			continue
		}
		got[c]++
	}
	if d := cmp.Diff(map[string]int{"web": 20}, got); d != "" {
		t.Errorf("answered by (-want +got):\n%s", d)
	}
}

// A split whose only shares taking requests name services nobody
// publishes keeps its shares of weight 0 out of it: those shares were
// meant to take no request, and the split's requests must not go to the
// service itself (or a weight-0 share) when its real targets are missing.
func TestBlackHoleSplitOnlyZeroWeightLeft(t *testing.T) {
	web := sources.Service{Name: "web", Endpoints: []sources.Endpoint{{Address: "10.0.0.1", Port: 80}}}
	for _, tc := range []struct {
		name     string
		pol      *policy.Service
		clusters []string
	}{
		{
			name:     "split",
			pol:      &policy.Service{Split: []policy.Split{{Weight: 100, Service: "ghost"}, {Weight: 0, Service: "api"}}},
			clusters: []string{"ghost"},
		},
		{
			name:     "route split",
			pol:      &policy.Service{Routes: []policy.Route{{Match: policy.Match{Prefix: "/a"}, Split: []policy.Split{{Weight: 100, Service: "ghost"}, {Weight: 0, Service: "api"}}}}},
			clusters: []string{"ghost", "web"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Options{Policy: tc.pol, Absent: []string{"ghost"}}.ServiceWithin(web, DefaultLimits())
			if err := r.Validate(); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.clusters, RouteClusters(r.Route)); d != "" {
				t.Errorf("clusters (-want +got):\n%s", d)
			}
			if d := cmp.Diff(map[string]int{BlackHoleSplit: 1}, r.BlackHoles); d != "" {
				t.Errorf("black holes (-want +got):\n%s", d)
			}
		})
	}
}
