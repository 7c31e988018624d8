package consul

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/xdsbridge/xdsbridge/internal/logbuf"
	"github.com/xdsbridge/xdsbridge/sources"
	"github.com/xdsbridge/xdsbridge/sources/sourcestest"
)

// fakeAgent is a minimal Consul HTTP API for one service "web": catalog
// services, health service (blocking on the index) and status leader. It
// can be down (connections closed without an answer), leaderless (reads
// answer "500 No cluster leader", the leader is ""), replaying (a
// restarted server that has not applied its log: other than consistent
// reads answer an empty catalog at index 1; consistent reads answer "500
// Not ready to serve consistent reads" replay times, then the agent is up)
// or up.
type fakeAgent struct {
	srv *httptest.Server

	mu        sync.Mutex
	mode      string // up, down, noleader, replaying
	replay    int    // consistent reads refused in replaying mode
	index     uint64
	instances []int // ports of web's instances on 127.0.0.1
	changed   chan struct{}
	requests  map[string]int
}

func newFakeAgent(t *testing.T) *fakeAgent {
	f := &fakeAgent{mode: "up", index: 10, instances: []int{8080}, changed: make(chan struct{}), requests: map[string]int{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(func() {
		f.set("down", nil)
		f.srv.CloseClientConnections()
		f.srv.Close()
	})
	return f
}

// set changes the mode and, when add is set, adds an instance; blocking
// queries in flight return.
func (f *fakeAgent) set(mode string, add *int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mode = mode
	if add != nil {
		f.instances = append(f.instances, *add)
		f.index++
	}
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *fakeAgent) count(path string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requests[path]
}

func (f *fakeAgent) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.requests[r.URL.Path]++
	wait, _ := strconv.ParseUint(r.URL.Query().Get("index"), 10, 64)
	if f.mode == "up" && wait > 0 && wait >= f.index && r.URL.Path != "/v1/status/leader" {
		ch := f.changed
		f.mu.Unlock()
		select {
		case <-ch:
		case <-r.Context().Done():
			return
		case <-time.After(5 * time.Second):
		}
		f.mu.Lock()
	}
	if f.mode == "replaying" && r.URL.Query().Has("consistent") {
		if f.replay > 0 {
			f.replay--
			f.mu.Unlock()
			http.Error(w, "Not ready to serve consistent reads", http.StatusInternalServerError)
			return
		}
		f.mode = "up"
	}
	mode, index, instances := f.mode, f.index, append([]int(nil), f.instances...)
	f.mu.Unlock()
	if mode == "replaying" && r.URL.Path != "/v1/status/leader" {
		index, instances = 1, nil
	}
	switch mode {
	case "down":
		hj, ok := w.(http.Hijacker)
		if !ok {
			panic("no hijacker")
		}
		c, _, err := hj.Hijack()
		if err == nil {
			_ = c.Close()
		}
		return
	case "noleader":
		if r.URL.Path == "/v1/status/leader" {
			_, _ = w.Write([]byte(`""`))
			return
		}
		http.Error(w, "No cluster leader", http.StatusInternalServerError)
		return
	}
	w.Header().Set("X-Consul-Index", strconv.FormatUint(index, 10))
	w.Header().Set("X-Consul-KnownLeader", "true")
	w.Header().Set("Content-Type", "application/json")
	var body any
	switch {
	case r.URL.Path == "/v1/status/leader":
		body = "127.0.0.1:8300"
	case r.URL.Path == "/v1/catalog/services" && mode == "replaying":
		body = map[string][]string{}
	case r.URL.Path == "/v1/catalog/services":
		body = map[string][]string{"web": {}}
	case r.URL.Path == "/v1/health/service/web":
		var es []*api.ServiceEntry
		for _, p := range instances {
			es = append(es, &api.ServiceEntry{
				Node:    &api.Node{Node: "n1", Address: "127.0.0.1", Datacenter: "dc1"},
				Service: &api.AgentService{ID: fmt.Sprintf("web-%d", p), Service: "web", Address: "127.0.0.1", Port: p},
			})
		}
		body = es
	default:
		http.NotFound(w, r)
		return
	}
	_ = json.NewEncoder(w).Encode(body)
}

func webPorts(u sources.Update) []int {
	svc, ok := sourcestest.Service(u, "web")
	if !ok {
		return nil
	}
	var out []int
	for _, e := range svc.Endpoints {
		out = append(out, int(e.Port))
	}
	return out
}

// TestRecoveryAfterOutageFakeAgent: after an outage long enough for the
// backoff to grow to seconds, then a spell without a leader, a change made
// when the agent serves again is published within 2 s; the source logs
// going stale and recovering, and DebugInfo shows the staleness.
func TestRecoveryAfterOutageFakeAgent(t *testing.T) {
	f := newFakeAgent(t)
	var logs logbuf.Buffer
	src, err := New("consul", json.RawMessage(fmt.Sprintf(`{"address": %q, "wait_time": "30s", "coalesce": "10ms",
		"retry_min": "100ms", "retry_max": "30s"}`, strings.TrimPrefix(f.srv.URL, "http://"))),
		sources.Env{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatal(err)
	}
	s := src.(*Source)
	sink := sourcestest.Run(t, s, 10*time.Second)
	sink.WaitFor(t, waitLong, "web with one instance", func(us []sources.Update, _ []error) bool {
		return len(us) > 0 && len(webPorts(us[len(us)-1])) == 1
	})

	f.set("down", nil)
	f.srv.CloseClientConnections()
	time.Sleep(5 * time.Second) // backoff grows past 3 s
	if d := s.DebugInfo().(Debug); !d.Stale {
		t.Errorf("DebugInfo while down: stale=false")
	}
	if !strings.Contains(logs.String(), "is stale") {
		t.Errorf("no stale log line; logs:\n%s", logs.String())
	}
	f.set("noleader", nil)
	time.Sleep(1500 * time.Millisecond)
	if d := s.DebugInfo().(Debug); !d.Stale {
		t.Errorf("DebugInfo without a leader: stale=false")
	}
	port := 8081
	back := time.Now()
	f.set("up", &port)
	sink.WaitFor(t, 5*time.Second, "the new instance", func(us []sources.Update, _ []error) bool {
		return len(us) > 0 && len(webPorts(us[len(us)-1])) == 2
	})
	took := time.Since(back)
	t.Logf("change published %v after the agent served again", took)
	if took > 2*time.Second {
		t.Errorf("change published %v after the agent served again, want ≤ 2s", took)
	}
	waitFor(t, "DebugInfo to stop showing stale data", func() bool { return !s.DebugInfo().(Debug).Stale })
	waitFor(t, "the recovered log line", func() bool { return strings.Contains(logs.String(), "recovered") })
	if !strings.Contains(logs.String(), "outage=") {
		t.Errorf("recovered log line without the outage length:\n%s", logs.String())
	}
	// Paced: one probe at most every probeEvery/1.5 over the ~6.5 s.
	if n := f.count("/v1/status/leader"); n == 0 || n > 15 {
		t.Errorf("%d leader probes during a 6.5 s outage, want 1..15", n)
	}
}

// TestIndexBackwardsReadConsistent: a restarted server that has not yet
// applied its log answers stale reads with an empty catalog at index 1
// (seen with a real agent killed and restarted: every service removed for
// a moment). The source reads again in consistent mode, which the server
// refuses until it is ready, and publishes nothing from the empty state:
// web never leaves, no failure is reported, and a later change arrives.
func TestIndexBackwardsReadConsistent(t *testing.T) {
	f := newFakeAgent(t)
	src, err := New("consul", json.RawMessage(fmt.Sprintf(`{"address": %q, "wait_time": "30s", "coalesce": "10ms", "retry_min": "100ms"}`,
		strings.TrimPrefix(f.srv.URL, "http://"))), sources.Env{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	s := src.(*Source)
	sink := sourcestest.Run(t, s, 10*time.Second)
	sink.WaitFor(t, waitLong, "web with one instance", func(us []sources.Update, _ []error) bool {
		return len(us) > 0 && len(webPorts(us[len(us)-1])) == 1
	})

	f.mu.Lock()
	f.replay = 3
	f.mu.Unlock()
	f.set("replaying", nil) // the blocking queries return from the empty state
	// Until the consistent reads are answered (the agent is up again).
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		f.mu.Lock()
		up := f.mode == "up"
		f.mu.Unlock()
		if up {
			break
		}
	}
	port := 8081
	f.set("up", &port)
	sink.WaitFor(t, 10*time.Second, "the new instance", func(us []sources.Update, _ []error) bool {
		return len(us) > 0 && len(webPorts(us[len(us)-1])) == 2
	})
	for i, u := range sink.Updates() {
		if len(webPorts(u)) == 0 {
			t.Errorf("update %d has no instance of web: %+v", i, u)
		}
	}
	if errs := sink.Errors(); len(errs) != 0 {
		t.Errorf("failures reported: %v", errs)
	}
	var retried float64
	for _, ep := range []string{epServices, epHealth} {
		retried += testutil.ToFloat64(s.metrics.requests.WithLabelValues(ep, "backwards_retry"))
	}
	if retried < 2 {
		t.Errorf("%v reads redone for an index gone backwards; want one per watch at least", retried)
	}
}

func TestUnavailableErrors(t *testing.T) {
	s := &Source{set: &settings{tls: &tlsSettings{}}}
	r := &runner{s: s}
	tests := []struct {
		err  error
		want bool
	}{
		{&url.Error{Op: "Get", URL: "http://x", Err: errors.New("connection refused")}, true},
		{fmt.Errorf("wrapped: %w", &url.Error{Op: "Get", URL: "http://x", Err: errors.New("EOF")}), true},
		{api.StatusError{Code: 500, Body: "No cluster leader"}, true},
		{api.StatusError{Code: 500, Body: "Not ready to serve consistent reads"}, true},
		{api.StatusError{Code: 403, Body: "ACL not found"}, false},
		{api.StatusError{Code: 500, Body: "rpc error: something else"}, false},
		{errors.New("no query metadata in response"), false},
	}
	for _, tt := range tests {
		if got := r.unavailable(tt.err); got != tt.want {
			t.Errorf("unavailable(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

// TestRecoveryHoldGrows: wake-ups without a successful read between them
// are held back longer and longer, up to retry_max; a read resets it.
func TestRecoveryHoldGrows(t *testing.T) {
	s := &Source{set: &settings{retryMax: 10 * time.Second}}
	rc := newRecovery(&runner{s: s})
	var got []time.Duration
	for i := 0; i < 6; i++ {
		got = append(got, rc.holdLocked())
		rc.wakes++
	}
	want := []time.Duration{0, 1500 * time.Millisecond, 3 * time.Second, 6 * time.Second, 10 * time.Second, 10 * time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("holds = %v, want %v", got, want)
		}
	}
	rc.readOK()
	if h := rc.holdLocked(); h != 0 {
		t.Errorf("hold after a read = %v, want 0", h)
	}
}
