package xds

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestSortedNamesSuffix: a rest is the names joined whatever they are,
// and shares the type's joined names when it is a suffix of them.
func TestSortedNamesSuffix(t *testing.T) {
	ts := &typeState{resources: map[string]*entry{}}
	for i := range 50 {
		n := fmt.Sprintf("c%02d", i)
		ts.resources[n] = &entry{name: n}
	}
	sn := ts.allNames()
	all := slices.Sorted(func(yield func(string) bool) {
		for n := range ts.resources {
			if !yield(n) {
				return
			}
		}
	})
	shares := func(s string) bool {
		p, q := unsafe.StringData(s), unsafe.StringData(sn.joined)
		return uintptr(unsafe.Pointer(p)) >= uintptr(unsafe.Pointer(q)) && uintptr(unsafe.Pointer(p)) < uintptr(unsafe.Pointer(q))+uintptr(len(sn.joined))
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
		got := sn.suffix(tail)
		if want := strings.Join(tail, sep); got != want {
			t.Fatalf("suffix(%q) = %q, want %q", tail, got, want)
		}
		if suffix && !shares(got) {
			t.Fatalf("suffix(%q) is a copy, want a substring of the joined names", tail)
		}
	}
	if sn.suffix(nil) != "" {
		t.Fatal("the suffix of nothing is not empty")
	}
}

// TestSortedNamesFollowTheResources: the joined names are rebuilt when a
// name comes or goes, not when a version changes.
func TestSortedNamesFollowTheResources(t *testing.T) {
	c := NewCache(WithTypes(ClusterType))
	ts := c.types[ClusterType]
	version := 0
	put := func(names ...string) {
		version++
		var rs []Resource
		for _, n := range names {
			rs = append(rs, Resource{Name: n, Msg: &cluster.Cluster{Name: n, ConnectTimeout: durationpb.New(time.Duration(version) * time.Millisecond)}})
		}
		if err := c.Apply(Change{TypeURL: ClusterType, Upserts: rs}); err != nil {
			t.Fatal(err)
		}
	}
	put("b", "a")
	first := ts.allNames()
	if first.joined != "a"+sep+"b" {
		t.Fatalf("joined %q", first.joined)
	}
	put("a", "b") // new versions, same names
	if ts.allNames() != first {
		t.Fatal("a version change rebuilt the names")
	}
	put("c")
	if got := ts.allNames().joined; got != "a"+sep+"b"+sep+"c" {
		t.Fatalf("after adding c: %q", got)
	}
	if err := c.Apply(Change{TypeURL: ClusterType, Deletes: []string{"a"}}); err != nil {
		t.Fatal(err)
	}
	if got := ts.allNames().joined; got != "b"+sep+"c" {
		t.Fatalf("after deleting a: %q", got)
	}
}
