package app

import (
	"net/netip"
	"sort"

	"github.com/xdsbridge/xdsbridge/bridge"
	"github.com/xdsbridge/xdsbridge/healthcheck"
	"github.com/xdsbridge/xdsbridge/sources"
)

// RuleSourceChecks replaces healthcheck.RuleDiscoveryOnly for a host
// whose source explains its health (sources.HostExplainer): no xdsbridge
// health check, the source's own checks (Consul's) decide.
const RuleSourceChecks healthcheck.Rule = "discovered, no xdsbridge health check: the source's own checks decide"

// Hosts is Loop.Hosts with each host's SourceChecks filled in by its
// source, when the source explains its hosts (the Consul checks that
// decided the host's health), and the rule of such a host without an
// xdsbridge check saying so.
func (a *App) Hosts(service string) map[string][]bridge.HostInfo {
	out := a.Loop.Hosts(service)
	explainers := map[string]sources.HostExplainer{}
	for _, s := range a.activeSources() {
		if e, ok := s.(sources.HostExplainer); ok {
			explainers[s.Name()] = e
		}
	}
	if len(explainers) == 0 {
		return out
	}
	for svc, hosts := range out {
		for i := range hosts {
			h := &hosts[i]
			e := explainers[h.Source]
			if e == nil || !h.Discovered {
				continue
			}
			k, ok := hostKey(h.Host)
			if !ok {
				continue
			}
			h.SourceChecks = e.ExplainHost(svc, k)
			if h.SourceChecks != "" && h.Rule == healthcheck.RuleDiscoveryOnly {
				h.Rule = RuleSourceChecks
			}
		}
	}
	return out
}

// hostKey parses a HostInfo's host ("10.0.0.1:80", "[::1]:80").
func hostKey(h string) (sources.HostKey, bool) {
	ap, err := netip.ParseAddrPort(h)
	if err != nil {
		return sources.HostKey{}, false
	}
	return sources.HostKey{Address: ap.Addr().String(), Port: uint32(ap.Port())}, true
}

// DroppedInstance is an instance a source dropped, with the source.
type DroppedInstance struct {
	Source string `json:"source"`
	sources.Dropped
}

// Dropped lists the instances of a service ("": of every service) that
// their sources read and dropped, and why (at most
// bridge.MaxDroppedListed per source), by service, source and instance.
func (a *App) Dropped(service string) []DroppedInstance {
	var out []DroppedInstance
	for _, st := range a.Loop.Sources() {
		for _, d := range st.Dropped {
			if service == "" || d.Service == service {
				out = append(out, DroppedInstance{Source: st.Name, Dropped: d})
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Service != out[j].Service {
			return out[i].Service < out[j].Service
		}
		if out[i].Source != out[j].Source {
			return out[i].Source < out[j].Source
		}
		return out[i].Instance < out[j].Instance
	})
	return out
}
