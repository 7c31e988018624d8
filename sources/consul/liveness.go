package consul

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/xdsbridge/xdsbridge/sources"
)

// DefaultStaleAfter is how long the agent may go without answering before
// the source is marked stale (stale_after).
const DefaultStaleAfter = 10 * time.Second

// epLiveness is the metric endpoint label of the liveness probe.
const epLiveness = "liveness"

// Liveness. A blocking query waits up to wait_time (5 minutes) for a
// change: on that connection a quiet registry and a hung agent (stopped,
// its TCP stack still accepting) look the same. So a prober asks the agent
// GET /v1/status/leader every stale_after/4, on a client of its own (one
// connection, never queued behind the blocking queries), each probe bounded
// by stale_after/2. Every answer, a probe's or a read's, counts as
// contact. When stale_after passes without any, the source reports the
// failure (sink.Fail: stale, the last good state stays served, nothing is
// published). The first probe answered after that confirms the state
// again (sources.Confirm): the blocking queries the agent held resume, so
// changes flow as soon as it answers; a connection that stays silent is
// abandoned at the read's deadline (wait_time + wait_time/16 + 15s) and
// the read retried on a new one.
//
// The probe costs the agent one small request (no catalog read, no
// blocking) per stale_after/4 per source: with the default, 0.4 requests
// a second, whatever the number of services.
type liveness struct {
	s      *Source
	client *api.Client

	started time.Time // when run started: the silence is counted from it until the first answer

	mu         sync.Mutex
	lastAnswer time.Time // the last answer of the agent, a probe's or a read's; zero: none yet
	lastProbe  string    // the last probe failure ("" after a success)
	stale      bool      // reported stale; not confirmed since
	confirmed  time.Time // the last answer confirmed to the sink
}

func newLiveness(s *Source, client *api.Client) *liveness {
	return &liveness{s: s, client: client, started: time.Now()}
}

// answered records an answer of the agent.
func (lv *liveness) answered(at time.Time) {
	lv.mu.Lock()
	if at.After(lv.lastAnswer) {
		lv.lastAnswer = at
	}
	lv.mu.Unlock()
}

// run probes the agent and reports staleness and confirmations to sink
// until ctx is done.
func (lv *liveness) run(ctx context.Context, sink sources.Sink) {
	after := lv.s.set.staleAfter
	every := after / 4
	tick := time.NewTicker(every)
	defer tick.Stop()
	deadline := time.NewTimer(after)
	defer deadline.Stop()
	results := make(chan error, 1)
	inflight := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if !inflight {
				inflight = true
				go func() { results <- lv.s.askLeader(ctx, lv.client, after/2, epLiveness) }()
			}
			lv.confirm(ctx, sink)
		case err := <-results:
			inflight = false
			now := time.Now()
			lv.mu.Lock()
			if err != nil {
				lv.lastProbe = err.Error()
			} else {
				lv.lastProbe = ""
				lv.lastAnswer = now
			}
			lv.mu.Unlock()
			if err == nil {
				lv.confirm(ctx, sink)
			}
		case <-deadline.C:
			lv.mu.Lock()
			silent := time.Since(lv.lastAnswerOrStart())
			report := silent >= after && !lv.stale
			if report {
				lv.stale = true
			}
			probe := lv.lastProbe
			lv.mu.Unlock()
			deadline.Reset(max(after-silent, every))
			if report {
				if probe == "" {
					probe = "no answer yet"
				}
				err := fmt.Errorf("the Consul agent at %s has not answered for %s (stale_after; liveness probe: %s); the last good state stays served", lv.s.agentURL(), silent.Round(time.Millisecond), probe)
				lv.s.log.Warn("consul source "+lv.s.name+" is stale: the agent does not answer", "silent", silent.Round(time.Millisecond).String(), "stale_after", after.String(), "probe", probe)
				sink.Fail(ctx, lv.s.name, err)
			}
		}
	}
}

// lastAnswerOrStart is the last answer, or the start before the first;
// lv.mu is held.
func (lv *liveness) lastAnswerOrStart() time.Time {
	if lv.lastAnswer.IsZero() {
		return lv.started
	}
	return lv.lastAnswer
}

// confirm tells the sink of the agent's last answer when it is newer than
// the last one told and no watch is failing (a failing watch's data is
// not confirmed by the agent answering something else).
func (lv *liveness) confirm(ctx context.Context, sink sources.Sink) {
	lv.s.mu.Lock()
	failing := lv.s.failingLocked()
	lv.s.mu.Unlock()
	lv.mu.Lock()
	at := lv.lastAnswer
	if failing || !at.After(lv.confirmed) {
		lv.mu.Unlock()
		return
	}
	lv.confirmed = at
	wasStale := lv.stale
	lv.stale = false
	lv.mu.Unlock()
	if wasStale {
		lv.s.log.Info("consul source " + lv.s.name + " confirmed again: the agent answers")
	}
	sources.Confirm(ctx, sink, lv.s.name, at)
}

// debug is the liveness part of DebugInfo.
func (lv *liveness) debug(now time.Time) *DebugLiveness {
	lv.mu.Lock()
	defer lv.mu.Unlock()
	return &DebugLiveness{
		StaleAfter:  lv.s.set.staleAfter.String(),
		LastAnswer:  lv.lastAnswer,
		SilentFor:   now.Sub(lv.lastAnswerOrStart()).Round(time.Millisecond).String(),
		ProbeError:  lv.lastProbe,
		ReportStale: lv.stale,
	}
}

// DebugLiveness is the liveness probe's state in DebugInfo.
type DebugLiveness struct {
	StaleAfter string    `json:"stale_after"`
	LastAnswer time.Time `json:"last_answer,omitzero"`
	// SilentFor is the time since the last answer (since the start
	// before the first).
	SilentFor  string `json:"silent_for"`
	ProbeError string `json:"probe_error,omitempty"`
	// ReportStale: the agent has not answered for stale_after; no answer
	// was confirmed since.
	ReportStale bool `json:"stale"`
}
