package consul

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/xdsbridge/xdsbridge/sources"
)

// TestChecksWhyNamesTheDecidingChecks: a host's explanation names its
// Consul checks, worst first, each output cut to its first line and a
// bounded length, at most four of them.
func TestChecksWhyNamesTheDecidingChecks(t *testing.T) {
	long := strings.Repeat("x", 200)
	tests := []struct {
		name   string
		checks api.HealthChecks
		want   string
	}{
		{"none", nil, "consul checks: none (healthy)"},
		{"critical first, output on one line", api.HealthChecks{
			{CheckID: "serfHealth", Status: api.HealthPassing, Output: "Agent alive and reachable"},
			{CheckID: "service:web-1", Status: api.HealthCritical, Output: "HTTP GET http://10.0.0.1:8080/health: 503 Service Unavailable\nOutput: down for maintenance"},
		}, "consul checks: critical (service:web-1 'HTTP GET http://10.0.0.1:8080/health: 503 Service Unavailable'), passing (serfHealth 'Agent alive and reachable')"},
		{"maintenance", api.HealthChecks{
			{CheckID: "_service_maintenance:web-1", Status: api.HealthCritical, Output: "e2e"},
			{CheckID: "web-1-ttl", Status: api.HealthWarning},
		}, "consul checks: maintenance (_service_maintenance:web-1 'e2e'), warning (web-1-ttl)"},
		{"long output cut", api.HealthChecks{{CheckID: "c", Status: api.HealthCritical, Output: long}},
			"consul checks: critical (c '" + strings.Repeat("x", 77) + "...')"},
		{"at most four", api.HealthChecks{
			{CheckID: "a", Status: api.HealthPassing}, {CheckID: "b", Status: api.HealthPassing}, {CheckID: "c", Status: api.HealthPassing},
			{CheckID: "d", Status: api.HealthPassing}, {CheckID: "e", Status: api.HealthPassing}, {CheckID: "f", Status: api.HealthPassing},
		}, "consul checks: passing (a), passing (b), passing (c), passing (d), and 2 more"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := checksWhy(tt.checks); got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}

// TestMapEntriesListsDropped: instances left out by exclude_tags, an
// unresolvable hostname or a port out of range are listed with the reason
// and a detail in the user's terms (under the service's name: the
// source's list names the cluster and the datacenter,
// TestDatacenterRenameRenamesDropped); kept ones carry their checks.
func TestMapEntriesListsDropped(t *testing.T) {
	set, err := parseConfig(json.RawMessage(`{"services": {"exclude_tags": ["canary"]}}`), "")
	if err != nil {
		t.Fatal(err)
	}
	mp := &mapper{m: set.mapping, sel: set.sel, log: testLogger(t), resolver: fakeResolver{"ok.example": {netip.MustParseAddr("10.9.9.9")}}}
	entry := func(id, addr string, port int, tags ...string) *api.ServiceEntry {
		return &api.ServiceEntry{
			Node:    &api.Node{Node: "n1", Address: "10.0.0.2", Datacenter: "dc1"},
			Service: &api.AgentService{ID: id, Service: "web", Port: port, Address: addr, Tags: tags},
			Checks:  api.HealthChecks{{CheckID: "service:" + id, Status: api.HealthPassing}},
		}
	}
	ins, dropped, ok := mp.mapEntries(context.Background(), "web", dcInfo{name: "dc1"}, []*api.ServiceEntry{
		entry("web-1", "10.0.0.1", 80),
		entry("web-2", "10.0.0.3", 80, "canary"),
		entry("web-3", "nope.example", 80),
		entry("web-4", "10.0.0.4", 0),
	})
	if !ok || len(ins) != 1 || ins[0].why != "consul checks: passing (service:web-1)" {
		t.Fatalf("kept %+v (ok %v); want web-1 with its check", ins, ok)
	}
	var got []string
	for _, d := range dropped {
		got = append(got, fmt.Sprintf("%s | %s | %s | %s", d.Service, d.Instance, d.Reason, d.Detail))
	}
	want := []string{
		`web | web-2 on node n1 | ` + sources.DropExcludedTag + ` | tag "canary" is in services.exclude_tags`,
		`web | web-3 on node n1 | ` + sources.DropUnresolvable + ` | resolving hostname "nope.example": no such host nope.example`,
		`web | web-4 on node n1 | ` + sources.DropMalformed + ` | port 0 is not in 1..65535`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("dropped:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// renameSource is a source whose clusters are named after their
// datacenter and which drops instances tagged canary, with its runner and
// its local datacenter, for the datacenter rename tests.
func renameSource(t *testing.T) (*Source, *runner, *dcState) {
	t.Helper()
	src, err := New("consul", json.RawMessage(`{"services": {"exclude_tags": ["canary"]}, "mapping": {"cluster_name": "{service}.{datacenter}"}}`), sources.Env{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	s := src.(*Source)
	return s, newRunner(s, nil), s.dcs[0]
}

// TestDatacenterRenameRenamesDropped: the dropped instances are listed
// under their cluster's name and datacenter as they are now: after the
// datacenter's name changed (its agent answers with another), those of a
// service not read since are listed under the new name too, as its
// cluster is, not under the old one.
func TestDatacenterRenameRenamesDropped(t *testing.T) {
	s, r, dc := renameSource(t)
	entry := func(svc, id, datacenter string, tags ...string) *api.ServiceEntry {
		return &api.ServiceEntry{
			Node:    &api.Node{Node: "n1", Address: "10.0.0.2", Datacenter: datacenter},
			Service: &api.AgentService{ID: id, Service: svc, Port: 80, Address: "10.0.0.1", Tags: tags},
		}
	}
	read := func(svc, datacenter string, entries ...*api.ServiceEntry) {
		t.Helper()
		s.mu.Lock()
		st := dc.services[svc]
		if st == nil {
			st = &svcState{}
			dc.services[svc] = st
			dc.notReady++
		}
		s.mu.Unlock()
		if !r.commit(context.Background(), dc, svc, st, entries, func(*svcState) bool { return true }) {
			t.Fatalf("%s not committed", svc)
		}
	}
	listed := func() (clusters, dropped []string) {
		s.mu.Lock()
		defer s.mu.Unlock()
		snap, _ := s.snapshotLocked()
		for _, sv := range snap {
			clusters = append(clusters, sv.Name)
		}
		for _, d := range s.droppedLocked() {
			dropped = append(dropped, d.Service+" | "+d.Instance)
		}
		return clusters, dropped
	}
	dc.listSeen = true
	read("web", "dc1", entry("web", "web-1", "dc1"), entry("web", "web-2", "dc1", "canary"))
	read("api", "dc1", entry("api", "api-1", "dc1"))
	clusters, dropped := listed()
	if want := []string{"web.dc1 | web-2 on node n1 (dc1)"}; !slices.Equal(dropped, want) {
		t.Fatalf("dropped %q, want %q", dropped, want)
	}
	// The agent answers as dc9 now; web is not read again.
	read("api", "dc9", entry("api", "api-1", "dc9"))
	clusters, dropped = listed()
	if want := []string{"api.dc9", "web.dc9"}; !slices.Equal(clusters, want) {
		t.Fatalf("clusters %q, want %q", clusters, want)
	}
	if want := []string{"web.dc9 | web-2 on node n1 (dc9)"}; !slices.Equal(dropped, want) {
		t.Errorf("dropped %q after the datacenter became dc9, want %q", dropped, want)
	}
}

// TestDatacenterRenameSignalsAPublish: a read that finds the datacenter's
// name changed signals the coordinator, even when the service read maps
// to the same state (every instance left out by tag, or every one a
// proxy kind): the name changes every cluster name of the datacenter and
// every dropped instance's, which only a publish carries.
func TestDatacenterRenameSignalsAPublish(t *testing.T) {
	for _, c := range []struct {
		name  string
		entry func(datacenter string) *api.ServiceEntry
	}{
		{"every instance dropped by tag", func(datacenter string) *api.ServiceEntry {
			return &api.ServiceEntry{
				Node:    &api.Node{Node: "n1", Address: "10.0.0.2", Datacenter: datacenter},
				Service: &api.AgentService{ID: "web-1", Service: "web", Port: 80, Address: "10.0.0.1", Tags: []string{"canary"}},
			}
		}},
		{"a proxy service", func(datacenter string) *api.ServiceEntry {
			return &api.ServiceEntry{
				Node:    &api.Node{Node: "n1", Address: "10.0.0.2", Datacenter: datacenter},
				Service: &api.AgentService{ID: "web-1", Service: "web", Port: 80, Address: "10.0.0.1", Kind: api.ServiceKindConnectProxy},
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, r, dc := renameSource(t)
			s.mu.Lock()
			st := &svcState{}
			dc.services["web"] = st
			dc.notReady++
			s.mu.Unlock()
			read := func(datacenter string) {
				t.Helper()
				if !r.commit(context.Background(), dc, "web", st, []*api.ServiceEntry{c.entry(datacenter)}, func(*svcState) bool { return true }) {
					t.Fatal("web not committed")
				}
			}
			signalled := func() bool {
				select {
				case <-s.changed:
					return true
				default:
					return false
				}
			}
			read("dc1")
			signalled() // the first read
			read("dc1")
			if signalled() {
				t.Fatal("a read that changed nothing signalled")
			}
			read("dc9")
			if !signalled() {
				t.Fatal("the read that found the datacenter named dc9 did not signal: its clusters keep the name dc1 until another change")
			}
		})
	}
}
