package xds

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"testing"
	"unsafe"
)

// TestByTypeAsMap drives a byType and a map with the same random sets and
// deletes, over few types (the scan) and many (the index, and back).
func TestByTypeAsMap(t *testing.T) {
	for _, n := range []int{3, byTypeScan, 3 * byTypeScan} {
		rng := rand.New(rand.NewPCG(uint64(n), 1))
		var m byType[int]
		model := map[string]int{}
		for step := range 3000 {
			url := fmt.Sprintf("type.googleapis.com/t%d", rng.IntN(n))
			if rng.IntN(3) == 0 {
				m.delete(url)
				delete(model, url)
			} else {
				m.set(url, step)
				model[url] = step
			}
			probe := fmt.Sprintf("type.googleapis.com/t%d", rng.IntN(n+1))
			got, ok := m.get(probe)
			want, wok := model[probe]
			if got != want || ok != wok {
				t.Fatalf("%d types, step %d: get(%q) = %d, %v; want %d, %v", n, step, probe, got, ok, want, wok)
			}
			if m.len() != len(model) || !maps.Equal(maps.Collect(m.all()), model) {
				t.Fatalf("%d types, step %d: holds %v, want %v", n, step, maps.Collect(m.all()), model)
			}
		}
	}
}

// TestByTypeKeepsServedTypeURLAsItsConstant: a served type's URL set from
// a request's own copy is stored as the constant, so that the lookups
// passing the constant (an ACK's type URL, the cache's) match it by
// address; any other URL is stored as given.
func TestByTypeKeepsServedTypeURLAsItsConstant(t *testing.T) {
	var m byType[int]
	m.set(strings.Clone(EndpointType), 1)
	other := strings.Clone("type.googleapis.com/some.Other")
	m.set(other, 2)
	for u := range m.all() {
		switch u {
		case EndpointType:
			if unsafe.StringData(u) != unsafe.StringData(EndpointType) {
				t.Errorf("%s is stored as the request's copy, not as the constant", u)
			}
		case other:
			if unsafe.StringData(u) != unsafe.StringData(other) {
				t.Errorf("%s is not stored as given", u)
			}
		}
	}
	if v, ok := m.get(EndpointType); !ok || v != 1 {
		t.Errorf("get(EndpointType) = %d, %v; want 1, true", v, ok)
	}
}
