package consul

import (
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/xdsbridge/xdsbridge/policy"
)

// TestConfigEntriesWaitWholeCoalesceWindow: config-entry changes wait the whole
// coalescing window (README: "the initial reads and config-entry changes
// wait the whole window"), so that the reads of one edit of several entries
// go together. A service change that started a window just before must not
// cut that short: an entry read near the end of the window was published
// at its end, alone, and the entry read a moment later in the next window
// (two policies, the first half an edit).
func TestConfigEntriesWaitWholeCoalesceWindow(t *testing.T) {
	const window = time.Second
	f := newFakeEntries(t)
	s, sink := startSource(t, baseConfig(f.srv.URL, `, "config_entries": true, "coalesce": "1s"`))
	waitPolicy(t, sink, "the first policy", map[string]policy.Service{})
	time.Sleep(2*window + 200*time.Millisecond) // quiet (the initial reads may have queued one more window): the next signal is a leading edge
	before := len(sink.Policies())

	s.signal() // a service change: flushed at once (leading edge)
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	stopPoll, polled := make(chan struct{}), make(chan struct{})
	defer func() { close(stopPoll); <-polled }()
	go func() { // logs when the entries and the policies change
		defer close(polled)
		n := before
		var v uint64
		for {
			s.mu.Lock()
			cv := s.ce.version
			s.mu.Unlock()
			if cv != v {
				v = cv
				t.Logf("entries version %d at %s", v, time.Since(start).Round(time.Millisecond))
			}
			select {
			case <-stopPoll:
				return
			case <-time.After(5 * time.Millisecond):
			}
			if ps := sink.Policies(); len(ps) > n {
				n = len(ps)
				t.Logf("policy %d at %s: %s", n-before, time.Since(start).Round(time.Millisecond), mustJSON(ps[n-1].Policy))
			}
		}
	}()
	s.signal() // another: waits for the end of the window (~950 ms)
	time.Sleep(800 * time.Millisecond)
	// One edit of two entries, read 250 ms apart: the first near the end of
	// the services' window.
	// Stored as the watch stores a read (the fake agent's own reads can lag
	// by seconds: its blocking queries share the client's connections), and
	// served by the fake so that its reads find the same.
	f.update(func() {
		f.entries[api.ServiceDefaults] = []map[string]any{{"Kind": api.ServiceDefaults, "Name": "web", "Protocol": "http"}}
	})
	s.storeEntries(api.ServiceDefaults, []api.ConfigEntry{&api.ServiceConfigEntry{Kind: api.ServiceDefaults, Name: "web", Protocol: "http"}})
	time.Sleep(250 * time.Millisecond)
	f.update(func() {
		f.entries[api.ServiceResolver] = []map[string]any{{"Kind": api.ServiceResolver, "Name": "web", "ConnectTimeout": "3s"}}
	})
	s.storeEntries(api.ServiceResolver, []api.ConfigEntry{&api.ServiceResolverConfigEntry{Kind: api.ServiceResolver, Name: "web", ConnectTimeout: 3 * time.Second}})
	whole := map[string]policy.Service{"web": {Protocol: policy.ProtocolHTTP, ConnectTimeout: 3e9}}
	waitPolicy(t, sink, "the whole edit", whole)
	t.Logf("edit published %s after the second service signal", time.Since(start).Round(time.Millisecond))
	for i, p := range sink.Policies()[before:] {
		if p.Policy == nil || !cmpServices(p.Policy.Services, whole) {
			t.Errorf("policy %d published after the edit began is half of it: %s", i+1, mustJSON(p.Policy))
		}
	}
}

func cmpServices(a, b map[string]policy.Service) bool {
	return mustJSON(&policy.File{Services: a}) == mustJSON(&policy.File{Services: b})
}
