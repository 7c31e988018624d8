package app

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xdsbridge/xdsbridge/bridge"
	"github.com/xdsbridge/xdsbridge/config"
	promreg "github.com/xdsbridge/xdsbridge/internal/metrics"
	"github.com/xdsbridge/xdsbridge/sources"
	"github.com/xdsbridge/xdsbridge/translate"
)

// A reload reads the config again (LoadConfig) and checks it as validate
// does. Refused, the running config stays, and the error is logged,
// counted and shown (ReloadStatus). Applied:
//
//   - sources whose type block is unchanged keep running (their state and
//     connections); a changed one is replaced: the new instance runs next
//     to the old one, whose state stays served until the new one's first
//     complete publish (none of its parts failing) replaces it (sources.go); a removed source's services are
//     withdrawn (another source's claim, if any, takes the name); an added
//     one is started;
//   - priorities, health checks, limits, default localities and the
//     debounce apply to every service, rebuilt: what comes out identical is
//     not pushed again.
//
// The other settings (the listeners, their TLS and limits, authorization,
// the admin token file, outputs, logging, the memory limit, the checker's
// workers) are read at start only: a reload that changes one is refused,
// naming it, as needing a restart.

// reloadable are the top-level config fields a reload applies.
var reloadable = map[string]bool{"sources": true, "health_checks": true, "limits": true, "default_locality": true, "debounce": true}

// ReloadResult says what a reload applied, by source name.
type ReloadResult struct {
	Result    string   `json:"result"`
	Added     []string `json:"added,omitempty"`
	Removed   []string `json:"removed,omitempty"`
	Replaced  []string `json:"replaced,omitempty"`
	Unchanged []string `json:"unchanged,omitempty"`
}

// ReloadStatus is the state of the config served and of the last reload.
type ReloadStatus struct {
	// LoadedAt is when the config served was loaded: at start, or by the
	// last successful reload.
	LoadedAt time.Time `json:"loaded_at"`
	// LastReload is when a reload was last tried, LastReloadOK whether it
	// was applied, and LastError why not.
	LastReload   time.Time `json:"last_reload,omitzero"`
	LastReloadOK bool      `json:"last_reload_ok"`
	LastError    string    `json:"last_error,omitempty"`
	Successes    uint64    `json:"reloads_applied"`
	Failures     uint64    `json:"reloads_refused"`
}

type reloadState struct {
	mu sync.Mutex
	st ReloadStatus
	// Metrics: reloads by result, whether the last one was applied, and
	// when the config served was loaded.
	total     *prometheus.CounterVec
	lastOK    prometheus.Gauge
	lastOKSec prometheus.Gauge
}

func (r *reloadState) init(reg prometheus.Registerer, now time.Time) error {
	r.st = ReloadStatus{LoadedAt: now, LastReloadOK: true}
	r.total = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "xdsbridge_config_reloads_total", Help: "Config reloads (SIGHUP, POST /debug/reload) by result: success (applied) or failure (refused; the running config stays).",
	}, []string{"result"})
	r.total.WithLabelValues("success")
	r.total.WithLabelValues("failure")
	r.lastOK = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "xdsbridge_config_last_reload_successful", Help: "1 when the last config reload was applied (or none was tried), 0 when it was refused.",
	})
	r.lastOK.Set(1)
	r.lastOKSec = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "xdsbridge_config_last_reload_success_timestamp_seconds", Help: "When the config served was loaded (start, or the last applied reload), in Unix seconds.",
	})
	r.lastOKSec.Set(float64(now.UnixNano()) / 1e9)
	return promreg.Register(reg, r.total, r.lastOK, r.lastOKSec)
}

func (r *reloadState) record(err error, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.st.LastReload = at
	r.st.LastReloadOK = err == nil
	if err != nil {
		r.st.LastError = err.Error()
		r.st.Failures++
		r.total.WithLabelValues("failure").Inc()
		r.lastOK.Set(0)
		return
	}
	r.st.LastError = ""
	r.st.LoadedAt = at
	r.st.Successes++
	r.total.WithLabelValues("success").Inc()
	r.lastOK.Set(1)
	r.lastOKSec.Set(float64(at.UnixNano()) / 1e9)
}

// ReloadStatus is the state of the config served and of the last reload.
// Safe for concurrent use.
func (a *App) ReloadStatus() ReloadStatus {
	a.reloads.mu.Lock()
	defer a.reloads.mu.Unlock()
	return a.reloads.st
}

// Reload reads the config again and applies it, or refuses it and keeps
// the running one (see above). Reloads run one at a time; one begun runs
// to its end unless the app stops.
func (a *App) Reload() (ReloadResult, error) {
	a.reloadMu.Lock()
	defer a.reloadMu.Unlock()
	res, err := a.reload()
	a.reloads.record(err, time.Now())
	if err != nil {
		a.Log.Error("config reload refused; the running config stays", "error", err)
		return ReloadResult{Result: "failure"}, err
	}
	res.Result = "success"
	a.Log.Info("config reloaded", "added", res.Added, "removed", res.Removed, "replaced", res.Replaced, "unchanged", len(res.Unchanged))
	return res, nil
}

func (a *App) reload() (ReloadResult, error) {
	var res ReloadResult
	if a.LoadConfig == nil {
		return res, errors.New("no config file to reload (the bridge was started without -config)")
	}
	rs := &a.running
	rs.mu.Lock()
	running := rs.byName != nil && !rs.stopped
	rs.mu.Unlock()
	if !running {
		return res, errors.New("the bridge is not running")
	}
	cfg, err := a.LoadConfig()
	if err != nil {
		return res, err
	}
	// Compared with the running config once both have their defaults.
	if err := ResolveOptions(cfg); err != nil {
		return res, err
	}
	if err := needsRestart(a.applied, cfg); err != nil {
		return res, err
	}
	// Checked as validate and the start check it (every source's block
	// and files, the health checks, the TLS and token files); its
	// warnings are logged as at start.
	warnings, err := Check(cfg, a.Log)
	if err != nil {
		return res, err
	}
	for _, w := range warnings {
		a.Log.Warn("config: " + w)
	}
	perSource, perService, err := healthChecksFromConfig(cfg)
	if err != nil {
		return res, err
	}
	if a.Checks == nil && len(perSource)+len(perService) > 0 {
		return res, errors.New("health_checks: no health check was configured at start; turning them on needs a restart")
	}

	// Build the changed and added sources; keep the others.
	old := map[string]config.Source{}
	for _, s := range a.applied.Sources {
		old[s.Name] = s
	}
	active := map[string]sources.Source{}
	for _, s := range a.activeSources() {
		active[s.Name()] = s
	}
	next := make([]sources.Source, len(cfg.Sources))
	built := map[string]*sourceInstance{}
	for i, sc := range cfg.Sources {
		if o, ok := old[sc.Name]; ok && sameSource(o, sc) && active[sc.Name] != nil {
			next[i] = active[sc.Name]
			res.Unchanged = append(res.Unchanged, sc.Name)
			continue
		}
		m := &sourceMetrics{reg: a.Registry, deferred: true}
		src, err := buildSource(cfg, i, a.Log, m)
		if err != nil {
			return res, err
		}
		next[i] = src
		built[sc.Name] = &sourceInstance{src: src, metrics: m}
		if _, ok := old[sc.Name]; ok {
			res.Replaced = append(res.Replaced, sc.Name)
		} else {
			res.Added = append(res.Added, sc.Name)
		}
	}
	for name := range old {
		if !slices.ContainsFunc(cfg.Sources, func(s config.Source) bool { return s.Name == name }) {
			res.Removed = append(res.Removed, name)
		}
	}
	sort.Strings(res.Removed)

	// Apply: stop the removed sources, then tell the loop (it withdraws
	// their services and ranks the claims again), then start the new
	// instances. Once begun, this runs to its end (an admin request whose
	// client went away does not stop it): only the app stopping does.
	rs.mu.Lock()
	ctx := rs.ctx
	rs.mu.Unlock()
	if a.Checks != nil {
		a.Checks.SetConfig(perSource, perService)
	}
	for _, name := range res.Removed {
		for _, inst := range a.takeInstances(name) {
			a.retire(inst, nil)
		}
	}
	rc := loopReconfig(cfg, next)
	rc.Removed = res.Removed
	rc.ChecksChanged = a.Checks != nil
	if err := a.Loop.Reconfigure(ctx, rc); err != nil {
		return res, err
	}
	rs.mu.Lock()
	rs.order = rs.order[:0]
	for _, sc := range cfg.Sources {
		rs.order = append(rs.order, sc.Name)
	}
	rs.mu.Unlock()
	for _, name := range res.Added {
		inst := built[name]
		inst.gate = &sourceGate{active: inst}
		if err := inst.metrics.registerDeferred(); err != nil {
			a.Log.Warn("metrics of an added source", "source", name, "error", err)
		}
		rs.mu.Lock()
		rs.byName[name] = inst.gate
		rs.mu.Unlock()
		a.start(inst)
	}
	for _, name := range res.Replaced {
		inst := built[name]
		rs.mu.Lock()
		inst.gate = rs.byName[name]
		rs.mu.Unlock()
		inst.gate.mu.Lock()
		prev := inst.gate.pending
		inst.state = instPending
		inst.gate.pending = inst
		if prev != nil {
			prev.state = instRetired
		}
		inst.gate.mu.Unlock()
		if prev != nil {
			a.retire(prev, nil) // the replacement of an earlier reload, not synced
		}
		a.start(inst)
	}
	a.applied = cfg
	return res, nil
}

// takeInstances removes a source's gate and returns its instances, active
// and pending, marked retired.
func (a *App) takeInstances(name string) []*sourceInstance {
	rs := &a.running
	rs.mu.Lock()
	g := rs.byName[name]
	delete(rs.byName, name)
	rs.mu.Unlock()
	if g == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []*sourceInstance
	for _, inst := range []*sourceInstance{g.active, g.pending} {
		if inst != nil {
			inst.state = instRetired
			out = append(out, inst)
		}
	}
	return out
}

// loopReconfig is the loop's part of a config (bridge.Reconfig).
func loopReconfig(c *config.Config, srcs []sources.Source) bridge.Reconfig {
	names := make([]string, len(srcs))
	for i, s := range srcs {
		names[i] = s.Name()
	}
	return bridge.Reconfig{
		Sources:           names,
		Priority:          c.Priorities(),
		ServicesAndPolicy: ServicesAndPolicy(srcs),
		Quiet:             c.Debounce.Quiet.D(),
		MaxHold:           c.Debounce.Max.D(),
		MaxRetention:      c.HealthChecks.MaxRetention.D(),
		DefaultLocality:   DefaultLocalities(c),
		Limits:            translate.Limits(c.Limits),
	}
}

// sameSource reports whether a source entry's instance can keep running
// under a new entry: the same type and the same type block.
func sameSource(a, b config.Source) bool {
	return a.Type == b.Type && jsonEqual(a.Raw, b.Raw)
}

func jsonEqual(a, b []byte) bool {
	var ca, cb bytes.Buffer
	if json.Compact(&ca, a) != nil || json.Compact(&cb, b) != nil {
		return bytes.Equal(a, b)
	}
	return bytes.Equal(ca.Bytes(), cb.Bytes())
}

// needsRestart returns an error naming the settings that differ between
// the running config and next and that a reload cannot apply.
func needsRestart(running, next *config.Config) error {
	fields := func(c *config.Config) (map[string]json.RawMessage, error) {
		b, err := json.Marshal(c)
		if err != nil {
			return nil, err
		}
		var m map[string]json.RawMessage
		return m, json.Unmarshal(b, &m)
	}
	o, err := fields(running)
	if err != nil {
		return err
	}
	n, err := fields(next)
	if err != nil {
		return err
	}
	var diff []string
	for _, k := range sortedKeys(o, n) {
		if reloadable[k] || jsonEqual(o[k], n[k]) {
			continue
		}
		var os, ns map[string]json.RawMessage
		if json.Unmarshal(o[k], &os) != nil || json.Unmarshal(n[k], &ns) != nil {
			diff = append(diff, k)
			continue
		}
		for _, sub := range sortedKeys(os, ns) {
			if !jsonEqual(os[sub], ns[sub]) {
				diff = append(diff, k+"."+sub)
			}
		}
	}
	if running.HealthChecks.Workers != next.HealthChecks.Workers {
		diff = append(diff, "health_checks.workers")
	}
	if running.HealthChecks.HDS != next.HealthChecks.HDS {
		diff = append(diff, "health_checks.hds")
	}
	if len(diff) > 0 {
		return fmt.Errorf("%s: changed, and read at start only: restart the bridge to apply (the running config stays)", strings.Join(diff, ", "))
	}
	return nil
}

func sortedKeys(ms ...map[string]json.RawMessage) []string {
	seen := map[string]bool{}
	var out []string
	for _, m := range ms {
		for k := range m {
			if !seen[k] {
				seen[k] = true
				out = append(out, k)
			}
		}
	}
	sort.Strings(out)
	return out
}
