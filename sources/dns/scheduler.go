package dns

import (
	"container/heap"
	"context"
	"time"

	"github.com/xdsbridge/xdsbridge/sources"
)

// scheduler is the one goroutine that owns the timing of every target: a
// timer heap of next refresh times, a FIFO of due targets handed to the
// worker pool, and the publishing of changes. It is not safe for concurrent
// use; only Run's goroutine touches it.
type scheduler struct {
	s       *Source
	sink    sources.Sink
	jobs    chan<- *target
	results <-chan result

	due     timerHeap
	ready   []*target // due, waiting for a free worker
	pending int       // targets whose first resolution has not finished
	failing int       // targets whose last resolution failed

	// confirmed is when the source last confirmed its state to the sink.
	confirmed time.Time

	timer *time.Timer // fires at the earliest next refresh
	flush *time.Timer // coalescing window before a publish
	armed bool        // flush is running
	force bool        // publish even if nothing changed (first, or retry)
}

func newScheduler(s *Source, sink sources.Sink, jobs chan<- *target, results <-chan result) *scheduler {
	sch := &scheduler{s: s, sink: sink, jobs: jobs, results: results, pending: len(s.targets)}
	// Every name is resolved at once at start; the worker pool bounds it.
	sch.ready = append(sch.ready, s.targets...)
	for _, t := range s.targets {
		if t.lastErr != nil { // failing in an earlier run
			sch.failing++
		}
	}
	return sch
}

// loop runs until ctx is done.
func (sch *scheduler) loop(ctx context.Context) error {
	sch.timer = time.NewTimer(time.Hour)
	sch.flush = time.NewTimer(time.Hour)
	defer sch.timer.Stop()
	defer sch.flush.Stop()
	sch.flush.Stop()
	var flushC <-chan time.Time
	for {
		sch.promoteDue(time.Now())
		var jobs chan<- *target
		var head *target
		if len(sch.ready) > 0 {
			jobs, head = sch.jobs, sch.ready[0]
		}
		flushC = nil
		if sch.armed {
			flushC = sch.flush.C
		}
		select {
		case <-ctx.Done():
			return nil
		case jobs <- head:
			sch.ready[0] = nil
			sch.ready = sch.ready[1:]
		case r := <-sch.results:
			sch.handle(ctx, r)
		case <-sch.timer.C:
		case <-flushC:
			sch.armed = false
			sch.publish(ctx)
		}
	}
}

// promoteDue moves targets whose refresh time has come to the ready queue
// and sets the timer for the next one.
func (sch *scheduler) promoteDue(now time.Time) {
	for sch.due.Len() > 0 && !sch.due[0].next.After(now) {
		sch.ready = append(sch.ready, heap.Pop(&sch.due).(*target))
	}
	if sch.due.Len() > 0 {
		sch.timer.Reset(sch.due[0].next.Sub(now))
	}
}

// handle applies a result, reports a failure, schedules the next refresh and
// arms a publish when something changed (or when the first round is over).
func (sch *scheduler) handle(ctx context.Context, r result) {
	first, wasFailing := !r.t.done, r.t.lastErr != nil
	changed := sch.s.apply(r)
	recovered := false
	switch {
	case r.err != nil && !wasFailing:
		sch.failing++
	case r.err == nil && wasFailing:
		sch.failing--
		// The last failing name answered again: publish even if nothing
		// changed, which clears the bridge's stale mark (an unchanged
		// set is no change for the clients).
		recovered = sch.failing == 0
	}
	heap.Push(&sch.due, r.t)
	if r.err != nil {
		sch.s.metrics.resolutions.WithLabelValues("failure").Inc()
		sch.s.log.Debug("dns resolution failed", "service", r.t.svc.cfg.Name, "name", r.t.spec.name, "error", r.err)
		sch.sink.Fail(ctx, sch.s.name, r.err)
	} else {
		sch.s.metrics.resolutions.WithLabelValues("success").Inc()
		sch.confirm(ctx, recovered)
	}
	if changed {
		r.t.svc.dirty = true
	}
	if first {
		sch.pending--
		if sch.pending == 0 {
			// The first round is complete: publish now, marking the source ready.
			sch.force = true
			sch.publish(ctx)
			return
		}
	}
	if recovered {
		sch.force = true
	}
	if (changed || recovered) && sch.pending == 0 && !sch.armed {
		sch.flush.Reset(sch.s.coalesce)
		sch.armed = true
	}
}

// confirmEvery bounds how often a successful refresh is confirmed to the
// sink (every name's success would be an event each).
const confirmEvery = time.Second

// confirm tells the sink the source's state is current after a successful
// resolution, when no name is failing and every name has resolved once:
// at most once per confirmEvery, or at once when the last failing name
// recovered.
func (sch *scheduler) confirm(ctx context.Context, recovered bool) {
	now := time.Now()
	if sch.failing > 0 || sch.pending > 0 || (!recovered && now.Sub(sch.confirmed) < confirmEvery) {
		return
	}
	sch.confirmed = now
	sources.Confirm(ctx, sch.sink, sch.s.name, now)
}

// publish sends the full set of services if any endpoint set changed since
// the last publish (or if forced).
func (sch *scheduler) publish(ctx context.Context) {
	changed := sch.force
	for _, svc := range sch.s.services {
		if !svc.dirty {
			continue
		}
		svc.dirty = false
		sch.s.mu.Lock()
		eps := svc.endpoints()
		sch.s.mu.Unlock()
		if !sameEndpoints(eps, svc.published) {
			svc.published = eps
			changed = true
		}
	}
	if !changed {
		return
	}
	u := sources.Update{Source: sch.s.name, Services: make([]sources.Service, len(sch.s.services)), Incomplete: sch.failing > 0}
	for i, svc := range sch.s.services {
		u.Services[i] = sources.Service{Name: svc.cfg.Name, Endpoints: append([]sources.Endpoint{}, svc.published...)}
	}
	sch.s.metrics.publishes.Inc()
	if err := sch.sink.Publish(ctx, u); err != nil {
		if ctx.Err() != nil {
			return
		}
		sch.s.log.Warn("publish failed; retrying", "error", err)
		sch.force = true
		sch.flush.Reset(publishRetry)
		sch.armed = true
		return
	}
	sch.force = false
}

// timerHeap orders targets by next refresh time.
type timerHeap []*target

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return h[i].next.Before(h[j].next) }
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIndex, h[j].heapIndex = i, j
}

func (h *timerHeap) Push(x any) {
	t := x.(*target)
	t.heapIndex = len(*h)
	*h = append(*h, t)
}

func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	t.heapIndex = -1
	*h = old[:len(old)-1]
	return t
}
