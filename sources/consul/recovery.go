package consul

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"
)

// Recovery after an outage. A watch whose read failed because the agent is
// unavailable (the request did not get an answer, or Consul answered "No
// cluster leader") does not only sleep its backoff: it also waits on the
// recovery prober. While any watch waits so, the prober asks the agent
// GET /v1/status/leader every probeEvery (jittered down by a third); the
// first answer naming a leader wakes every waiting watch at once, each
// after a random delay below recoverySpread so they do not all hit the
// agent in the same instant. However long the backoffs grew, changes reach
// the source within about probeEvery + recoverySpread of Consul serving
// again. Should the agent answer the probe while the woken watches fail
// again (a broken agent that names a leader), each further wake-up without
// a successful read in between waits twice as long, up to retry_max, so
// the watches are never retried faster than their backoff would allow
// anyway for long.
const (
	probeEvery     = 750 * time.Millisecond
	probeTimeout   = 2 * time.Second
	recoverySpread = 250 * time.Millisecond
)

// recovery is the prober. Its methods are safe for concurrent use.
type recovery struct {
	r    *runner
	kick chan struct{} // capacity 1: "a watch is waiting"

	mu        sync.Mutex
	down      bool          // a watch saw the agent unavailable; not probed back yet
	woken     chan struct{} // closed and replaced when the probe succeeds
	wakes     int           // wake-ups since a failed watch last read successfully
	lastWake  time.Time
	probeFail string // the last probe failure, for DebugInfo
}

func newRecovery(r *runner) *recovery {
	return &recovery{r: r, kick: make(chan struct{}, 1), woken: make(chan struct{})}
}

// markDown notes that a watch saw the agent unavailable and returns the
// channel closed when the prober sees it back.
func (rc *recovery) markDown() <-chan struct{} {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if !rc.down {
		rc.down = true
		select {
		case rc.kick <- struct{}{}:
		default:
		}
	}
	return rc.woken
}

// readOK notes a successful read by a watch that had failed: the next
// wake-up is not held back. (Reads of watches that never failed do not
// count: a failover datacenter without a leader must not be retried every
// probe while the local one answers.)
func (rc *recovery) readOK() {
	rc.mu.Lock()
	rc.wakes = 0
	rc.mu.Unlock()
}

// run probes the agent while a watch waits for it, until ctx is done.
func (rc *recovery) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-rc.kick:
		}
		for {
			if sleep(ctx, jitterDown(probeEvery, 1.0/3)) != nil {
				return
			}
			rc.mu.Lock()
			down := rc.down
			rc.mu.Unlock()
			if !down {
				break
			}
			err := rc.probe(ctx)
			if ctx.Err() != nil {
				return
			}
			rc.mu.Lock()
			if err != nil {
				rc.probeFail = err.Error()
				rc.mu.Unlock()
				continue
			}
			rc.probeFail = ""
			if hold := rc.holdLocked(); time.Since(rc.lastWake) < hold {
				rc.mu.Unlock()
				continue
			}
			rc.down = false
			rc.wakes++
			rc.lastWake = time.Now()
			close(rc.woken)
			rc.woken = make(chan struct{})
			rc.mu.Unlock()
			rc.r.s.log.Debug("Consul agent answers with a leader; waking the failed watches")
			break
		}
	}
}

// holdLocked is the least time between two wake-ups without a successful
// read between them.
func (rc *recovery) holdLocked() time.Duration {
	if rc.wakes == 0 {
		return 0
	}
	d := probeEvery << min(rc.wakes, 16)
	return min(d, max(rc.r.s.set.retryMax, probeEvery))
}

// probe asks the agent for its leader: nil when it names one.
func (rc *recovery) probe(ctx context.Context) error {
	return rc.r.s.askLeader(ctx, rc.r.client, probeTimeout, epStatusLeader)
}

// askLeader asks the agent for its leader (GET /v1/status/leader) within
// timeout, counting the request under endpoint: nil when it names one.
func (s *Source) askLeader(ctx context.Context, client *api.Client, timeout time.Duration, endpoint string) error {
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	leader, err := client.Status().LeaderWithQueryOptions((&api.QueryOptions{}).WithContext(pctx))
	m := s.metrics
	switch {
	case err != nil && pctx.Err() != nil && ctx.Err() == nil:
		m.requests.WithLabelValues(endpoint, "error").Inc()
		return fmt.Errorf("no answer within %s", timeout)
	case err != nil:
		m.requests.WithLabelValues(endpoint, "error").Inc()
		return err
	case leader == "":
		m.requests.WithLabelValues(endpoint, "no_leader").Inc()
		return errors.New("the agent knows no cluster leader")
	}
	m.requests.WithLabelValues(endpoint, "ok").Inc()
	return nil
}

// retryWait waits before a failed watch reads again: the backoff d, cut
// short when the error says the agent is unavailable and the prober sees
// it back (then after a random delay below recoverySpread).
func (r *runner) retryWait(ctx context.Context, d time.Duration, err error) {
	if !r.unavailable(err) {
		_ = sleep(ctx, d)
		return
	}
	woken := r.rec.markDown()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	case <-woken:
		_ = sleep(ctx, time.Duration(rand.Int64N(int64(recoverySpread))))
	}
}

// unavailable reports whether a read error means the agent (or its
// servers) cannot serve yet: no answer at all (refused, reset, timed out;
// not a TLS problem, which does not go away by itself), "No cluster
// leader" or "Not ready to serve consistent reads" (a new leader
// replaying its log), which are "not yet" rather than a reason to back off
// fully.
func (r *runner) unavailable(err error) bool {
	if err == nil {
		return false
	}
	if strings.Contains(err.Error(), "No cluster leader") || strings.Contains(err.Error(), errNotReady) {
		return true
	}
	var ue *url.Error
	return errors.As(err, &ue) && r.s.set.tls.diagnose(err) == nil
}
