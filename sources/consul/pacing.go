package consul

import (
	"context"
	"math/rand/v2"
	"time"
)

// tokenBucket is a minimal token-bucket rate limiter: rate tokens per second
// up to burst. It is not safe for concurrent use; each watch owns one.
type tokenBucket struct {
	rate   float64
	burst  float64
	tokens float64
	last   time.Time
	now    func() time.Time
}

func newTokenBucket(rate float64, burst int) *tokenBucket {
	return &tokenBucket{rate: rate, burst: float64(burst), tokens: float64(burst), now: time.Now}
}

// reserve takes one token and returns how long the caller must wait before
// using it (0 when a token was available).
func (b *tokenBucket) reserve() time.Duration {
	now := b.now()
	if !b.last.IsZero() {
		b.tokens += now.Sub(b.last).Seconds() * b.rate
		if b.tokens > b.burst {
			b.tokens = b.burst
		}
	}
	b.last = now
	b.tokens--
	if b.tokens >= 0 || b.rate <= 0 {
		return 0
	}
	return time.Duration(-b.tokens / b.rate * float64(time.Second))
}

// wait blocks until a token is available or ctx is done.
func (b *tokenBucket) wait(ctx context.Context) error {
	return sleep(ctx, b.reserve())
}

// backoff is capped exponential backoff with jitter. Not safe for concurrent
// use.
type backoff struct {
	min, max time.Duration
	cur      time.Duration
}

// next returns the delay before the next retry: the current step scaled by
// a random factor in [0.5, 1), then doubles the step up to max.
func (b *backoff) next() time.Duration {
	if b.cur < b.min {
		b.cur = b.min
	}
	d := time.Duration(float64(b.cur) * (0.5 + rand.Float64()/2))
	b.cur *= 2
	if b.cur > b.max {
		b.cur = b.max
	}
	return d
}

// reset starts over after a success.
func (b *backoff) reset() { b.cur = 0 }

// jitterDown returns d reduced by a random fraction up to frac, so that
// watches started together do not stay in lockstep.
func jitterDown(d time.Duration, frac float64) time.Duration {
	return d - time.Duration(float64(d)*frac*rand.Float64())
}

// sleep waits d or until ctx is done, whichever is first.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// nextIndex applies Consul's blocking-query index rules to a returned index:
// an index lower than the previous one (the data was rebuilt: a restarted
// dev agent, a restored snapshot) resets it to 0 so the next query does not
// block and re-reads from scratch; an index of 0 is treated as 1 so a buggy
// or empty response cannot turn the watch into a busy loop.
func nextIndex(prev, got uint64) (next uint64, reset bool) {
	if got < prev {
		return 0, true
	}
	if got == 0 {
		return 1, false
	}
	return got, false
}
