package consul

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/xdsbridge/xdsbridge/policy"
)

// fakeEntries is a Consul HTTP API with no services and config entries
// of each kind that a test sets, with blocking queries on one index. A
// kind can answer without a known leader or with an error status.
type fakeEntries struct {
	srv *httptest.Server

	mu       sync.Mutex
	index    uint64
	entries  map[string][]map[string]any // kind → entries as JSON objects
	noLeader map[string]bool
	status   map[string]int
	changed  chan struct{}
}

func newFakeEntries(t *testing.T) *fakeEntries {
	f := &fakeEntries{index: 10, entries: map[string][]map[string]any{}, noLeader: map[string]bool{}, status: map[string]int{}, changed: make(chan struct{})}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(func() {
		f.srv.CloseClientConnections()
		f.srv.Close()
	})
	return f
}

// update changes the state under the lock and wakes blocking queries.
func (f *fakeEntries) update(change func()) {
	f.mu.Lock()
	change()
	f.index++
	close(f.changed)
	f.changed = make(chan struct{})
	f.mu.Unlock()
}

func (f *fakeEntries) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	wait, _ := strconv.ParseUint(r.URL.Query().Get("index"), 10, 64)
	if wait > 0 && wait >= f.index {
		ch := f.changed
		f.mu.Unlock()
		select {
		case <-ch:
		case <-r.Context().Done():
			return
		case <-time.After(2 * time.Second):
		}
		f.mu.Lock()
	}
	defer f.mu.Unlock()
	kind, isConfig := strings.CutPrefix(r.URL.Path, "/v1/config/")
	if isConfig && f.status[kind] != 0 {
		http.Error(w, "Permission denied", f.status[kind])
		return
	}
	index, leader := f.index, "true"
	if isConfig && f.noLeader[kind] {
		index, leader = 1, "false"
	}
	w.Header().Set("X-Consul-Index", strconv.FormatUint(index, 10))
	w.Header().Set("X-Consul-KnownLeader", leader)
	w.Header().Set("X-Consul-LastContact", "0") // the API client reads KnownLeader after it
	w.Header().Set("Content-Type", "application/json")
	var body any
	switch {
	case r.URL.Path == "/v1/status/leader":
		body = "127.0.0.1:8300"
	case r.URL.Path == "/v1/catalog/services":
		body = map[string][]string{}
	case isConfig:
		list := f.entries[kind]
		if f.noLeader[kind] {
			list = nil // what a restarted server has before its state
		}
		if list == nil {
			list = []map[string]any{}
		}
		body = list
	default:
		http.NotFound(w, r)
		return
	}
	_ = json.NewEncoder(w).Encode(body)
}

// A config-entry read answered without a known leader, or with an error,
// is a failed read: Fail is called and the policy stays as it was; when
// the reads succeed again nothing is published unless the entries
// changed.
func TestConfigEntriesFailStatic(t *testing.T) {
	f := newFakeEntries(t)
	f.update(func() {
		f.entries[api.ServiceDefaults] = []map[string]any{{"Kind": api.ServiceDefaults, "Name": "web", "Protocol": "http"}}
	})
	s, sink := startSource(t, baseConfig(f.srv.URL, `, "config_entries": true, "retry_max": "200ms"`))
	webHTTP := map[string]policy.Service{"web": {Protocol: policy.ProtocolHTTP}}
	waitPolicy(t, sink, "the first policy", webHTTP)
	if us := sink.Updates(); len(us) == 0 {
		t.Error("no services published")
	}

	for _, c := range []struct {
		what string
		brk  func()
		mend func()
	}{
		{"no known leader", func() { f.noLeader[api.ServiceDefaults] = true }, func() { f.noLeader[api.ServiceDefaults] = false }},
		{"403", func() { f.status[api.ServiceDefaults] = http.StatusForbidden }, func() { f.status[api.ServiceDefaults] = 0 }},
	} {
		before, errs := len(sink.Policies()), len(sink.Errors())
		f.update(c.brk)
		waitFor(t, c.what+": a Fail call", func() bool { return len(sink.Errors()) > errs })
		waitFor(t, c.what+": DebugInfo showing the watch failing", func() bool {
			d := s.DebugInfo().(Debug)
			return d.Stale && d.ConfigEntries.Watches[api.ServiceDefaults].Failing
		})
		time.Sleep(300 * time.Millisecond) // retries happen meanwhile (retry_max 200ms)
		if n := len(sink.Policies()); n != before {
			t.Errorf("%s: %d policies published while the reads fail: %s", c.what, n-before, mustJSON(lastPolicy(sink)))
		}
		f.update(c.mend)
		waitFor(t, c.what+": DebugInfo to stop showing stale data", func() bool { return !s.DebugInfo().(Debug).Stale })
		time.Sleep(100 * time.Millisecond)
		if n := len(sink.Policies()); n != before {
			t.Errorf("%s: %d policies published after the reads succeed again with the same entries", c.what, n-before)
		}
	}

	// A change is published; an entry removed restores the default.
	f.update(func() {
		f.entries[api.ServiceResolver] = []map[string]any{{"Kind": api.ServiceResolver, "Name": "web", "ConnectTimeout": "3s"}}
	})
	waitPolicy(t, sink, "a resolver", map[string]policy.Service{"web": {Protocol: policy.ProtocolHTTP, ConnectTimeout: 3e9}})
	f.update(func() { f.entries = map[string][]map[string]any{} })
	waitPolicy(t, sink, "every entry removed", map[string]policy.Service{})
	if n := len(sink.Policies()); n != 3 {
		t.Errorf("%d policies published, want 3 (the first, the resolver, the removal)", n)
	}
}
