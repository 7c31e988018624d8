package xds

import (
	"testing"
	"time"
)

// The status page's latency feed: drained once, bounded, thinned evenly.
func TestRecentLatenciesDrain(t *testing.T) {
	var r recentLatencies
	s := &Server{}
	for i := range 10 {
		r.add(time.Duration(i))
	}
	s.recentACK.ds = r.ds
	if got := s.DrainChangeACK(); len(got) != 10 || got[9] != 9 {
		t.Fatalf("drained %v, want 0..9", got)
	}
	if got := s.DrainChangeACK(); got != nil {
		t.Fatalf("second drain %v, want nil", got)
	}
	for i := range 3 * maxRecentLatencies {
		s.recentACK.add(time.Duration(i))
	}
	got := s.DrainChangeACK()
	if len(got) > maxRecentLatencies || len(got) < maxRecentLatencies/2 {
		t.Fatalf("kept %d of %d, want at most %d and at least half", len(got), 3*maxRecentLatencies, maxRecentLatencies)
	}
	// Evenly thinned: the median of what is kept is near the true median.
	mid := got[len(got)/2]
	if want := time.Duration(3 * maxRecentLatencies / 2); mid < want*8/10 || mid > want*12/10 {
		t.Fatalf("median kept %d, true median %d", mid, want)
	}
}
