package xds

import (
	"fmt"
	"strconv"
	"testing"
)

// BenchmarkSortedNamesInSet is a pass's question of whether sorted names,
// every gap-th of a set's, are in the set: with a nameCursor walking the
// set's sorted names and in the set's map, per name asked, by how far
// apart the names are among the set's (walkWorth).
func BenchmarkSortedNamesInSet(b *testing.B) {
	for _, size := range []int{500, 20000} {
		names := make([]string, size)
		for i := range names {
			names[i] = fmt.Sprintf("svc-%05d", i)
		}
		s := emptyNames.derive(names, nil)
		for _, gap := range []int{1, 2, 4, 8, 32} {
			var asked []string
			for i := gap / 2; i < size; i += gap {
				asked = append(asked, s.sorted[i])
			}
			name := "size=" + strconv.Itoa(size) + "/gap=" + strconv.Itoa(gap)
			b.Run(name+"/cursor", func(b *testing.B) {
				for b.Loop() {
					cur := newNameCursor(s)
					for _, n := range asked {
						if !cur.has(n) {
							b.Fatal(n)
						}
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(asked)), "ns/name")
			})
			b.Run(name+"/map", func(b *testing.B) {
				for b.Loop() {
					for _, n := range asked {
						if !s.has(n) {
							b.Fatal(n)
						}
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(asked)), "ns/name")
			})
		}
	}
}
