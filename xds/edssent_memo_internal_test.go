package xds

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// TestSotwSentFoldKeepsListsShared: a sotw stream's record of the
// assignments sent, folded in its first sync, does not push the sotw
// subscriptions' lists out of sotwNames's memo (maxMemo): with 15 lists
// alive and one stream mid-sync, a 16th list would clear the memo, and the
// next client of list 0 would get a copy of its own instead of the shared
// one (and so would its accounting, keptList).
func TestSotwSentFoldKeepsListsShared(t *testing.T) {
	list := func(k int) []string {
		names := make([]string, 300)
		for i := range names {
			names[i] = fmt.Sprintf("memo-%02d-%04d", k, i)
		}
		return names
	}
	// From an empty memo: other tests' sets may be alive.
	sotwNames.mu.Lock()
	clear(sotwNames.calls)
	sotwNames.mu.Unlock()
	var subs []sotwSub
	for k := range maxMemo - 1 {
		subs = append(subs, newSotwSub(list(k)))
	}
	var s sentAssignments
	s.keep(subs[0].names.m, subs[0].names, nil)
	s.add(false, list(0)[:100], time.Now(), 100*time.Millisecond) // a first part, folded
	subs = append(subs, newSotwSub(list(maxMemo-1)))
	again := newSotwSub(list(0))
	if !unsafeSame(again.listed, subs[0].listed) {
		t.Errorf("a new client of list 0 keeps a copy of its own: the sent record's fold evicted the lists from sotwNames's memo")
	}
	runtime.KeepAlive(subs)
	runtime.KeepAlive(&s)
}
