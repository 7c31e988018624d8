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
	m := newGuardMetrics()
	const wait = 300 * time.Millisecond
	b := newUnwrittenBudget(100, wait, m)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := b.take(ctx, 60); err != nil { // never given back
		t.Fatal(err)
	}
	queued := func(n int) {
		t.Helper()
		for start := time.Now(); ; time.Sleep(time.Millisecond) {
			b.mu.Lock()
			q := len(b.queue)
			b.mu.Unlock()
			if q == n {
				return
			}
			if time.Since(start) > wait/3 {
				t.Fatalf("%d waiting, want %d", q, n)
			}
		}
	}
	fctx, leave := context.WithCancel(ctx)
	first := make(chan error, 1)
	go func() {
		_, err := b.take(fctx, 50)
		first <- err
	}()
	queued(1)
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
