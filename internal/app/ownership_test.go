package app

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/xdsbridge/xdsbridge/config"
)

// TestOwnershipSameAcrossRestarts: two file sources publish the service
// api; the bridge is started ten times per config, with the sources' first
// syncs in alternating order (one file is written only once the other
// source synced). The owner is the same every time, the one the config
// ranks first, and the losing claim shows in /debug/sources and the
// xdsbridge_source_claims_lost metric.
func TestOwnershipSameAcrossRestarts(t *testing.T) {
	files := map[string]string{
		"primary":  "services: {api: {endpoints: [{address: 10.0.0.1, port: 80}]}}\n",
		"fallback": "services: {api: {endpoints: [{address: 10.0.0.2, port: 80}]}, other: {endpoints: [{address: 10.0.0.3, port: 80}]}}\n",
	}
	for _, c := range []struct {
		priority      string // of fallback
		owner, loser  string
		ownerEndpoint string
	}{
		{"", "primary", "fallback", "10.0.0.1:80"},
		{", priority: 1", "fallback", "primary", "10.0.0.2:80"},
	} {
		for i := range 10 {
			first, second := "primary", "fallback"
			if i%2 == 1 {
				first, second = second, first
			}
			dir := t.TempDir()
			cfg, err := config.Parse([]byte(`
xds: {listen: "127.0.0.1:0"}
admin: {listen: "127.0.0.1:0"}
debounce: {quiet: 1ms}
sources:
- {name: primary, file: {path: primary.yaml}}
- {name: fallback, file: {path: fallback.yaml}`+c.priority+`}
`), dir, SourceTypeNames())
			if err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(dir, first+".yaml"), []byte(files[first]), 0o644)
			a, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- a.Run(ctx) }()
			waitUntil(t, first+" synced", func() bool {
				for _, st := range a.Loop.Sources() {
					if st.Name == first {
						return st.Synced
					}
				}
				return false
			})
			os.WriteFile(filepath.Join(dir, second+".yaml"), []byte(files[second]), 0o644)
			waitUntil(t, "ready", a.Cache.Ready)

			hosts := a.Loop.Hosts("api")["api"]
			if len(hosts) != 1 || hosts[0].Source != c.owner || hosts[0].Host != c.ownerEndpoint {
				t.Errorf("start %d (%s synced first, fallback%s): api hosts %+v, want %s from %s", i, first, c.priority, hosts, c.ownerEndpoint, c.owner)
			}
			rec := httptest.NewRecorder()
			a.AdminHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/debug/sources", nil))
			var dbg struct {
				Conflicts map[string][]string `json:"conflicts"`
				Sources   []struct {
					Name   string `json:"name"`
					Status struct {
						ClaimsLost int `json:"claims_lost"`
					} `json:"status"`
				} `json:"sources"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &dbg); err != nil {
				t.Fatal(err)
			}
			if got, want := dbg.Conflicts["api"], []string{c.owner, c.loser}; !slices.Equal(got, want) {
				t.Errorf("start %d: /debug/sources conflicts[api] = %v, want %v", i, got, want)
			}
			for _, s := range dbg.Sources {
				if want := map[bool]int{true: 1}[s.Name == c.loser]; s.Status.ClaimsLost != want {
					t.Errorf("start %d: /debug/sources %s claims_lost %d, want %d", i, s.Name, s.Status.ClaimsLost, want)
				}
			}
			if err := testutil.GatherAndCompare(a.Registry, strings.NewReader(`
# HELP xdsbridge_source_claims_lost Service names the source publishes that a source ranked before it (priority, then config order) owns.
# TYPE xdsbridge_source_claims_lost gauge
xdsbridge_source_claims_lost{source="`+c.loser+`"} 1
xdsbridge_source_claims_lost{source="`+c.owner+`"} 0
`), "xdsbridge_source_claims_lost"); err != nil {
				t.Errorf("start %d: %v", i, err)
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
