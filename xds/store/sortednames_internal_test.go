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

// TestSortedNamesSuffix: a rest is the names whatever they are, and shares
// the type's names when it is a suffix of them.
func TestSortedNamesSuffix(t *testing.T) {
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
	for range 500 {
		i := r.IntN(len(all))
		tail := slices.Clone(all[i:])
		suffix := true
		switch r.IntN(4) {
		case 0: // a name missing
			if len(tail) > 1 {
				j := r.IntN(len(tail))
				tail = slices.Delete(tail, j, j+1)
				suffix = j == 0 // the first gone: still a suffix
			}
		case 1: // a name of another
			tail[r.IntN(len(tail))] = "zz"
			slices.Sort(tail)
			suffix = false
		case 2: // the tail of a subset
			tail = tail[r.IntN(len(tail)):]
		}
		got := sn.Suffix(tail)
		if !slices.Equal(got, tail) {
			t.Fatalf("suffix(%q) = %q, want %q", tail, got, tail)
		}
		if suffix && len(tail) > 0 && !shares(got) {
			t.Fatalf("suffix(%q) is a copy, want a subslice of the type's names", tail)
		}
	}
	if len(sn.Suffix(nil)) != 0 {
		t.Fatal("the suffix of nothing is not empty")
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
