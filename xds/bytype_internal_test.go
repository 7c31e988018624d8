package xds

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"
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
