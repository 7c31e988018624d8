package xds

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestUnwrittenWaitsCountedExpired: responses let go because bytes held
// unwritten expired are all counted "expired", whichever waiter's timer
// found the bytes expired.
func TestUnwrittenWaitsCountedExpired(t *testing.T) {
	m := newGuardMetrics()
	const wait = 500 * time.Millisecond
	b := newUnwrittenBudget(100, wait, m)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := b.take(ctx, 60); err != nil { // never given back
		t.Fatal(err)
	}
	const waiters = 2 // 50 each: neither fits beside the 60, both after
	errs := make(chan error, waiters)
	for range waiters {
		go func() {
			_, err := b.take(ctx, 50)
			errs <- err
		}()
	}
	start := time.Now()
	for queued := 0; queued < waiters; time.Sleep(time.Millisecond) {
		b.mu.Lock()
		queued = len(b.queue)
		b.mu.Unlock()
		if time.Since(start) > wait/2 {
			t.Fatalf("%d of %d waiting before the bytes expire", queued, waiters)
		}
	}
	for range waiters {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for outcome, want := range map[string]float64{"expired": waiters, "room": 0} {
		if got := testutil.ToFloat64(m.responsesWaited.WithLabelValues(outcome)); got != want {
			t.Errorf("waits %s: %v, want %v", outcome, got, want)
		}
	}
}
