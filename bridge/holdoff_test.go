package bridge

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/xdsbridge/xdsbridge/sources"
)

// fakeClock is a clock the test moves (Options.Now); timers stay real.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// manyEndpoints is service x with n endpoints.
func manyEndpoints(n int) sources.Service {
	ports := make([]uint32, n)
	for i := range ports {
		ports[i] = uint32(i + 1)
	}
	return service("x", ports...)
}

// TestLeadingEdgeIsolatedChange: a change that comes after a quiet
// period is published at once, not after another quiet period (10 s here;
// rec.next gives up after 5 s).
func TestLeadingEdgeIsolatedChange(t *testing.T) {
	clk := &fakeClock{now: time.Unix(1_000_000, 0)}
	rec := newRecorder()
	l := run(t, Options{Sources: []string{"a"}, Quiet: 10 * time.Second, MaxHold: 20 * time.Second, Now: clk.Now}, rec)
	start := time.Now()
	publish(t, l, "a", manyEndpoints(1))
	if c := rec.next(t); c.loads["x"] != 1 {
		t.Fatalf("first publish %+v", c)
	}
	for i := 2; i <= 4; i++ {
		clk.advance(11 * time.Second) // quiet since the last publish
		sent := time.Now()
		publish(t, l, "a", manyEndpoints(i))
		if c := rec.next(t); c.loads["x"] != i {
			t.Fatalf("change %d published as %+v", i, c)
		}
		t.Logf("isolated change %d published %s after it was sent (quiet 10s)", i, time.Since(sent).Round(time.Microsecond))
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.calls) != 4 {
		t.Fatalf("%d publishes for 4 isolated changes", len(rec.calls))
	}
	t.Logf("4 isolated changes, 4 publishes, in %s", time.Since(start).Round(time.Millisecond))
}

// TestHoldoffBatchesBurst: in a burst (20 changes 5 ms apart), the first
// change is published at once and the rest, which follow within the quiet
// period, go together after it: 2 publishes at most for 20 changes, the last one the burst's
// final state.
func TestHoldoffBatchesBurst(t *testing.T) {
	const quiet = 2 * time.Second
	clk := &fakeClock{now: time.Unix(1_000_000, 0)}
	rec := newRecorder()
	l := run(t, Options{Sources: []string{"a"}, Quiet: quiet, MaxHold: 10 * quiet, Now: clk.Now}, rec)
	publish(t, l, "a", manyEndpoints(1))
	rec.next(t)
	clk.advance(quiet + time.Second)
	sent := time.Now()
	tk := time.NewTicker(5 * time.Millisecond) // paced, so that they do not arrive queued together
	defer tk.Stop()
	for i := 2; i <= 21; i++ {
		<-tk.C
		publish(t, l, "a", manyEndpoints(i)) // the clock stands still: all within the quiet period
	}
	first := rec.next(t)
	if at := time.Since(sent); at >= quiet {
		t.Fatalf("the burst's first publish came %s after it started: not at once (quiet %s)", at, quiet)
	}
	last := first
	if first.loads["x"] != 21 {
		last = rec.next(t)
	}
	rec.none(t, quiet+quiet/2)
	rec.mu.Lock()
	n := len(rec.calls) - 1
	rec.mu.Unlock()
	t.Logf("burst of 20 changes: %d publishes (first with %d endpoints, %s after the burst began; last with %d)", n, first.loads["x"], first.at.Sub(sent).Round(time.Microsecond), last.loads["x"])
	if last.loads["x"] != 21 || n > 2 {
		t.Fatalf("burst of 20: %d publishes, the last with %d endpoints; want at most 2, the last with 21", n, last.loads["x"])
	}
}

// TestHoldoffBoundsPublishRate: 100 changes/s for 3 s with the default
// debounce (quiet 50ms, max 500ms) are published a few times per second,
// not once per change, and the last state is published.
func TestHoldoffBoundsPublishRate(t *testing.T) {
	rec := newRecorder()
	rec.changed = make(chan struct{}, 1000)
	l := run(t, Options{Sources: []string{"a"}}, rec)
	publish(t, l, "a", manyEndpoints(1))
	rec.next(t)
	const changes = 300
	tk := time.NewTicker(10 * time.Millisecond)
	start := time.Now()
	const final = 20 // the last change's endpoints; the others have 2..8
	for i := 1; i <= changes; i++ {
		<-tk.C
		n := i%7 + 2
		if i == changes {
			n = final
		}
		if err := l.Publish(context.Background(), sources.Update{Source: "a", Services: []sources.Service{manyEndpoints(n)}}); err != nil {
			t.Fatal(err)
		}
	}
	tk.Stop()
	took := time.Since(start)
	waitTrue(t, func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return rec.calls[len(rec.calls)-1].loads["x"] == final
	})
	for len(rec.changed) > 0 {
		<-rec.changed // the signals of the publishes counted above
	}
	rec.none(t, 700*time.Millisecond) // past the max hold: nothing more comes
	rec.mu.Lock()
	pubs := len(rec.calls) - 1
	rec.mu.Unlock()
	t.Logf("%d changes in %s (%.0f/s): %d publishes, %.3f publishes per change", changes, took.Round(time.Millisecond), changes/took.Seconds(), pubs, float64(pubs)/changes)
	if pubs > changes/10 {
		t.Fatalf("%d publishes for %d changes: the hold-off does not batch", pubs, changes)
	}
}
