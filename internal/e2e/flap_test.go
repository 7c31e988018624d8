package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xdsbridge/xdsbridge/healthcheck"
	"github.com/xdsbridge/xdsbridge/sources"
)

// scriptedBackend answers / with its name, always 200 (traffic is never
// affected by the health script), and /healthz by a script: each request
// to /healthz takes the next step ('F': 503, 'P': 200); with the script
// used up, 200. The probes themselves advance the script, so what the
// checker sees does not depend on timing.
type scriptedBackend struct {
	name string
	port uint32

	mu     sync.Mutex
	script string
	next   int   // steps of script taken
	probes int64 // /healthz requests in all
}

func startScriptedBackend(t *testing.T, name string) *scriptedBackend {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &scriptedBackend{name: name, port: uint32(lis.Addr().(*net.TCPAddr).Port)}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			b.mu.Lock()
			b.probes++
			ok := true
			if b.next < len(b.script) {
				ok = b.script[b.next] == 'P'
				b.next++
			}
			b.mu.Unlock()
			if !ok {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
		}
		io.WriteString(w, b.name)
	}), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(lis)
	t.Cleanup(func() { srv.Close() })
	return b
}

// play starts a new script.
func (b *scriptedBackend) play(script string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.script, b.next = script, 0
}

// done reports whether the script is used up.
func (b *scriptedBackend) done() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.next == len(b.script)
}

func (b *scriptedBackend) host() string { return fmt.Sprintf("127.0.0.1:%d", b.port) }

// firstErrors returns the first failures recorded.
func (tr *traffic) firstErrors() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]string(nil), tr.errs...)
}

const edsType = `type="type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"`

// TestEnvoyFlappingBackend: a backend whose health check flaps below and
// at the thresholds (unhealthy 3, healthy 2), through a real Envoy (delta
// and state-of-the-world ADS) under steady traffic.
//
// Phase A: fail, fail, pass, over and over: one failure short of the
// unhealthy threshold each time. The verdict never changes, so the bridge
// pushes nothing and Envoy's view of the host does not move.
//
// Phase B: fail×3, pass×2, k times: exactly at the thresholds, 2k verdict
// transitions. The bridge pushes at most one EDS update per transition
// (fewer if the debounce folds a change and its undoing together), each
// one a change Envoy applies; nothing else is pushed.
//
// No request fails in either phase: the other backend stays healthy, and
// the flapping one's traffic path answers 200 throughout.
func TestEnvoyFlappingBackend(t *testing.T) {
	for _, bootstrap := range []string{"envoy-delta.yaml", "envoy-sotw.yaml"} {
		t.Run(strings.TrimSuffix(strings.TrimPrefix(bootstrap, "envoy-"), ".yaml"), func(t *testing.T) {
			testFlappingBackend(t, bootstrap)
		})
	}
}

func testFlappingBackend(t *testing.T, bootstrap string) {
	const (
		U, H    = 3, 2
		repsA   = 25 // × (U−1 failures, 1 success) = 75 probes
		k       = 8  // × (U failures, H successes) = 40 probes
		checkTo = 2 * time.Second
	)
	b1 := startScriptedBackend(t, "b1") // /healthz always 200
	b2 := startScriptedBackend(t, "b2") // the flapping one
	svc := fmt.Sprintf("services:\n  web:\n    endpoints:\n      - {address: 127.0.0.1, port: %d}\n      - {address: 127.0.0.1, port: %d}\n", b1.port, b2.port)
	br := startBridge(t, svc, fmt.Sprintf(`
health_checks:
  services:
    web: {type: http, interval: 50ms, timeout: %s, jitter: 0s, unhealthy_threshold: %d, healthy_threshold: %d, http: {path: /healthz}}
`, checkTo, U, H))
	ev := startEnvoy(t, bootstrap, br.app.XDSAddr())
	ev.waitTraffic(t, "b1", "b2")

	// The checker's live state of a host (/debug/hosts shows the state as
	// of the last merge).
	checkState := func(b *scriptedBackend) healthcheck.State {
		st, ok := br.app.Checks.Detail("web", sources.HostKey{Address: "127.0.0.1", Port: b.port}).(healthcheck.State)
		if !ok {
			t.Fatalf("%s is not a health check target", b.name)
		}
		return st
	}
	waitFor(t, 10*time.Second, "both hosts checked healthy", func() error {
		for _, b := range []*scriptedBackend{b1, b2} {
			if h, _ := hostRule(t, br, "web", b.host()); h.Rule != healthcheck.RuleDiscoveredOK {
				return fmt.Errorf("%s: %+v", b.name, h)
			}
		}
		return nil
	})

	// What is counted, bridge side and Envoy side.
	type counts struct {
		eds, pushes, transitions float64
		// Envoy: EDS responses applied to web (one per response carrying
		// web's ClusterLoadAssignment), of which those that changed
		// nothing, and changes of web's host set.
		updates, noRebuild, membership int64
	}
	read := func() counts {
		st := ev.Stats(t, `^cluster\.web\.(update_success|update_no_rebuild|membership_change)$`)
		return counts{
			eds:         metricSumWith(t, br, "xdsbridge_xds_pushes_total", edsType),
			pushes:      metricSumWith(t, br, "xdsbridge_xds_pushes_total"),
			transitions: metricSumWith(t, br, "xdsbridge_healthcheck_transitions_total"),
			updates:     st["cluster.web.update_success"],
			noRebuild:   st["cluster.web.update_no_rebuild"],
			membership:  st["cluster.web.membership_change"],
		}
	}
	// settle waits until nothing moves for 500 ms (10 debounce maxima).
	settle := func(what string) counts {
		t.Helper()
		var last counts
		stable := 0
		waitFor(t, 15*time.Second, what, func() error {
			c := read()
			if c == last {
				stable++
			} else {
				stable, last = 0, c
			}
			if stable < 10 {
				return fmt.Errorf("still moving: %+v", c)
			}
			return nil
		})
		return last
	}
	healthyInEnvoy := func() int64 {
		return ev.Stats(t, `^cluster\.web\.membership_healthy$`)["cluster.web.membership_healthy"]
	}
	// run plays a script on b2 and waits until it is used up and the
	// checker has recorded its last probe, sampling Envoy's count of
	// healthy hosts of web meanwhile.
	run := func(script string) (samples map[int64]int, dips int) {
		t.Helper()
		samples = map[int64]int{}
		before := checkState(b2).Probes
		b2.play(script)
		prev := int64(2)
		waitFor(t, 20*time.Second, "the script to be played", func() error {
			for i := 0; i < 5; i++ {
				n := healthyInEnvoy()
				samples[n]++
				if n < 2 && prev == 2 {
					dips++
				}
				prev = n
				time.Sleep(10 * time.Millisecond)
			}
			if !b2.done() {
				return fmt.Errorf("script not used up")
			}
			if p := checkState(b2).Probes; p < before+uint64(len(script)) {
				return fmt.Errorf("%d probes of %d recorded", p-before, len(script))
			}
			return nil
		})
		return samples, dips
	}

	start := settle("the bridge and Envoy to settle after start")
	st0 := checkState(b2)
	tr := startTraffic(ev, 25*time.Millisecond) // 40 requests a second
	defer tr.stop()

	// Phase A: below the unhealthy threshold.
	scriptA := strings.Repeat(strings.Repeat("F", U-1)+"P", repsA)
	t0 := time.Now()
	samplesA, dipsA := run(scriptA)
	durA := time.Since(t0)
	afterA := settle("phase A to settle")
	stA := checkState(b2)
	sentA, failedA, reachedA := tr.snapshot()
	t.Logf("phase A: %d probes of b2 (%d failed) in %v; b2 verdict %s, %d transitions; %d requests, %d failed, reached %v",
		stA.Probes-st0.Probes, repsA*(U-1), durA.Round(time.Millisecond), stA.Verdict, stA.Transitions-st0.Transitions, sentA, failedA, reachedA)
	t.Logf("phase A: counts before %+v, after %+v; Envoy healthy hosts sampled %v", start, afterA, samplesA)
	if afterA != start {
		t.Errorf("phase A (no verdict change) moved the counts: before %+v, after %+v", start, afterA)
	}
	if stA.Verdict != healthcheck.Healthy || stA.Transitions != st0.Transitions {
		t.Errorf("phase A: b2 verdict %s, transitions %d → %d", stA.Verdict, st0.Transitions, stA.Transitions)
	}
	if dipsA != 0 || len(samplesA) != 1 || samplesA[2] == 0 {
		t.Errorf("phase A: Envoy's healthy hosts of web sampled %v", samplesA)
	}
	if failedA != 0 {
		t.Errorf("phase A: %d of %d requests failed: %v", failedA, sentA, tr.firstErrors())
	}
	if reachedA["b1"] == 0 || reachedA["b2"] == 0 {
		t.Errorf("phase A: traffic reached %v; want b1 and b2", reachedA)
	}

	// Phase B: exactly at the thresholds.
	scriptB := strings.Repeat(strings.Repeat("F", U)+strings.Repeat("P", H), k)
	t0 = time.Now()
	samplesB, dipsB := run(scriptB)
	durB := time.Since(t0)
	afterB := settle("phase B to settle")
	stB := checkState(b2)
	sentB, failedB, reachedB := tr.snapshot()
	tr.stop()
	transitions := afterB.transitions - afterA.transitions
	eds := afterB.eds - afterA.eds
	t.Logf("phase B: %d probes of b2 in %v; %v verdict transitions; %v EDS pushes (%v pushes in all); Envoy applied %d EDS updates (%d without a change), membership changes %d; Envoy's healthy hosts dipped %d times (sampled %v); %d requests in all, %d failed, reached %v since phase A",
		stB.Probes-stA.Probes, durB.Round(time.Millisecond), transitions, eds, afterB.pushes-afterA.pushes,
		afterB.updates-afterA.updates, afterB.noRebuild-afterA.noRebuild, afterB.membership-afterA.membership,
		dipsB, samplesB, sentB, failedB, reachedB)
	if transitions != 2*k || stB.Transitions-stA.Transitions != 2*k {
		t.Errorf("phase B: %v verdict transitions (metric), %d (state); want exactly %d", transitions, stB.Transitions-stA.Transitions, 2*k)
	}
	if stB.Verdict != healthcheck.Healthy {
		t.Errorf("phase B ended with b2 %s", stB.Verdict)
	}
	// Published state changes no faster than the verdicts: at most one
	// EDS push per transition, and nothing but EDS.
	if eds > transitions || eds < 1 {
		t.Errorf("phase B: %v EDS pushes for %v transitions; want 1..%v", eds, transitions, transitions)
	}
	if all := afterB.pushes - afterA.pushes; all != eds {
		t.Errorf("phase B: %v pushes in all, %v of them EDS:\n%s", all, eds, metricLines(t, br, "xdsbridge_xds_pushes_total"))
	}
	// Each push reached Envoy and changed something there (a push
	// without a change would count update_no_rebuild); no host came or
	// went.
	if d := afterB.updates - afterA.updates; float64(d) != eds {
		t.Errorf("phase B: Envoy applied %d EDS updates of web; the bridge pushed %v", d, eds)
	}
	if d := afterB.noRebuild - afterA.noRebuild; d != 0 {
		t.Errorf("phase B: %d EDS updates changed nothing in Envoy", d)
	}
	if d := afterB.membership - afterA.membership; d != 0 {
		t.Errorf("phase B: web's membership changed %d times", d)
	}
	if n := healthyInEnvoy(); n != 2 {
		t.Errorf("after phase B Envoy has %d healthy hosts of web; want 2", n)
	}
	if failedB != 0 {
		t.Errorf("%d of %d requests failed: %v", failedB, sentB, tr.firstErrors())
	}
	ev.assertNoRejections(t)
}
