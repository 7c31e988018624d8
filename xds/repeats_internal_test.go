package xds

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestRepeatedFindsEveryRepeat: repeated answers as sorting does, for
// lists with and without a repeat (0 among the values too, which marks a
// free place of its table), of sizes around its table's, one after the
// other (the tables are reused).
func TestRepeatedFindsEveryRepeat(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for i := range 2000 {
		n := r.IntN(70)
		hs := make([]uint64, n)
		for j := range hs {
			switch r.IntN(10) {
			case 0:
				hs[j] = 0
			case 1:
				hs[j] = uint64(r.IntN(4)) << 40 // equal low bits: probing
			default:
				hs[j] = r.Uint64()
			}
		}
		if i%3 == 0 && n > 1 {
			hs[r.IntN(n)] = hs[r.IntN(n)]
		}
		sorted := slices.Sorted(slices.Values(hs))
		want := len(slices.Compact(sorted)) != n
		if got := repeated(hs); got != want {
			t.Fatalf("repeated(%v) = %v, want %v", hs, got, want)
		}
	}
}
