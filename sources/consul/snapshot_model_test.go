package consul

import (
	"fmt"
	"io"
	"log/slog"
	"math/rand"
	"reflect"
	"slices"
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
			var published []sources.Service // the snapshot last published
			deltas := 0
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
				if rng.Intn(2) == 0 {
					continue // not published: the next delta spans both snapshots
				}
				if d := s.deltaLocked(published, got); d != nil {
					deltas++
					if err := checkDelta(published, got, d); err != nil {
						t.Fatalf("step %d: %v", step, err)
					}
				}
				published = got
			}
			if deltas == 0 {
				t.Error("no publish had a delta")
			}
		})
	}
}

// checkDelta checks that d is the delta of next from base, as
// sources.Delta has it: every service of next not in d.Changed is base's
// of that name, the same value; every name of base not in d.Removed is
// in next; d.Changed are next's services and d.Removed not in next.
func checkDelta(base, next []sources.Service, d *sources.Delta) error {
	if !d.Follows(base) {
		return fmt.Errorf("the delta does not follow the list last published")
	}
	byName := func(l []sources.Service) map[string]sources.Service {
		m := map[string]sources.Service{}
		for _, s := range l {
			m[s.Name] = s
		}
		return m
	}
	b, n, changed := byName(base), byName(next), byName(d.Changed)
	for _, s := range d.Changed {
		if !reflect.DeepEqual(n[s.Name], s) {
			return fmt.Errorf("changed %q is not the published service", s.Name)
		}
	}
	for _, name := range d.Removed {
		if _, ok := n[name]; ok {
			return fmt.Errorf("removed %q is published", name)
		}
	}
	for name, s := range n {
		if _, ok := changed[name]; ok {
			continue
		}
		old, ok := b[name]
		if !ok || len(old.Endpoints) != len(s.Endpoints) || len(s.Endpoints) > 0 && &old.Endpoints[0] != &s.Endpoints[0] {
			return fmt.Errorf("%q is new or changed and not in the delta's changed", name)
		}
	}
	for name := range b {
		if _, ok := n[name]; !ok && !slices.Contains(d.Removed, name) {
			return fmt.Errorf("%q is gone and not in the delta's removed", name)
		}
	}
	return nil
}
