package consul

import (
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"

	"github.com/xdsbridge/xdsbridge/sources"
)

// The Consul source publishes each service's endpoints in normal form
// (sources.Normalize): sorted, and a host found in the local and a
// failover datacenter once, with the local (lower) priority.
func TestSnapshotEndpointsNormalForm(t *testing.T) {
	set, err := parseConfig([]byte(`{}`), "")
	if err != nil {
		t.Fatal(err)
	}
	in := func(addr string, port, prio uint32, dc string) instance {
		return instance{endpoint: sources.Endpoint{Address: addr, Port: port, Priority: prio, Locality: sources.Locality{Region: dc}}}
	}
	dc := func(name string, prio uint32, ins ...instance) *dcState {
		d := newDCState(name, prio)
		d.actual = name
		d.services = map[string]*svcState{"web": {ready: true, published: true, instances: ins}}
		return d
	}
	s := &Source{set: set, log: slog.New(slog.NewTextHandler(io.Discard, nil)), dcs: []*dcState{
		dc("dc1", 0, in("10.0.0.3", 80, 0, "dc1"), in("10.0.0.1", 80, 0, "dc1")),
		dc("dc2", 1, in("10.0.0.2", 80, 1, "dc2"), in("10.0.0.1", 80, 1, "dc2"), in("10.0.0.0", 80, 1, "dc2")),
	}}
	snap, _ := s.snapshotLocked()
	if len(snap) != 1 {
		t.Fatalf("snapshot %+v", snap)
	}
	eps := snap[0].Endpoints
	if err := sources.CheckNormal(eps); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range eps {
		got = append(got, e.Key().String()+"@"+e.Locality.Region)
	}
	t.Logf("%s: %v", snap[0].Name, got)
	want := []string{"10.0.0.1:80@dc1", "10.0.0.3:80@dc1", "10.0.0.0:80@dc2", "10.0.0.2:80@dc2"}
	if len(got) != len(want) {
		t.Fatalf("endpoints %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("endpoints %v, want %v", got, want)
		}
	}
}

// TestSnapshotRebuildsOnlyTouchedClusters: after the first snapshot, a
// change of one datacenter's state builds its cluster again from that
// state and the other datacenters' unchanged ones (local first), the
// states not touched are not read (a snapshot costs what changed), and a cluster whose last state is removed
// leaves the snapshot.
func TestSnapshotRebuildsOnlyTouchedClusters(t *testing.T) {
	set, err := parseConfig([]byte(`{}`), "")
	if err != nil {
		t.Fatal(err)
	}
	state := func(s *Source, addr string, prio uint32) *svcState {
		s.genSeq++
		return &svcState{ready: true, published: true, gen: s.genSeq,
			instances: []instance{{endpoint: sources.Endpoint{Address: addr, Port: 80, Priority: prio}}}}
	}
	d1, d2 := newDCState("dc1", 0), newDCState("dc2", 1)
	d1.actual, d2.actual = "dc1", "dc2"
	s := &Source{set: set, log: slog.New(slog.NewTextHandler(io.Discard, nil)), dcs: []*dcState{d1, d2}}
	d1.services["web"] = state(s, "10.0.0.1", 0)
	d2.services["web"] = state(s, "10.0.1.1", 1)
	d1.services["api"] = state(s, "10.0.0.9", 0)
	hosts := func(snap []sources.Service) []string {
		var out []string
		for _, sv := range snap {
			for _, e := range sv.Endpoints {
				out = append(out, fmt.Sprintf("%s=%s/%d", sv.Name, e.Address, e.Priority))
			}
		}
		return out
	}
	first, _ := s.snapshotLocked()
	if got := hosts(first); !slices.Equal(got, []string{"api=10.0.0.9/0", "web=10.0.0.1/0", "web=10.0.1.1/1"}) {
		t.Fatalf("first snapshot %v", got)
	}
	// A state that is not touched is not read: api's new generation
	// without a touch stays unseen.
	d1.services["api"] = state(s, "10.0.0.8", 0)
	d2.services["web"] = state(s, "10.0.1.2", 1)
	s.touchLocked(d2, "web")
	second, changed := s.snapshotLocked()
	if got := hosts(second); !changed || !slices.Equal(got, []string{"api=10.0.0.9/0", "web=10.0.0.1/0", "web=10.0.1.2/1"}) {
		t.Fatalf("after dc2's web changed: changed %v, %v", changed, got)
	}
	if &second[0].Endpoints[0] != &first[0].Endpoints[0] {
		t.Error("api untouched but built again")
	}
	delete(d1.services, "web")
	s.touchLocked(d1, "web")
	third, _ := s.snapshotLocked()
	if got := hosts(third); !slices.Equal(got, []string{"api=10.0.0.9/0", "web=10.0.1.2/1"}) {
		t.Fatalf("after dc1's web removed: %v", got)
	}
	delete(d2.services, "web")
	s.touchLocked(d2, "web")
	fourth, changed := s.snapshotLocked()
	if got := hosts(fourth); !changed || !slices.Equal(got, []string{"api=10.0.0.9/0"}) {
		t.Fatalf("after the last web removed: changed %v, %v", changed, got)
	}
	if s.clusters["web"] != nil {
		t.Error("the removed cluster is still cached")
	}
}

// BenchmarkSnapshotOneChange is the cost of a publish's snapshot and its
// delta when one state of 20,000 changed (the work of one flip in the
// source):
//
//	go test -run '^$' -bench SnapshotOneChange ./sources/consul/
func BenchmarkSnapshotOneChange(b *testing.B) {
	set, err := parseConfig([]byte(`{}`), "")
	if err != nil {
		b.Fatal(err)
	}
	d := newDCState("dc1", 0)
	d.actual, d.listSeen = "dc1", true
	s := &Source{set: set, log: slog.New(slog.NewTextHandler(io.Discard, nil)), dcs: []*dcState{d}}
	const n = 20000
	for i := range n {
		s.genSeq++
		d.services[fmt.Sprintf("svc-%05d", i)] = &svcState{ready: true, published: true, gen: s.genSeq,
			instances: []instance{{endpoint: sources.Endpoint{Address: "10.0.0.1", Port: uint32(10000 + i)}}}}
	}
	last, _ := s.snapshotLocked()
	b.ResetTimer()
	for i := range b.N {
		name := fmt.Sprintf("svc-%05d", i%n)
		st := d.services[name]
		s.genSeq++
		st.gen = s.genSeq
		s.touchLocked(d, name)
		if !s.readyLocked() || s.failingLocked() {
			b.Fatal("not ready, or failing")
		}
		snap, _ := s.snapshotLocked()
		s.droppedLocked()
		if d := s.deltaLocked(last, snap); i > 0 && len(d.Changed) != 1 {
			b.Fatalf("delta %+v, want the changed cluster", d)
		}
		last = snap
	}
}
