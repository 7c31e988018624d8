package main

import (
	"bytes"
	"encoding/json"
	"regexp"
	"testing"
	"time"

	"github.com/xdsbridge/xdsbridge/hds"
	"github.com/xdsbridge/xdsbridge/healthcheck"
)

// `status hosts` shows, for a host checked through HDS, which checker
// said what (the summary of /debug/hosts' check_state), its node names
// escaped for the terminal.
func TestStatusHostsNamesHDSCheckers(t *testing.T) {
	st, err := json.Marshal(map[string]any{
		"host": "127.0.0.1:8081", "discovered": true, "source": "static", "source_health": "HEALTHY",
		"check": "healthy", "published": true, "health": "HEALTHY", "rule": string(healthcheck.RuleDiscoveredOK),
		"check_state": hds.TargetState{Verdict: healthcheck.Healthy, Summary: "checker-a healthy, checker-\x1b[31mb unhealthy (not counted)", Checkers: []hds.CheckerReport{
			{Checker: "checker-a#1", Node: "checker-a", Verdict: healthcheck.Healthy, At: time.Now(), Counted: true},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var h map[string]any
	if err := json.Unmarshal(st, &h); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	printHosts(&out, map[string][]map[string]any{"web": {h}})
	want := `(?m)^web +127\.0\.0\.1:8081 +yes +static +HEALTHY +` + regexp.QuoteMeta(`healthy (HDS: checker-a healthy, checker-\x1b[31mb unhealthy (not counted))`) + ` +yes +HEALTHY +`
	if !regexp.MustCompile(want).MatchString(out.String()) {
		t.Errorf("no %q in\n%s", want, out.String())
	}
}
