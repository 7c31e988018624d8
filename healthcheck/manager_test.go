package healthcheck

import (
	"math/rand/v2"
	"testing"

	"github.com/xdsbridge/xdsbridge/sources"
)

// publisher models the merge loop: it publishes what Manager.Verdict says
// whenever it rebuilds the service, which it does on each delivered
// transition and also at any other time (another host's transition, a
// discovery update).
type publisher struct {
	m         *Manager
	service   string
	host      sources.HostKey
	published Verdict
}

func (p *publisher) flush() { p.published = p.m.Verdict(p.service, p.host) }

// drain delivers every pending transition, rebuilding on each.
func (p *publisher) drain(c *Checker) int {
	n := 0
	for {
		if _, ok := c.nextPending(); !ok {
			return n
		}
		n++
		p.flush()
	}
}

// TestManagerVerdictConsistentWithTransitions: a consumer that rebuilds on
// each transition, and at other times too, ends up publishing the current
// verdict once the transitions are drained, even when a change it already
// published was undone before its transition was delivered (and coalesced
// away).
func TestManagerVerdictConsistentWithTransitions(t *testing.T) {
	c := NewChecker(Options{Seed: 1})
	host := sources.HostKey{Address: "127.0.0.1", Port: 1}
	m := NewManager(c, nil, map[string]Config{"web": tcpCheck(1000)})
	m.SetHosts([]ServiceHosts{{Service: "web", Source: "file", Hosts: []sources.HostKey{host}}})
	k := Target{Host: host, Check: tcpCheck(1000)}.Key()
	set := func(v Verdict) {
		c.mu.Lock()
		c.targets[k].st.Verdict = v
		c.queueTransition(c.targets[k])
		c.mu.Unlock()
	}
	p := &publisher{m: m, service: "web", host: host}

	// The scenario: Healthy delivered and published; the host turns
	// Unhealthy; before that transition is delivered the service is
	// rebuilt for another reason; the host turns Healthy again.
	set(Healthy)
	p.drain(c)
	set(Unhealthy)
	p.flush()
	set(Healthy)
	p.drain(c)
	if want := c.Verdict(k); p.published != want {
		t.Errorf("published %s after the transitions were drained; the verdict is %s", p.published, want)
	}

	// The same at random: verdict changes, deliveries and rebuilds in any
	// order.
	rng := rand.New(rand.NewPCG(3, 5))
	for run := 0; run < 2000; run++ {
		var ops []string
		for i := 0; i < 12; i++ {
			switch rng.IntN(3) {
			case 0:
				v := Verdict(1 + rng.IntN(2))
				ops = append(ops, "set "+v.String())
				set(v)
			case 1:
				ops = append(ops, "deliver")
				if _, ok := c.nextPending(); ok {
					p.flush()
				}
			case 2:
				ops = append(ops, "rebuild")
				p.flush()
			}
		}
		p.drain(c)
		if want := c.Verdict(k); p.published != want {
			t.Fatalf("run %d: published %s after the transitions were drained; the verdict is %s (ops %v)", run, p.published, want, ops)
		}
	}
}
