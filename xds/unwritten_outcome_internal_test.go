package xds

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestUnwrittenWaitsCountedExpired: responses let go because bytes held
// unwritten expired are all counted "expired", however many went at
// once.
func TestUnwrittenWaitsCountedExpired(t *testing.T) {
	const wait = 500 * time.Millisecond
	b, m, ctx := heldBudget(t, wait)
	const waiters = 2 // 50 each: neither fits beside the 60, both after
	errs := make(chan error, waiters)
	for range waiters {
		go func() {
			_, err := b.take(ctx, 50)
			errs <- err
		}()
	}
	awaitQueued(t, b, waiters, wait/2) // before the bytes expire
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
