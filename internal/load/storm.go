// The reconnect storm: every client drops and reconnects with its known
// versions, then one change must reach all of them.

package load

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// storm drops every stream and reopens it, each at a random time within the
// window, with the client's known versions; then makes one change and waits
// until every client holds it.
func storm(sc Scenario, tg target, clients []*client, rng *rand.Rand, seq int, initBytes []int64) (*StormReport, error) {
	rep := &StormReport{Clients: len(clients), Window: sc.StormWindow.Seconds(), ResentFraction: map[string]float64{}}
	st0, err := tg.Stats()
	if err != nil {
		return nil, err
	}
	b0, _ := counters(clients)
	offsets := make([]time.Duration, len(clients))
	for i := range offsets {
		offsets[i] = time.Duration(rng.Int64N(int64(sc.StormWindow)))
	}
	start := time.Now()
	for _, c := range clients {
		c.stop()
	}
	done := make(chan struct{})
	for i, c := range clients {
		go func() {
			time.Sleep(time.Until(start.Add(offsets[i])))
			c.start(true)
			done <- struct{}{}
		}()
	}
	for range clients {
		<-done
	}
	if err := waitFor(sc.Timeout, func() bool {
		for _, c := range clients {
			if !c.up.Load() {
				return false
			}
		}
		return true
	}, clients); err != nil {
		return nil, fmt.Errorf("storm: reconnect: %w", err)
	}
	// Let the reconnect responses drain: no new bytes for 600ms.
	prev := int64(-1)
	for quiet := 0; quiet < 3; {
		time.Sleep(200 * time.Millisecond)
		b, _ := counters(clients)
		var sum int64
		for _, v := range b {
			sum += v
		}
		if sum == prev {
			quiet++
		} else {
			quiet = 0
		}
		prev = sum
	}
	b1, _ := counters(clients)
	resent := map[string][2]int64{}
	for i, c := range clients {
		m := "sotw"
		if c.delta {
			m = "delta"
		}
		r := resent[m]
		r[0] += b1[i] - b0[i]
		r[1] += initBytes[i]
		resent[m] = r
	}
	for m, r := range resent {
		if r[1] > 0 {
			rep.ResentFraction[m] = round3(float64(r[0]) / float64(r[1]))
		}
	}
	// One change, after every client reissued its requests, to a service
	// every client follows if any (sotw clients follow a subset).
	svc := rng.IntN(sc.Services)
	for s := range sc.Services {
		ok := true
		for _, c := range clients {
			ok = ok && c.wants[s]
		}
		if ok {
			svc = s
			break
		}
	}
	if err := tg.Change(seq, svc); err != nil {
		return nil, err
	}
	final := make([]int32, sc.Services)
	final[svc] = int32(seq)
	err = waitFor(sc.Timeout, func() bool {
		for _, c := range clients {
			if !c.convergedTo(final, []int{svc}) {
				return false
			}
		}
		return true
	}, clients)
	rep.Converged = err == nil
	var last int64
	for _, c := range clients {
		if !c.wants[svc] {
			continue
		}
		for _, o := range c.observations() {
			if (o.svc == int32(svc) || o.svc < 0) && o.marker >= int32(seq) {
				last = max(last, o.ack)
				break
			}
		}
	}
	if last > 0 {
		rep.ConvergedS = round3(float64(last-start.UnixNano()) / 1e9)
	}
	st1, err := tg.Stats()
	if err != nil {
		return nil, err
	}
	rep.CPUSeconds = round3(st1.CPUSeconds - st0.CPUSeconds)
	// (A later read of VmHWM can be lower than an earlier one: the
	// kernel updates the high-water mark lazily.)
	rep.PeakRSS, rep.PeakRSSBefore = max(st1.MaxRSSBytes, st0.MaxRSSBytes), st0.MaxRSSBytes
	return rep, nil
}
