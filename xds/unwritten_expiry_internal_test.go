package xds

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestUnwrittenExpiryOutlivesLeavingWaiter: bytes held unwritten for the
// wait stop counting for a response that waits, though the response that
// waited first (when the expiry was set) left, its stream ended.
func TestUnwrittenExpiryOutlivesLeavingWaiter(t *testing.T) {
	const wait = 500 * time.Millisecond
	b, m, ctx := heldBudget(t, wait)
	fctx, leave := context.WithCancel(ctx)
	first := make(chan error, 1)
	go func() {
		_, err := b.take(fctx, 50)
		first <- err
	}()
	awaitQueued(t, b, 1, wait/2) // before the bytes expire
	leave()
	if err := <-first; err == nil {
		t.Fatal("a wait whose stream ended took the bytes")
	}
	if _, err := b.take(ctx, 50); err != nil {
		t.Fatalf("a response still waits after the bytes before it were held unwritten for the wait: %v", err)
	}
	for outcome, want := range map[string]float64{"expired": 1, "ended": 1, "room": 0} {
		if got := testutil.ToFloat64(m.responsesWaited.WithLabelValues(outcome)); got != want {
			t.Errorf("waits %s: %v, want %v", outcome, got, want)
		}
	}
}

// heldBudget is a budget of 100 bytes whose bytes held unwritten expire
// after wait, 60 of them taken and never given back, its metrics, and a
// context for the test's waits.
func heldBudget(t *testing.T, wait time.Duration) (*unwrittenBudget, *guardMetrics, context.Context) {
	t.Helper()
	m := newGuardMetrics()
	b := newUnwrittenBudget(100, wait, m)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	if _, err := b.take(ctx, 60); err != nil {
		t.Fatal(err)
	}
	return b, m, ctx
}

// awaitQueued waits until n responses wait in b's queue, for within at
// most.
func awaitQueued(t *testing.T, b *unwrittenBudget, n int, within time.Duration) {
	t.Helper()
	for start := time.Now(); ; time.Sleep(time.Millisecond) {
		b.mu.Lock()
		q := len(b.queue)
		b.mu.Unlock()
		if q == n {
			return
		}
		if time.Since(start) > within {
			t.Fatalf("%d responses waiting, want %d", q, n)
		}
	}
}
