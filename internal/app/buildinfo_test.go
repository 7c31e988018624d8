package app

import (
	"fmt"
	"html"
	"net/http"
	"strings"
	"testing"

	"github.com/xdsbridge/xdsbridge/internal/buildinfo"
)

// A running bridge names its build in xdsbridge_build_info and in the
// status page's heading.
func TestBuildInfoMetricAndStatusHeading(t *testing.T) {
	defer func(v string) { buildinfo.Version = v }(buildinfo.Version)
	buildinfo.Version = "v0.0.0-buildinfo-test"
	a := statusApp(t, "")
	base := "http://" + a.AdminAddr()
	in := buildinfo.Get()

	code, _, body := adminGet(t, base+"/metrics", "")
	want := fmt.Sprintf(`xdsbridge_build_info{goversion=%q,revision=%q,version="v0.0.0-buildinfo-test"} 1`, in.GoVersion, in.Commit())
	if code != http.StatusOK || !strings.Contains(body, want+"\n") {
		t.Errorf("GET /metrics: %d, lacks %s", code, want)
	}
	code, _, body = adminGet(t, base+"/", "")
	want = `<span id="build" class="meta">` + html.EscapeString(in.Short()) + `</span>`
	if code != http.StatusOK || !strings.Contains(body, want) || !strings.Contains(want, "v0.0.0-buildinfo-test (") {
		t.Errorf("GET /: %d, lacks %s", code, want)
	}
}
