package consul

import (
	"io"
	"log/slog"
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
