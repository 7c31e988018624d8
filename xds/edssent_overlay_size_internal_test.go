package xds

import (
	"fmt"
	"testing"
	"time"
)

// TestSentAssignmentsOverlaySizedToNames: a delta stream subscribed to
// many names, of which many are not sent (no assignment yet, or removed),
// is then sent one new assignment. The overlay made for it must be sized
// to what was sent, not to the gap between the subscription and the set
// (that gap need never be sent: a slice of its size is held, per stream,
// until a fold that may never come).
func TestSentAssignmentsOverlaySizedToNames(t *testing.T) {
	const n = 20000
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("c%05d", i)
	}
	ds := deltaSub{names: emptyNames, held: &deltaHeld{versions: map[string]string{}}}
	ds.update(names, nil)
	var s sentAssignments
	s.keep(ds.names.m, ds.names, ds.grewFrom)
	// Half the subscription has assignments, sent in one response.
	s.add(true, names[:n/2], time.Time{}, 0)
	s.keep(ds.names.m, ds.names, ds.grewFrom) // the Envoy's next request (an ACK)
	if s.extra.len() != 0 {
		t.Fatalf("after the first response: %d names in the overlay, want them folded", s.extra.len())
	}
	// One more assignment appears.
	s.add(true, names[n/2:n/2+1], time.Time{}, 0)
	if c := cap(s.extra.asc); c > 2*minFold {
		t.Errorf("one name sent: the overlay's slice has capacity %d (%d bytes held per stream), want at most %d", c, c*16, 2*minFold)
	}
	// The same after a mass removal from a stream that had everything.
	var r sentAssignments
	r.keep(ds.names.m, ds.names, ds.grewFrom)
	r.add(true, names, time.Time{}, 0)
	r.keep(ds.names.m, ds.names, ds.grewFrom)
	r.remove(names[:n/2])
	r.add(true, names[:1], time.Time{}, 0)
	if c := cap(r.extra.asc); c > 2*minFold {
		t.Fatalf("one name sent again after a removal: the overlay's slice has capacity %d (%d bytes held per stream), want at most %d", c, c*16, 2*minFold)
	}
}
