package consul

import (
	"sort"
	"time"
)

// Debug is what DebugInfo returns. It never contains the ACL token.
type Debug struct {
	Address     string `json:"address"`
	Consistency string `json:"consistency"`
	UseCache    bool   `json:"use_cache"`
	// Stale: a watch is failing, or the agent has not answered for
	// stale_after (Liveness).
	Stale bool `json:"stale"`
	// ConfirmedAge is, while a watch fails, the time since the oldest
	// failing watch last read successfully.
	ConfirmedAge string         `json:"confirmed_age,omitempty"`
	Liveness     *DebugLiveness `json:"liveness,omitempty"`
	Published    *time.Time     `json:"last_published,omitempty"`
	Datacenters  []DebugDC      `json:"datacenters"`
	// ConfigEntries is there with config_entries.
	ConfigEntries *DebugConfigEntries `json:"config_entries,omitempty"`
}

// DebugConfigEntries are the config-entry watches, how many entries of
// each kind the last good reads hold, and what of them the published
// policy does not carry.
type DebugConfigEntries struct {
	Watches         map[string]DebugWatch `json:"watches"`
	Entries         map[string]int        `json:"entries"`
	PolicyPublished *time.Time            `json:"policy_published,omitempty"`
	Diagnostics     []Diagnostic          `json:"diagnostics"`
}

// DebugDC is one datacenter.
type DebugDC struct {
	Name     string         `json:"name"`
	Priority uint32         `json:"priority"`
	Selected int            `json:"selected_services"`
	List     DebugWatch     `json:"service_list"`
	Feed     *DebugWatch    `json:"change_feed,omitempty"` // the critical checks' query
	FeedWarn *DebugWatch    `json:"change_feed_warning,omitempty"`
	Services []DebugService `json:"services"`
}

// DebugService is one service's health watch.
type DebugService struct {
	Name      string     `json:"name"`
	Instances int        `json:"instances"`
	Published bool       `json:"published"`
	Watch     DebugWatch `json:"watch"`
}

// DebugWatch is one watch's progress.
type DebugWatch struct {
	State       string `json:"state"`
	Index       uint64 `json:"index"`
	IndexResets int    `json:"index_resets,omitempty"`
	LastContact string `json:"last_contact"`
	// ConfirmedAge is the time since the watch's last successful read.
	ConfirmedAge string     `json:"confirmed_age,omitempty"`
	LastError    string     `json:"last_error,omitempty"`
	LastErrorAt  *time.Time `json:"last_error_at,omitempty"`
	Failing      bool       `json:"failing"`
}

// DebugInfo implements sources.Debugger. Safe for concurrent use.
func (s *Source) DebugInfo() any {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	d := Debug{
		Address:     s.set.apiConfig.Scheme + "://" + s.set.apiConfig.Address,
		Consistency: s.set.consistency,
		UseCache:    s.set.useCache,
	}
	if !s.published.IsZero() {
		t := s.published
		d.Published = &t
	}
	var oldest time.Time
	note := func(w *watchInfo) DebugWatch {
		dw := debugWatch(w, now)
		if w.failing {
			d.Stale = true
			if !w.lastSuccess.IsZero() && (oldest.IsZero() || w.lastSuccess.Before(oldest)) {
				oldest = w.lastSuccess
			}
		}
		return dw
	}
	for _, dc := range s.dcs {
		ddc := DebugDC{Name: dc.label, Priority: dc.priority, Selected: dc.selected, List: note(&dc.list), Services: []DebugService{}}
		if dc.actual != "" {
			ddc.Name = dc.actual
		}
		if dc.feed[0].state != "" && dc.feed[0].state != "off" {
			f, w := note(&dc.feed[0]), note(&dc.feed[1])
			ddc.Feed, ddc.FeedWarn = &f, &w
		}
		for name, st := range dc.services {
			ddc.Services = append(ddc.Services, DebugService{Name: name, Instances: len(st.instances), Published: st.published, Watch: note(&st.info)})
		}
		sort.Slice(ddc.Services, func(i, j int) bool { return ddc.Services[i].Name < ddc.Services[j].Name })
		d.Datacenters = append(d.Datacenters, ddc)
	}
	if ce := s.ce; ce != nil {
		dce := &DebugConfigEntries{Watches: map[string]DebugWatch{}, Entries: map[string]int{}, Diagnostics: append([]Diagnostic{}, ce.diags...)}
		for kind, w := range ce.watches {
			dce.Watches[kind] = note(w)
			dce.Entries[kind] = ce.counts[kind]
		}
		if !ce.published.IsZero() {
			t := ce.published
			dce.PolicyPublished = &t
		}
		d.ConfigEntries = dce
	}
	if d.Stale && !oldest.IsZero() {
		d.ConfirmedAge = now.Sub(oldest).Round(time.Millisecond).String()
	}
	if lv := s.live.Load(); lv != nil {
		d.Liveness = lv.debug(now)
		d.Stale = d.Stale || d.Liveness.ReportStale
	}
	return d
}

func debugWatch(w *watchInfo, now time.Time) DebugWatch {
	dw := DebugWatch{
		State:       w.state,
		Index:       w.index,
		IndexResets: w.indexResets,
		LastContact: w.lastContact.String(),
		LastError:   w.lastError,
		Failing:     w.failing,
	}
	if !w.lastSuccess.IsZero() {
		dw.ConfirmedAge = now.Sub(w.lastSuccess).Round(time.Millisecond).String()
	}
	if !w.lastErrorAt.IsZero() {
		t := w.lastErrorAt
		dw.LastErrorAt = &t
	}
	return dw
}
