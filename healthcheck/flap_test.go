package healthcheck

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/xdsbridge/xdsbridge/sources"
)

// Health-check noise: a host flapping at or below the thresholds never
// changes its verdict faster than the hysteresis allows.

// pattern returns reps repetitions of runs, a sequence of (result, count)
// pairs: pattern(2, "F", 3, "P", 1) is FFFP FFFP.
func pattern(reps int, runs ...any) string {
	var one strings.Builder
	for i := 0; i+1 < len(runs); i += 2 {
		one.WriteString(strings.Repeat(runs[i].(string), runs[i+1].(int)))
	}
	return strings.Repeat(one.String(), reps)
}

// TestFlapScriptedProbes drives a real HTTP target whose /health answers
// follow a script, one step per request (so the script does not depend on
// timing), and counts the verdict transitions exactly: in State, in the
// transitions_total metric and on the Transitions channel.
func TestFlapScriptedProbes(t *testing.T) {
	const U, H = 3, 2 // the default thresholds
	for _, tc := range []struct {
		name    string
		u, h    uint32
		initial string
		script  string // F: 503, P: 200
		tail    byte   // every request after the script
		// Exact probe-caused transitions, by new verdict.
		toHealthy, toUnhealthy int
		final                  Verdict
	}{
		// (a) One failure short of the threshold, then a success: never
		// leaves Healthy.
		{name: "below-unhealthy-threshold", initial: InitialHealthy,
			script: pattern(30, "F", U-1, "P", 1), tail: 'P', final: Healthy},
		// The same from Unknown: Healthy at the first success, then nothing.
		{name: "below-unhealthy-threshold-from-unknown", initial: InitialUnknown,
			script: pattern(30, "F", U-1, "P", 1), tail: 'P', toHealthy: 1, final: Healthy},
		// (b) Alternating: never changes.
		{name: "alternating", initial: InitialHealthy,
			script: pattern(45, "F", 1, "P", 1), tail: 'P', final: Healthy},
		// Unhealthy, then one success short of the healthy threshold
		// between failures: stays Unhealthy.
		{name: "below-healthy-threshold", initial: InitialHealthy,
			script: "FFF" + pattern(30, "P", H-1, "F", 1), tail: 'F', toUnhealthy: 1, final: Unhealthy},
		// (c) Exactly at the thresholds, k = 10 times: 2k transitions.
		{name: "at-thresholds", initial: InitialHealthy,
			script: pattern(10, "F", U, "P", H), tail: 'P', toHealthy: 10, toUnhealthy: 10, final: Healthy},
		// At thresholds of 1: every change of result is a transition.
		{name: "at-thresholds-1-1", u: 1, h: 1, initial: InitialHealthy,
			script: pattern(20, "F", 1, "P", 1), tail: 'P', toHealthy: 20, toUnhealthy: 20, final: Healthy},
		// Larger thresholds, each way one short then exactly at: k = 5.
		{name: "at-thresholds-5-4", u: 5, h: 4, initial: InitialHealthy,
			script: pattern(5, "F", 4, "P", 1, "F", 5, "P", 3, "F", 1, "P", 4), tail: 'P', toHealthy: 5, toUnhealthy: 5, final: Healthy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, h := tc.u, tc.h
			if u == 0 {
				u, h = U, H
			}
			script := tc.script
			decide := func(n int64) bool {
				if n <= int64(len(script)) {
					return script[n-1] == 'P'
				}
				return tc.tail == 'P'
			}
			b := newHTTPBackend(t)
			b.decide.Store(&decide)
			tg := Target{Host: b.host, Check: httpCheck(10, initial(tc.initial), func(c *Config) {
				c.UnhealthyThreshold, c.HealthyThreshold = u, h
				c.Timeout = ms(5000) // a timeout would be a failure the script did not say
			})}
			k := tg.Key()
			hs := startChecker(t, Options{}, tg)
			hs.waitProbes(k, uint64(len(script)+2))
			hs.stop()

			s := hs.state(k)
			// The probes followed the script: as many failures as it says
			// for the probes made (a timeout or connection error would
			// add one).
			wantFails := 0
			for n := int64(1); n <= int64(s.Probes); n++ {
				if !decide(n) {
					wantFails++
				}
			}
			fails := testutil.ToFloat64(hs.c.m.probeCounts[TypeHTTP][1])
			oks := testutil.ToFloat64(hs.c.m.probeCounts[TypeHTTP][0])
			if int(fails) != wantFails || uint64(fails+oks) != s.Probes {
				t.Fatalf("%d probes, %v failed, %v ok; the script says %d failures", s.Probes, fails, oks, wantFails)
			}

			want := tc.toHealthy + tc.toUnhealthy
			if s.Transitions != uint64(want) || s.Verdict != tc.final {
				t.Errorf("state: %d transitions, verdict %s; want %d, %s", s.Transitions, s.Verdict, want, tc.final)
			}
			gotH := testutil.ToFloat64(hs.c.m.transitions.WithLabelValues("healthy"))
			gotU := testutil.ToFloat64(hs.c.m.transitions.WithLabelValues("unhealthy"))
			if int(gotH) != tc.toHealthy || int(gotU) != tc.toUnhealthy {
				t.Errorf("transitions_total: healthy %v, unhealthy %v; want %d, %d", gotH, gotU, tc.toHealthy, tc.toUnhealthy)
			}
			// The hysteresis bound: a change needs a run of min(U, H)
			// probes since the previous one (+1: the first verdict).
			if bound := s.Probes/uint64(min(u, h)) + 1; s.Transitions > bound {
				t.Errorf("%d transitions in %d probes, more than %d", s.Transitions, s.Probes, bound)
			}

			// The consumer: each delivery a real change, alternating; at
			// most one per transition (a slow consumer may get fewer:
			// changes undone before it reads are coalesced away); the
			// last one is the final verdict. With initial_state healthy
			// the first delivery is the initial verdict, not a probe's.
			trs := hs.transitions(k)
			initialDelivery := 0
			if tc.initial != InitialUnknown {
				initialDelivery = 1
			}
			if len(trs) > want+initialDelivery || len(trs) == 0 && tc.final != Unknown {
				t.Fatalf("%d deliveries for %d transitions: %v", len(trs), want, trs)
			}
			prev := Unknown
			for i, tr := range trs {
				if tr.Previous != prev || tr.Verdict == tr.Previous {
					t.Fatalf("delivery %d: %v after %s", i, tr, prev)
				}
				prev = tr.Verdict
			}
			if prev != tc.final {
				t.Errorf("last delivered verdict %s, want %s", prev, tc.final)
			}
			t.Logf("%d probes (%d scripted, %d failed): %d transitions (%d to healthy, %d to unhealthy), %d delivered",
				s.Probes, len(script), wantFails, s.Transitions, int(gotH), int(gotU), len(trs))
		})
	}
}

// TestFlapHysteresisProperty feeds random probe results to the verdict
// logic (record) under random thresholds and initial states and checks,
// probe by probe, what README's table promises:
//   - every change to Unhealthy ends a run of unhealthy_threshold failures;
//   - every change to Healthy ends a run of healthy_threshold successes,
//     except by the startup rule: from Unknown, or on the very first probe
//     with initial_state unhealthy, one success;
//   - hence, after a change to Unhealthy the next change is at least
//     healthy_threshold probes later, after a change to Healthy at least
//     unhealthy_threshold: transitions ≤ probes/min(U, H) + 1.
func TestFlapHysteresisProperty(t *testing.T) {
	c := NewChecker(Options{Seed: 1})
	rng := rand.New(rand.NewPCG(7, 11))
	host := sources.HostKey{Address: "127.0.0.1", Port: 1}
	initials := []string{InitialUnknown, InitialHealthy, InitialUnhealthy}
	errFail := errors.New("status 503")
	const runs, probes = 3000, 200
	total := 0
	for run := 0; run < runs; run++ {
		u, h := uint32(1+rng.IntN(5)), uint32(1+rng.IntN(5))
		init := initials[rng.IntN(3)]
		pFail := rng.Float64()
		// Half the runs flap in bursts of up to max(U, H)+1 equal
		// results: runs near and at the thresholds.
		burst := rng.IntN(2) == 0
		cfg := tcpCheck(1000, initial(init), func(c *Config) { c.UnhealthyThreshold, c.HealthyThreshold = u, h }).Normalize()
		tg := &target{key: Target{Host: host, Check: cfg}.Key(), cfg: cfg, idx: -1}
		switch init {
		case InitialHealthy:
			tg.st.Verdict = Healthy
		case InitialUnhealthy:
			tg.st.Verdict = Unhealthy
		}
		var results []bool // true: success
		lastChange, lastTo := -1, Unknown
		changes := 0
		for len(results) < probes {
			ok := rng.Float64() >= pFail
			n := 1
			if burst {
				n = 1 + rng.IntN(int(max(u, h))+1)
			}
			for j := 0; j < n && len(results) < probes; j++ {
				i := len(results)
				results = append(results, ok)
				before := tg.st.Verdict
				var err error
				if !ok {
					err = errFail
				}
				c.mu.Lock()
				c.record(tg, err, time.Time{}, 0)
				c.mu.Unlock()
				after := tg.st.Verdict
				desc := func() string {
					return fmt.Sprintf("run %d (U=%d H=%d initial %s): probe %d %s → %s; results %v", run, u, h, init, i, before, after, results)
				}
				if after == before {
					if after == Unknown && ok {
						t.Fatalf("a success left the verdict Unknown: %s", desc())
					}
					continue
				}
				switch after {
				case Unhealthy:
					if !tail(results, false, int(u)) {
						t.Fatalf("Unhealthy without %d failures in a row: %s", u, desc())
					}
				case Healthy:
					startup := before == Unknown || init == InitialUnhealthy && i == 0
					if !ok || !startup && !tail(results, true, int(h)) {
						t.Fatalf("Healthy without %d successes in a row: %s", h, desc())
					}
				default:
					t.Fatalf("back to Unknown: %s", desc())
				}
				if lastChange >= 0 {
					need := int(u) // after a change to Healthy
					if lastTo == Unhealthy {
						need = int(h)
					}
					if i-lastChange < need {
						t.Fatalf("changes at probes %d and %d, less than %d apart: %s", lastChange, i, need, desc())
					}
				}
				lastChange, lastTo = i, after
				changes++
			}
		}
		if bound := probes/int(min(u, h)) + 1; changes > bound {
			t.Fatalf("run %d: %d changes in %d probes > %d", run, changes, probes, bound)
		}
		total += changes
	}
	t.Logf("%d runs of %d probes: %d verdict changes, none faster than the thresholds", runs, probes, total)
}

// tail reports whether the last n results are all want.
func tail(results []bool, want bool, n int) bool {
	if len(results) < n {
		return false
	}
	for _, r := range results[len(results)-n:] {
		if r != want {
			return false
		}
	}
	return true
}
