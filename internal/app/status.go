package app

import (
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/xdsbridge/xdsbridge/bridge"
	"github.com/xdsbridge/xdsbridge/hds"
	"github.com/xdsbridge/xdsbridge/healthcheck"
	"github.com/xdsbridge/xdsbridge/internal/buildinfo"
	"github.com/xdsbridge/xdsbridge/internal/status"
	"github.com/xdsbridge/xdsbridge/sources"
	"github.com/xdsbridge/xdsbridge/xds"
)

// statusOnce builds the status page's sampler once: AdminHandler (the
// page) and Run (the sampler's goroutine) share it.
type statusOnce struct {
	once    sync.Once
	sampler *status.Sampler
}

// StatusSampler is the sampler of the status page's chart (pushes per
// interval). Run runs it.
func (a *App) StatusSampler() *status.Sampler {
	a.status.once.Do(func() {
		a.status.sampler = &status.Sampler{Pushes: a.pushesTotal, LatencyP50: a.statusLatencyP50}
	})
	return a.status.sampler
}

// StatusPage is the admin listener's status page (GET /).
func (a *App) StatusPage() *status.Page {
	return &status.Page{
		Build:    buildinfo.Get().Short(),
		Ready:    a.Loop.Ready,
		Sources:  a.statusSources,
		Services: a.statusServices,
		Hosts:    a.statusHosts,
		Dropped:  a.statusDropped,
		Clients:  a.statusClients,
		Config:   a.statusConfig,
		Chart:    a.StatusSampler(),
	}
}

func (a *App) statusConfig() status.ConfigRow {
	st := a.ReloadStatus()
	return status.ConfigRow{LoadedAt: st.LoadedAt, ReloadRefused: !st.LastReloadOK, LastReload: st.LastReload, LastReloadError: st.LastError}
}

// pushesTotal sums xdsbridge_xds_pushes_total over its labels.
func (a *App) pushesTotal() uint64 {
	mfs, err := a.Registry.Gather()
	if err != nil && mfs == nil {
		return 0
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != "xdsbridge_xds_pushes_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			n += m.GetCounter().GetValue()
		}
	}
	return uint64(n)
}

func (a *App) statusSources() []status.SourceRow {
	var out []status.SourceRow
	for _, st := range a.Loop.Sources() {
		out = append(out, status.SourceRow{
			Name: st.Name, Synced: st.Synced, Stale: st.Stale, ConfirmedAge: st.ConfirmedAge, ChangedAge: st.ChangedAge,
			LastError: st.LastError, LastErrorTime: st.LastErrorTime, Services: st.Services, Policies: st.Policies,
			Dropped: st.DroppedCounts, ClaimsLost: st.ClaimsLost,
		})
	}
	return out
}

// statusServices lists every service with hosts explained or a cluster
// served: its endpoints counted by health, its owner (the first claimant
// of a conflict, else the source of its hosts).
func (a *App) statusServices() []status.ServiceRow {
	conflicts := a.Loop.Conflicts()
	rows := map[string]*status.ServiceRow{}
	row := func(name string) *status.ServiceRow {
		r := rows[name]
		if r == nil {
			r = &status.ServiceRow{Name: name}
			rows[name] = r
		}
		return r
	}
	for name, hosts := range a.Loop.Hosts("") {
		r := row(name)
		for _, h := range hosts {
			if r.Source == "" {
				r.Source = h.Source
			}
			if !h.Published {
				r.Unpublished++
				continue
			}
			switch h.Health {
			case sources.HealthHealthy:
				r.Healthy++
			case sources.HealthUnhealthy:
				r.Unhealthy++
			case sources.HealthDraining:
				r.Draining++
			default:
				r.Other++
			}
		}
	}
	for _, ri := range a.Cache.List(xds.ClusterType) {
		row(ri.Name)
	}
	for name, from := range a.Loop.Policies() {
		row(name).Policy = from
	}
	for name, claimants := range conflicts {
		if len(claimants) == 0 {
			continue
		}
		r := row(name)
		r.Source, r.Claimants = claimants[0], claimants[1:]
	}
	out := make([]status.ServiceRow, 0, len(rows))
	for _, r := range rows {
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func (a *App) statusHosts(service string) []status.HostRow {
	hosts := a.Hosts(service)[service]
	out := make([]status.HostRow, 0, len(hosts))
	for _, h := range hosts {
		out = append(out, hostRow(h))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Host < out[j].Host })
	return out
}

func hostRow(h bridge.HostInfo) status.HostRow {
	r := status.HostRow{Host: h.Host, Source: h.Source, SourceHealth: h.SourceHealth.String(), Check: h.Check.String(),
		Published: h.Published, Health: h.Health.String(), Rule: string(h.Rule), Why: h.SourceChecks}
	if !h.Discovered {
		r.SourceHealth = "ABSENT"
	}
	if r.Check == "none" && r.Why != "" {
		r.Check = "source's" // no xdsbridge check: the source's own checks decide
	}
	if d, ok := h.CheckState.(healthcheck.RemoteDetail); ok {
		if st, ok := d.State().(hds.TargetState); ok {
			r.Checkers = st.Summary
		}
	}
	return r
}

// statusDropped lists the instances of a service its sources dropped.
func (a *App) statusDropped(service string) []status.DroppedRow {
	var out []status.DroppedRow
	for _, d := range a.Dropped(service) {
		out = append(out, status.DroppedRow{Source: d.Source, Instance: d.Instance, Reason: d.Reason, Detail: d.Detail})
	}
	return out
}

// statusClients lists the connected xDS clients, one row per stream, with
// each type's sync status (xds.Server.ClientStatuses).
func (a *App) statusClients() []status.ClientRow {
	var out []status.ClientRow
	for _, c := range a.XDS.ClientStatuses() {
		row := status.ClientRow{Node: c.Node, Cluster: c.Cluster, Mode: c.Mode, Connected: c.Connected, Responses: c.Responses, NACKs: c.NACKs}
		for _, t := range c.Types {
			tr := status.TypeRow{Type: t.Type, State: t.State, Since: t.Since,
				LatencyP50: t.LatencyP50, LatencyP99: t.LatencyP99, Samples: t.Samples}
			if t.NACK != nil {
				tr.NACKDetail = t.NACK.Detail
			}
			row.Types = append(row.Types, tr)
		}
		out = append(out, row)
	}
	return out
}

// statusLatencyP50 is the median change → ACK latency since the previous
// sample of the status page's chart.
func (a *App) statusLatencyP50() (time.Duration, bool) {
	ds := a.XDS.DrainChangeACK()
	if len(ds) == 0 {
		return 0, false
	}
	slices.Sort(ds)
	return ds[len(ds)/2], true
}
