// The reconnect storm: every client drops and reconnects with its known
// versions; once each has had the answers to its reconnected streams (it
// is resynced) and no bytes have flowed for 600 ms, one change must reach
// all of them.

package load

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// storm drops every stream and reopens it, each at a random time within the
// window, with the client's known versions; then makes one change and waits
// until every client holds it. It samples the harness's and the serving
// process's CPU through it.
func storm(sc Scenario, tg target, clients []*client, rng *rand.Rand, seq int, initBytes []int64) (*StormReport, error) {
	rep := &StormReport{Clients: len(clients), Window: sc.StormWindow.Seconds(), ResentFraction: map[string]float64{}}
	st0, err := tg.Stats()
	if err != nil {
		return nil, err
	}
	u0, err := tg.Usage() // the storm's CPU (see target.Usage)
	if err != nil {
		return nil, err
	}
	b0, _ := counters(clients)
	offsets := make([]time.Duration, len(clients))
	for i := range offsets {
		offsets[i] = time.Duration(rng.Int64N(int64(sc.StormWindow)))
	}
	start := time.Now()
	stopSampling := sampleCPU(tg, start, &rep.Samples)
	defer stopSampling()
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
	var resynced int64
	for _, c := range clients {
		if t := c.resynced.Load(); t > 0 {
			rep.Resynced++
			resynced = max(resynced, t)
		}
	}
	if resynced > 0 {
		rep.ResyncS = round3(float64(resynced-start.UnixNano()) / 1e9)
	}
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
	changed := time.Now()
	rep.ChangeAtS = round3(changed.Sub(start).Seconds())
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
	stopSampling()
	if last > 0 {
		rep.ChangeAckedS = round3(float64(last-start.UnixNano()) / 1e9)
		rep.ChangeS = round3(float64(last-changed.UnixNano()) / 1e9)
	}
	// Converged: every client resynced; a target that leaves some
	// reconnected stream unanswered until the change converged when the
	// change reached every client.
	rep.ConvergedS = rep.ResyncS
	if rep.Resynced < len(clients) {
		rep.ConvergedS = rep.ChangeAckedS
	}
	rep.HarnessCPUToResync, rep.ServerCPUToResync = cpuAt(rep.Samples, rep.ResyncS)
	u1, err := tg.Usage()
	if err != nil {
		return nil, err
	}
	st1, err := tg.Stats()
	if err != nil {
		return nil, err
	}
	rep.CPUSeconds = round3(u1.CPUSeconds - u0.CPUSeconds)
	// (A later read of VmHWM can be lower than an earlier one: the
	// kernel updates the high-water mark lazily.)
	rep.PeakRSS, rep.PeakRSSBefore = max(st1.MaxRSSBytes, st0.MaxRSSBytes), st0.MaxRSSBytes
	return rep, nil
}

// CPUSample is the harness's and the serving process's CPU seconds used
// since the storm's start, T seconds into it.
type CPUSample struct {
	T       float64 `json:"t_s"`
	Harness float64 `json:"harness_cpu_s"`
	Server  float64 `json:"server_cpu_s"`
}

// cpuSampleEvery is the period of the storm's CPU samples.
const cpuSampleEvery = 250 * time.Millisecond

// sampleCPU samples both processes' CPU into *out every cpuSampleEvery
// until the function it returns is called (which takes a last sample).
// With -inprocess both are the one process's.
func sampleCPU(tg target, start time.Time, out *[]CPUSample) (stop func()) {
	h0 := cpuSeconds()
	st0, _ := tg.Usage()
	sample := func() {
		st, err := tg.Usage()
		if err != nil {
			return
		}
		*out = append(*out, CPUSample{T: round3(time.Since(start).Seconds()),
			Harness: round3(cpuSeconds() - h0), Server: round3(st.CPUSeconds - st0.CPUSeconds)})
	}
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(cpuSampleEvery)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				sample()
			case <-done:
				sample()
				return
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(done)
			<-finished
		})
	}
}

// cpuAt is the CPU of both processes at the first sample at or after t
// seconds (zeros if none).
func cpuAt(samples []CPUSample, t float64) (harness, server float64) {
	for _, s := range samples {
		if s.T >= t {
			return s.Harness, s.Server
		}
	}
	return 0, 0
}
