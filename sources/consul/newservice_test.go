package consul

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/xdsbridge/xdsbridge/sources"
	"github.com/xdsbridge/xdsbridge/sources/sourcestest"
)

// After the first publish, a service newly listed whose health reads fail
// (a token that may not read it, a server error) does not hold back the
// changes of the other services (README, Fail static: changes elsewhere
// still publish the full set): web's new instance is published while
// api's first read keeps failing, and api is published once it reads.
func TestNewServiceFailingReadDoesNotHoldOthers(t *testing.T) {
	var (
		mu       sync.Mutex
		index    uint64 = 10
		listed          = map[string][]string{"web": {}}
		web             = []int{8080}
		apiFails        = true
		changed         = make(chan struct{})
	)
	bump := func(f func()) {
		mu.Lock()
		f()
		index++
		close(changed)
		changed = make(chan struct{})
		mu.Unlock()
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		wait, _ := strconv.ParseUint(r.URL.Query().Get("index"), 10, 64)
		if wait > 0 && wait >= index && r.URL.Path != "/v1/status/leader" {
			ch := changed
			mu.Unlock()
			select {
			case <-ch:
			case <-r.Context().Done():
				return
			case <-time.After(time.Second):
			}
			mu.Lock()
		}
		idx, svcs, ports, fails := index, map[string][]string{}, append([]int(nil), web...), apiFails
		for k, v := range listed {
			svcs[k] = v
		}
		mu.Unlock()
		w.Header().Set("X-Consul-Index", strconv.FormatUint(idx, 10))
		w.Header().Set("X-Consul-KnownLeader", "true")
		w.Header().Set("Content-Type", "application/json")
		var body any
		switch r.URL.Path {
		case "/v1/status/leader":
			body = "127.0.0.1:8300"
		case "/v1/catalog/services":
			body = svcs
		case "/v1/health/service/web", "/v1/health/service/api":
			port := []int{9090}
			if strings.HasSuffix(r.URL.Path, "/web") {
				port = ports
			} else if fails {
				http.Error(w, "Permission denied", http.StatusForbidden)
				return
			}
			var es []*api.ServiceEntry
			for _, p := range port {
				es = append(es, &api.ServiceEntry{
					Node:    &api.Node{Node: "n1", Address: "127.0.0.1", Datacenter: "dc1"},
					Service: &api.AgentService{ID: fmt.Sprintf("i-%d", p), Service: strings.TrimPrefix(r.URL.Path, "/v1/health/service/"), Address: "127.0.0.1", Port: p},
				})
			}
			body = es
		default:
			http.NotFound(w, r)
			return
		}
		_ = json.NewEncoder(w).Encode(body)
	}))
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close() })
	src, err := New("consul", json.RawMessage(fmt.Sprintf(`{"address": %q, "wait_time": "2s", "coalesce": "10ms", "retry_min": "50ms", "retry_max": "200ms"}`,
		strings.TrimPrefix(srv.URL, "http://"))), sources.Env{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	sink := sourcestest.Run(t, src, 20*time.Second)
	sink.WaitFor(t, waitLong, "web with one instance", func(us []sources.Update, _ []error) bool {
		return len(us) > 0 && len(webPorts(us[len(us)-1])) == 1
	})
	bump(func() { listed["api"] = []string{} })
	time.Sleep(300 * time.Millisecond) // api listed, its reads failing
	bump(func() { web = append(web, 8081) })
	sink.WaitFor(t, 5*time.Second, "web's new instance while api's reads fail", func(us []sources.Update, _ []error) bool {
		return len(us) > 0 && len(webPorts(us[len(us)-1])) == 2
	})
	bump(func() { apiFails = false })
	sink.WaitFor(t, 5*time.Second, "api once it reads", func(us []sources.Update, _ []error) bool {
		_, ok := sourcestest.Service(us[len(us)-1], "api")
		return len(us) > 0 && ok && len(webPorts(us[len(us)-1])) == 2
	})
}
