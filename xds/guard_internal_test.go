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

// A line the per-stream limiter let through but the server-wide one did
// not is counted as not logged by the stream, and the next line of each
// says how many were not.
func TestLogLimiterUnallow(t *testing.T) {
	stream, server := logLimiter{perMinute: 2}, logLimiter{perMinute: 1}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	logged := 0
	for i := range 5 {
		now := t0.Add(time.Duration(i) * time.Second)
		ok, sup := stream.allow(now)
		if ok {
			if ok, _ = server.allow(now); !ok {
				stream.unallow(sup)
			}
		}
		if ok {
			logged++
		}
	}
	if logged != 1 {
		t.Fatalf("logged %d, want 1", logged)
	}
	now := t0.Add(61 * time.Second)
	ok, sup := stream.allow(now)
	sok, ssup := server.allow(now)
	if !ok || sup != 4 || !sok || ssup != 4 {
		t.Fatalf("next minute: stream %v %d, server %v %d; want true 4, true 4", ok, sup, sok, ssup)
	}
}
