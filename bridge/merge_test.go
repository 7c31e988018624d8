package bridge

import (
	"maps"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/xdsbridge/xdsbridge/healthcheck"
	"github.com/xdsbridge/xdsbridge/sources"
)

// TestMergeService drives the pure merge of one service through the
// discovery × health-check matrix, retention and its expiry, without the
// loop.
func TestMergeService(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	h1 := sources.HostKey{Address: "10.0.0.1", Port: 1}
	h2 := sources.HostKey{Address: "10.0.0.1", Port: 2}
	ep := func(k sources.HostKey, h sources.HealthStatus) sources.Endpoint {
		return sources.Endpoint{Address: k.Address, Port: k.Port, Health: h}
	}
	const (
		H  = sources.HealthHealthy
		U  = sources.HealthUnhealthy
		UK = sources.HealthUnknown
	)
	kept := func(k sources.HostKey, since time.Time, dropped healthcheck.Rule) map[sources.HostKey]retainedHost {
		return map[sources.HostKey]retainedHost{k: {endpoint: ep(k, H), absentSince: since, source: "a", dropped: dropped}}
	}
	type host struct {
		Published bool
		Health    sources.HealthStatus
		Rule      healthcheck.Rule
	}
	tests := []struct {
		name       string
		owner      string
		discovered []sources.Endpoint
		published  []sources.Endpoint // nil: not published
		kept       map[sources.HostKey]retainedHost
		verdicts   map[sources.HostKey]healthcheck.Verdict // nil: no checks
		maxRet     time.Duration

		wantKeep  bool
		wantEps   []sources.Endpoint
		wantHosts map[string]host
		wantKept  map[sources.HostKey]retainedHost
	}{
		// The four cells of the matrix.
		{
			name: "discovered, check OK: route", owner: "a",
			discovered: []sources.Endpoint{ep(h1, U)},
			verdicts:   map[sources.HostKey]healthcheck.Verdict{h1: healthcheck.Healthy},
			wantKeep:   true, wantEps: []sources.Endpoint{ep(h1, H)},
			wantHosts: map[string]host{h1.String(): {true, H, healthcheck.RuleDiscoveredOK}},
		},
		{
			name: "discovered, check failed: published unhealthy", owner: "a",
			discovered: []sources.Endpoint{ep(h1, H)},
			verdicts:   map[sources.HostKey]healthcheck.Verdict{h1: healthcheck.Unhealthy},
			wantKeep:   true, wantEps: []sources.Endpoint{ep(h1, U)},
			wantHosts: map[string]host{h1.String(): {true, U, healthcheck.RuleDiscoveredFailed}},
		},
		{
			name: "absent, check OK: retained from now", owner: "a",
			discovered: []sources.Endpoint{ep(h1, H)},
			published:  []sources.Endpoint{ep(h1, H), ep(h2, H)},
			verdicts:   map[sources.HostKey]healthcheck.Verdict{h1: healthcheck.Healthy, h2: healthcheck.Healthy},
			wantKeep:   true, wantEps: []sources.Endpoint{ep(h1, H), ep(h2, H)},
			wantHosts: map[string]host{h1.String(): {true, H, healthcheck.RuleDiscoveredOK}, h2.String(): {true, H, healthcheck.RuleRetained}},
			wantKept:  kept(h2, now, ""),
		},
		{
			name: "absent, check failed: deleted", owner: "a",
			discovered: []sources.Endpoint{ep(h1, H)},
			published:  []sources.Endpoint{ep(h1, H), ep(h2, H)},
			verdicts:   map[sources.HostKey]healthcheck.Verdict{h1: healthcheck.Healthy, h2: healthcheck.Unhealthy},
			wantKeep:   true, wantEps: []sources.Endpoint{ep(h1, H)},
			wantHosts: map[string]host{h1.String(): {true, H, healthcheck.RuleDiscoveredOK}, h2.String(): {false, UK, healthcheck.RuleAbsentFailed}},
			wantKept:  kept(h2, now, healthcheck.RuleAbsentFailed),
		},
		{
			name: "a retained host sorts among the discovered", owner: "a",
			discovered: []sources.Endpoint{ep(h2, H)},
			published:  []sources.Endpoint{ep(h1, H), ep(h2, H)},
			verdicts:   map[sources.HostKey]healthcheck.Verdict{h1: healthcheck.Healthy, h2: healthcheck.Healthy},
			wantKeep:   true, wantEps: []sources.Endpoint{ep(h1, H), ep(h2, H)},
			wantHosts: map[string]host{h1.String(): {true, H, healthcheck.RuleRetained}, h2.String(): {true, H, healthcheck.RuleDiscoveredOK}},
			wantKept:  kept(h1, now, ""),
		},
		// Retention and its bound.
		{
			name: "retained within max retention keeps its absence time", owner: "a",
			published: []sources.Endpoint{ep(h2, H)},
			kept:      kept(h2, now.Add(-59*time.Second), ""),
			verdicts:  map[sources.HostKey]healthcheck.Verdict{h2: healthcheck.Healthy},
			maxRet:    time.Minute,
			wantKeep:  true, wantEps: []sources.Endpoint{ep(h2, H)},
			wantHosts: map[string]host{h2.String(): {true, H, healthcheck.RuleRetained}},
			wantKept:  kept(h2, now.Add(-59*time.Second), ""),
		},
		{
			name: "retained for max retention: expired", owner: "a",
			published: []sources.Endpoint{ep(h2, H)},
			kept:      kept(h2, now.Add(-time.Minute), ""),
			verdicts:  map[sources.HostKey]healthcheck.Verdict{h2: healthcheck.Healthy},
			maxRet:    time.Minute,
			wantKeep:  true, wantEps: []sources.Endpoint{},
			wantHosts: map[string]host{h2.String(): {false, UK, healthcheck.RuleRetentionExpired}},
			wantKept:  kept(h2, now.Add(-time.Minute), healthcheck.RuleRetentionExpired),
		},
		{
			name: "no bound: retained however long", owner: "a",
			published: []sources.Endpoint{ep(h2, H)},
			kept:      kept(h2, now.Add(-1000*time.Hour), ""),
			verdicts:  map[sources.HostKey]healthcheck.Verdict{h2: healthcheck.Healthy},
			wantKeep:  true, wantEps: []sources.Endpoint{ep(h2, H)},
			wantHosts: map[string]host{h2.String(): {true, H, healthcheck.RuleRetained}},
			wantKept:  kept(h2, now.Add(-1000*time.Hour), ""),
		},
		{
			name: "dropped stays dropped while still published", owner: "a",
			published: []sources.Endpoint{ep(h2, H)},
			kept:      kept(h2, now.Add(-time.Minute), healthcheck.RuleAbsentFailed),
			verdicts:  map[sources.HostKey]healthcheck.Verdict{h2: healthcheck.Healthy},
			wantKeep:  true, wantEps: []sources.Endpoint{},
			wantHosts: map[string]host{h2.String(): {false, UK, healthcheck.RuleAbsentFailed}},
			wantKept:  kept(h2, now.Add(-time.Minute), healthcheck.RuleAbsentFailed),
		},
		{
			name: "rediscovered: no longer retained", owner: "a",
			discovered: []sources.Endpoint{ep(h2, H)},
			published:  []sources.Endpoint{ep(h2, H)},
			kept:       kept(h2, now.Add(-time.Minute), ""),
			verdicts:   map[sources.HostKey]healthcheck.Verdict{h2: healthcheck.Healthy},
			maxRet:     time.Minute,
			wantKeep:   true, wantEps: []sources.Endpoint{ep(h2, H)},
			wantHosts: map[string]host{h2.String(): {true, H, healthcheck.RuleDiscoveredOK}},
		},
		// No checks: discovery alone decides.
		{
			name: "no checks: source health stands, absent removed", owner: "a",
			discovered: []sources.Endpoint{ep(h1, U)}, // normal form: each host once (sources.Normalize)
			published:  []sources.Endpoint{ep(h1, U), ep(h2, H)},
			wantKeep:   true, wantEps: []sources.Endpoint{ep(h1, U)},
			wantHosts: map[string]host{h1.String(): {true, U, healthcheck.RuleDiscoveryOnly}, h2.String(): {false, UK, healthcheck.RuleAbsentUnchecked}},
			wantKept:  kept(h2, now, healthcheck.RuleAbsentUnchecked),
		},
		{
			name: "no owner: removed", owner: "",
			published: []sources.Endpoint{ep(h1, H)},
			verdicts:  map[sources.HostKey]healthcheck.Verdict{h1: healthcheck.Healthy},
			wantKeep:  false,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := mergeInput{Name: "x", Owner: tt.owner, Discovered: sources.Service{Name: "x", Endpoints: tt.discovered}, Kept: tt.kept, MaxRetention: tt.maxRet, Now: now}
			if tt.published != nil {
				in.Published = &sources.Service{Name: "x", Endpoints: tt.published}
			}
			if tt.verdicts != nil {
				in.Verdict = func(k sources.HostKey) healthcheck.Verdict {
					if v, ok := tt.verdicts[k]; ok {
						return v
					}
					return healthcheck.Unknown
				}
			}
			keptBefore := maps.Clone(tt.kept)
			allow := cmp.AllowUnexported(retainedHost{})
			r := mergeService(in)
			if r.Keep != tt.wantKeep {
				t.Fatalf("keep = %v, want %v", r.Keep, tt.wantKeep)
			}
			if !cmp.Equal(tt.kept, keptBefore, allow) {
				t.Fatalf("the input's kept hosts were modified: %+v, were %+v", tt.kept, keptBefore)
			}
			if !r.Keep {
				if r.Hosts != nil || len(r.Service.Endpoints) != 0 {
					t.Fatalf("removed service merged as %+v, hosts %+v", r.Service, r.Hosts)
				}
				return
			}
			if d := cmp.Diff(tt.wantEps, r.Service.Endpoints); d != "" || r.Service.Name != "x" {
				t.Fatalf("service %q endpoints (-want +got):\n%s", r.Service.Name, d)
			}
			got := map[string]host{}
			for i, h := range r.Hosts {
				if i > 0 && r.Hosts[i-1].Host >= h.Host {
					t.Fatalf("hosts not sorted: %+v", r.Hosts)
				}
				got[h.Host] = host{h.Published, h.Health, h.Rule}
			}
			if d := cmp.Diff(tt.wantHosts, got); d != "" {
				t.Fatalf("hosts (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tt.wantKept, r.Kept, allow); d != "" {
				t.Fatalf("kept (-want +got):\n%s", d)
			}
		})
	}
}

// TestDebounceDefaults: the loop's defaults are DebounceDefaults, the
// rule the app applies to the config too, not a rule of its own.
func TestDebounceDefaults(t *testing.T) {
	for _, tt := range []struct{ quiet, maxHold, wantQuiet, wantMax time.Duration }{
		{0, 0, DefaultDebounceQuiet, DefaultDebounceMax},
		{10 * time.Millisecond, 0, 10 * time.Millisecond, DefaultDebounceMax},
		{time.Second, 0, time.Second, time.Second},
		{20 * time.Millisecond, 70 * time.Millisecond, 20 * time.Millisecond, 70 * time.Millisecond},
		{20 * time.Millisecond, 5 * time.Millisecond, 20 * time.Millisecond, 20 * time.Millisecond},
	} {
		l := New(Options{Quiet: tt.quiet, MaxHold: tt.maxHold}, newRecorder())
		cq, cm := DebounceDefaults(tt.quiet, tt.maxHold)
		if l.opts.Quiet != tt.wantQuiet || l.opts.MaxHold != tt.wantMax || tt.maxHold >= tt.quiet && (cq != l.opts.Quiet || cm != l.opts.MaxHold) {
			t.Errorf("quiet %s, max %s: the loop uses %s, %s; want %s, %s (config: %s, %s)", tt.quiet, tt.maxHold, l.opts.Quiet, l.opts.MaxHold, tt.wantQuiet, tt.wantMax, cq, cm)
		}
	}
}
