package store

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
	"unsafe"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestSortedNamesRun: a run is the names whatever they are, and shares
// the type's names when they are consecutive names of the type, in order.
func TestSortedNamesRun(t *testing.T) {
	ts := &Type{Resources: map[string]*Entry{}}
	for i := range 50 {
		n := fmt.Sprintf("c%02d", i)
		ts.Resources[n] = &Entry{Name: n}
	}
	sn := ts.AllNames()
	all := slices.Sorted(func(yield func(string) bool) {
		for n := range ts.Resources {
			if !yield(n) {
				return
			}
		}
	})
	shares := func(s []string) bool {
		p, q := unsafe.SliceData(s), unsafe.SliceData(sn.names)
		size := unsafe.Sizeof("")
		return uintptr(unsafe.Pointer(p)) >= uintptr(unsafe.Pointer(q)) && uintptr(unsafe.Pointer(p)) < uintptr(unsafe.Pointer(q))+uintptr(len(sn.names))*size
	}
	r := rand.New(rand.NewPCG(1, 2))
	runs := 0
	for range 1000 {
		i := r.IntN(len(all))
		names := slices.Clone(all[i : i+1+r.IntN(len(all)-i)])
		run := true
		switch r.IntN(5) {
		case 0: // a name missing
			if len(names) > 1 {
				j := r.IntN(len(names))
				names = slices.Delete(names, j, j+1)
				run = j == 0 || j == len(names) // an end gone: still a run
			}
		case 1: // a name of another
			names[r.IntN(len(names))] = "zz"
			slices.Sort(names)
			run = false
		case 2: // a name before the type's first
			names = append([]string{"a"}, names...)
			run = false
		case 3: // out of order
			if len(names) > 1 {
				j := r.IntN(len(names) - 1)
				names[j], names[j+1] = names[j+1], names[j]
				run = false
			}
		}
		got := sn.Run(names)
		if !slices.Equal(got, names) {
			t.Fatalf("run(%q) = %q, want %q", names, got, names)
		}
		if shares(got) != run {
			t.Fatalf("run(%q) shares the type's names: %v, want %v", names, shares(got), run)
		}
		if run && cap(got) != len(got) {
			t.Fatalf("run(%q) has room for %d names past its end", names, cap(got)-len(got))
		}
		if run {
			runs++
		}
	}
	if runs < 300 {
		t.Fatalf("%d runs of 1,000 cases", runs)
	}
	if len(sn.Run(nil)) != 0 {
		t.Fatal("the run of nothing is not empty")
	}
}

// TestSortedNamesJoin: Join of a run of the type's names (a subslice of
// them) and the names that follow it is the longer run, shared with the
// type's names; of anything else (a copy of a run, names that do not
// follow, a subslice of an older list of names) nil.
func TestSortedNamesJoin(t *testing.T) {
	ts := &Type{Resources: map[string]*Entry{}}
	for i := range 50 {
		n := fmt.Sprintf("c%02d", i)
		ts.Resources[n] = &Entry{Name: n}
	}
	sn := ts.AllNames()
	all := sn.names
	r := rand.New(rand.NewPCG(5, 6))
	for range 1000 {
		i := r.IntN(len(all))
		j := i + r.IntN(len(all)-i+1)
		k := j + r.IntN(len(all)-j+1)
		a, b := all[i:j:j], slices.Clone(all[j:k])
		got := sn.Join(a, b)
		if len(a)+len(b) == 0 {
			if got != nil {
				t.Fatalf("Join of nothing = %q", got)
			}
			continue
		}
		if !slices.Equal(got, all[i:k]) || unsafe.SliceData(got) != &all[i] || cap(got) != len(got) {
			t.Fatalf("Join(%q, %q) = %q (cap %d), want the type's run %q", a, b, got, cap(got), all[i:k])
		}
		if len(a) > 0 {
			if got := sn.Join(slices.Clone(a), b); got != nil {
				t.Fatalf("Join of a copy %q, %q = %q, want nil", a, b, got)
			}
		}
		if len(b) > 0 && k < len(all) {
			if got := sn.Join(a, all[j+1:k+1]); got != nil && len(a) > 0 {
				t.Fatalf("Join(%q, %q) = %q: they do not follow each other", a, all[j+1:k+1], got)
			}
		}
	}
	// A name came: the type's names are new, and a run of the old ones
	// is not one of them.
	old := sn.names[10:20]
	ts.Resources["c10a"] = &Entry{Name: "c10a"}
	ts.names = nil
	if got := ts.AllNames().Join(old, []string{"c20"}); got != nil {
		t.Fatalf("Join of a run of the names before a name came = %q", got)
	}
}

// TestSortedNamesFollowTheResources: the sorted names are rebuilt when a
// name comes or goes, not when a version changes.
func TestSortedNamesFollowTheResources(t *testing.T) {
	s := New(func(string) int { return 0 }, resource.ClusterType)
	ts := s.types[resource.ClusterType]
	version := 0
	put := func(names ...string) {
		version++
		var rs []Resource
		for _, n := range names {
			rs = append(rs, Resource{Name: n, Msg: &cluster.Cluster{Name: n, ConnectTimeout: durationpb.New(time.Duration(version) * time.Millisecond)}})
		}
		if err := s.Apply(Change{TypeURL: resource.ClusterType, Upserts: rs}); err != nil {
			t.Fatal(err)
		}
	}
	put("b", "a")
	first := ts.AllNames()
	if !slices.Equal(first.names, []string{"a", "b"}) {
		t.Fatalf("names %q", first.names)
	}
	put("a", "b") // new versions, same names
	if ts.AllNames() != first {
		t.Fatal("a version change rebuilt the names")
	}
	put("c")
	if got := ts.AllNames().names; !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("after adding c: %q", got)
	}
	if err := s.Apply(Change{TypeURL: resource.ClusterType, Deletes: []string{"a"}}); err != nil {
		t.Fatal(err)
	}
	if got := ts.AllNames().names; !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("after deleting a: %q", got)
	}
}
