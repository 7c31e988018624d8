package consul

import (
	"fmt"
	"io"
	"log/slog"
	"math/rand"
	"reflect"
	"testing"

	"github.com/xdsbridge/xdsbridge/sources"
)

// TestSnapshotIncrementalMatchesFull: whatever the sequence of state
// changes (touched as the watches touch them), the incremental snapshot
// is the one a full walk of every state builds.
func TestSnapshotIncrementalMatchesFull(t *testing.T) {
	for _, tmpl := range []string{"{service}", "{service}-{datacenter}", "{service}{datacenter}"} {
		t.Run(tmpl, func(t *testing.T) {
			set, err := parseConfig([]byte(`{"mapping":{"cluster_name":"`+tmpl+`"}}`), "")
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewSource(1))
			d1, d2 := newDCState("dc1", 0), newDCState("dc2", 1)
			d1.actual, d2.actual = "dc1", "dc2"
			dcs := []*dcState{d1, d2}
			s := &Source{set: set, log: slog.New(slog.NewTextHandler(io.Discard, nil)), dcs: dcs}
			names := []string{"a", "b", "c", "a1", "b-dc"}
			for step := 0; step < 3000; step++ {
				i := rng.Intn(len(dcs))
				dc := dcs[i]
				name := names[rng.Intn(len(names))]
				switch op := rng.Intn(10); {
				case op < 6:
					st := dc.services[name]
					if st == nil {
						st = &svcState{}
						dc.services[name] = st
					}
					st.ready, st.published = true, rng.Intn(5) > 0
					st.instances = nil
					for k := rng.Intn(3); k > 0; k-- {
						st.instances = append(st.instances, instance{endpoint: sources.Endpoint{Address: fmt.Sprintf("10.0.0.%d", rng.Intn(4)), Port: 80, Priority: dc.priority}})
					}
					s.genSeq++
					st.gen = s.genSeq
					s.touchLocked(dc, name)
				case op < 8:
					if dc.services[name] != nil {
						delete(dc.services, name)
						s.touchLocked(dc, name)
					}
				case op < 9:
					if dc.services[name] == nil {
						dc.services[name] = &svcState{} // not ready yet: commit touches it when ready
					}
				default:
					dc.actual = fmt.Sprintf("dc%d-%d", i+1, rng.Intn(2))
					s.touchAll = true
				}
				if rng.Intn(3) != 0 {
					continue
				}
				got, _ := s.snapshotLocked()
				full := &Source{set: set, log: s.log, dcs: dcs}
				want, _ := full.snapshotLocked()
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("step %d: incremental %+v\nfull %+v", step, got, want)
				}
			}
		})
	}
}
