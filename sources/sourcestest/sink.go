// Package sourcestest has helpers for testing sources: a Sink that records
// what a source publishes and lets a test wait for it.
package sourcestest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/xdsbridge/xdsbridge/sources"
)

// Sink records Publish, PublishPolicy, Fail, Confirm and ReportDropped
// calls. It is safe for concurrent use.
type Sink struct {
	mu       sync.Mutex
	updates  []sources.Update
	policies []sources.PolicyUpdate
	errs     []error
	confirms []time.Time
	dropped  []sources.Dropped
	changed  chan struct{}
}

var (
	_ sources.Sink         = (*Sink)(nil)
	_ sources.Confirmer    = (*Sink)(nil)
	_ sources.DropReporter = (*Sink)(nil)
)

// Confirm records at.
func (s *Sink) Confirm(_ context.Context, _ string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.confirms = append(s.confirms, at)
	s.notify()
}

// Confirms returns the times of every Confirm so far.
func (s *Sink) Confirms() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.confirms...)
}

// WaitConfirms blocks until at least n confirmations were recorded, or
// fails the test after timeout.
func (s *Sink) WaitConfirms(t testing.TB, timeout time.Duration, n int) {
	t.Helper()
	s.wait(t, timeout, fmt.Sprintf("%d confirmations", n), func() bool { return len(s.confirms) >= n })
}

// ReportDropped records the list.
func (s *Sink) ReportDropped(_ context.Context, _ string, dropped []sources.Dropped) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropped = dropped
	s.notify()
}

// Dropped returns the last reported list of dropped instances.
func (s *Sink) Dropped() []sources.Dropped {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sources.Dropped(nil), s.dropped...)
}

// NewSink returns an empty recording sink.
func NewSink() *Sink { return &Sink{changed: make(chan struct{})} }

func (s *Sink) notify() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// Publish records u.
func (s *Sink) Publish(ctx context.Context, u sources.Update) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.updates = append(s.updates, u)
	s.notify()
	return ctx.Err()
}

// PublishPolicy records u.
func (s *Sink) PublishPolicy(ctx context.Context, u sources.PolicyUpdate) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.policies = append(s.policies, u)
	s.notify()
	return ctx.Err()
}

// Policies returns every policy update so far.
func (s *Sink) Policies() []sources.PolicyUpdate {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sources.PolicyUpdate(nil), s.policies...)
}

// Fail records err.
func (s *Sink) Fail(_ context.Context, _ string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.errs = append(s.errs, err)
	s.notify()
}

// Updates returns every update so far.
func (s *Sink) Updates() []sources.Update {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sources.Update(nil), s.updates...)
}

// Errors returns every reported error so far.
func (s *Sink) Errors() []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]error(nil), s.errs...)
}

// Last returns the last update, if any.
func (s *Sink) Last() (sources.Update, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.updates) == 0 {
		return sources.Update{}, false
	}
	return s.updates[len(s.updates)-1], true
}

// WaitFor blocks until cond holds for the recorded updates and errors, or
// fails the test after timeout.
func (s *Sink) WaitFor(t testing.TB, timeout time.Duration, what string, cond func(updates []sources.Update, errs []error) bool) {
	t.Helper()
	s.wait(t, timeout, what, func() bool { return cond(s.updates, s.errs) })
}

// wait blocks until cond, called with s.mu held, holds, or fails the test
// after timeout.
func (s *Sink) wait(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		ok := cond()
		ch := s.changed
		n, e, c := len(s.updates), len(s.errs), len(s.confirms)
		s.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("timed out after %s waiting for %s (%d updates, %d errors, %d confirmations; last: %s)", timeout, what, n, e, c, s.describeLast())
		}
	}
}

func (s *Sink) describeLast() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := ""
	if len(s.updates) > 0 {
		out += fmt.Sprintf("update %+v", s.updates[len(s.updates)-1])
	}
	if len(s.errs) > 0 {
		out += fmt.Sprintf(" error %v", s.errs[len(s.errs)-1])
	}
	return out
}

// Service returns the named service from u, if present.
func Service(u sources.Update, name string) (sources.Service, bool) {
	for _, s := range u.Services {
		if s.Name == name {
			return s, true
		}
	}
	return sources.Service{}, false
}

// Run starts src with a new Sink and returns the sink. When the test ends
// it cancels the source and fails the test unless Run returns nil within
// stopWithin.
func Run(t testing.TB, src sources.Source, stopWithin time.Duration) *Sink {
	t.Helper()
	sink := NewSink()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, sink) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("source %s: Run returned %v", src.Name(), err)
			}
		case <-time.After(stopWithin):
			t.Errorf("source %s: Run did not return within %s of cancellation", src.Name(), stopWithin)
		}
	})
	return sink
}
