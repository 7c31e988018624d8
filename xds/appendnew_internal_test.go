package xds

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// appendNew appends the records not in the list, each once, in their
// order, whether the lists are short (scanned) or long (a set).
func TestAppendNewRecords(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pool := make([]*deltaSent, 200)
	for i := range pool {
		pool[i] = &deltaSent{nonce: fmt.Sprint(i + 1)}
	}
	for _, size := range []int{0, 3, 20, 150} {
		for range 50 {
			perm := rng.Perm(len(pool))
			list := make([]*deltaSent, 0, size)
			for _, i := range perm[:size] {
				list = append(list, pool[i])
			}
			var more []*deltaSent
			for _, i := range rng.Perm(len(pool))[:rng.IntN(size+1)] {
				more = append(more, pool[i])
			}
			want := slices.Clone(list)
			for _, s := range more {
				if !slices.Contains(want, s) {
					want = append(want, s)
				}
			}
			if got := appendNew(slices.Clone(list), more); !slices.Equal(got, want) {
				t.Fatalf("size %d: appendNew gave %d records, want %d", size, len(got), len(want))
			}
		}
	}
}
