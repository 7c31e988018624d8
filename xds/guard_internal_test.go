package xds

import (
	"testing"
	"time"
)

// The NACK log limiter lets perMinute lines through each minute, and the
// first line after a suppressed run says how many were not logged.
func TestLogLimiter(t *testing.T) {
	l := logLimiter{perMinute: 3}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var logged []int
	for i := range 10 {
		if ok, sup := l.allow(t0.Add(time.Duration(i) * time.Second)); ok {
			logged = append(logged, sup)
		}
	}
	if len(logged) != 3 {
		t.Fatalf("logged %d in the first minute, want 3", len(logged))
	}
	ok, sup := l.allow(t0.Add(61 * time.Second))
	if !ok || sup != 7 {
		t.Fatalf("next minute: logged %v, suppressed %d; want true, 7", ok, sup)
	}
	if ok, sup := l.allow(t0.Add(62 * time.Second)); !ok || sup != 0 {
		t.Fatalf("then: %v, %d", ok, sup)
	}
}
