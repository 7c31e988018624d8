package consul

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/xdsbridge/xdsbridge/sources"
)

// Config entries (config_entries: true): one blocking-query watch per kind
// on /v1/config/<kind> in the local datacenter, with the same slots,
// pacing, backoff and recovery as the other watches. Every change is
// converted (convertEntries) and the policy published when it differs
// from the last one. While a watch fails, its kind keeps its last good
// entries: the policy stays as it was (fail static).

// errNoKnownLeader is a read answered without a known leader. Its text
// makes the watch wait on the recovery prober (runner.unavailable).
var errNoKnownLeader = errors.New("No cluster leader known to the agent: its answer may predate the servers' state; reading again")

// watchConfigEntries keeps one kind's entries current until ctx is done.
func (r *runner) watchConfigEntries(ctx context.Context, kind string) {
	s := r.s
	dc := s.dcs[0]
	s.mu.Lock()
	info := s.ce.watches[kind]
	s.mu.Unlock()
	w := r.newWatch(dc, epConfig, dc.label+": config "+kind, info)
	fetch := func(q *api.QueryOptions) ([]api.ConfigEntry, *api.QueryMeta, error) {
		q.UseCache = false // the agent cache does not serve config-entry lists as blocking queries
		list, meta, err := r.client.ConfigEntries().List(kind, q)
		if err == nil && meta != nil && !meta.KnownLeader {
			// A server that knows no leader answers stale reads from
			// whatever state it has, which after a restart can be none
			// yet (index 1, no entries): that would drop the policy.
			// Read again later, as for Consul's own "No cluster leader".
			return nil, nil, errNoKnownLeader
		}
		return list, meta, err
	}
	for ctx.Err() == nil {
		list, err := read(ctx, w, true, fetch)
		if err != nil {
			continue
		}
		s.storeEntries(kind, list)
	}
}

// storeEntries keeps a kind's list read from Consul.
func (s *Source) storeEntries(kind string, list []api.ConfigEntry) {
	s.mu.Lock()
	ce := s.ce
	next := ce.entries
	next.set(kind, list)
	changed := !ce.seen[kind] || !reflect.DeepEqual(next, ce.entries)
	ce.entries = next
	ce.seen[kind] = true
	ce.counts[kind] = len(list)
	if changed {
		ce.version++
	}
	s.mu.Unlock()
	if changed {
		s.entriesAt.CompareAndSwap(0, time.Now().UnixNano())
		s.signal()
	}
}

// policyPublisher is the coordinator's memory of the policy it published.
type policyPublisher struct {
	published bool
	last      []byte // the JSON of the policy last published
	version   uint64 // entries version last converted
	naming    naming // naming last converted with
}

// flush converts the entries when they (or the cluster naming) changed
// since the last conversion and publishes the policy when it differs from
// the last published. Nothing before every kind was read once. It returns
// an error only when ctx is done.
func (p *policyPublisher) flush(ctx context.Context, s *Source, sink sources.Sink) error {
	s.mu.Lock()
	ce := s.ce
	ready := len(ce.seen) == len(entryKinds)
	es, version := ce.entries, ce.version
	n := naming{template: s.set.mapping.clusterName, local: s.set.localDC, watched: s.set.failoverDCs}
	if n.local == "" {
		n.local = s.dcs[0].actual
	}
	s.mu.Unlock()
	if !ready || (p.published && version == p.version && reflect.DeepEqual(n, p.naming)) {
		return nil
	}
	f, diags := convertEntries(es, n)
	p.version, p.naming = version, n
	s.mu.Lock()
	ce.diags = diags
	s.mu.Unlock()
	s.metrics.setDiagnostics(diags)
	for _, d := range diags {
		s.log.Debug("config entry not fully converted", "diagnostic", d.String())
	}
	// Compared as JSON: the sink owns what it was given and the policy
	// is plain data whose JSON is its content.
	enc, err := json.Marshal(f)
	if err != nil {
		return nil // cannot happen: plain data
	}
	if p.published && bytes.Equal(enc, p.last) {
		return nil
	}
	if err := sink.PublishPolicy(ctx, sources.PolicyUpdate{Source: s.name, Policy: f}); err != nil {
		return err
	}
	if len(diags) > 0 {
		s.log.Warn("config entries published with diagnostics (see /debug/sources)", "services", len(f.Services), "diagnostics", len(diags))
	}
	p.published, p.last = true, enc
	s.metrics.policyPublishes.Inc()
	s.mu.Lock()
	ce.published = time.Now()
	s.mu.Unlock()
	return nil
}
