package status

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"
)

const hostileName = `<script>window.pgPwned=1</script>`

func getPage(t *testing.T, p *Page, target string) (string, http.Header) {
	t.Helper()
	rec := httptest.NewRecorder()
	p.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", target, rec.Code, rec.Body)
	}
	b, _ := io.ReadAll(rec.Body)
	return string(b), rec.Header()
}

// Every section renders with no data at all (nil functions) and with
// functions returning nothing.
func TestEmptySections(t *testing.T) {
	empty := &Page{
		Ready:    func() bool { return false },
		Sources:  func() []SourceRow { return nil },
		Services: func() []ServiceRow { return nil },
		Hosts:    func(string) []HostRow { return nil },
		Clients:  func() []ClientRow { return nil },
		Chart:    &Sampler{},
	}
	for name, p := range map[string]*Page{"nil": {}, "empty": empty} {
		body, _ := getPage(t, p, "/")
		for _, want := range []string{
			`id="sources"`, "no sources",
			`id="clients"`, "no clients connected",
			`id="services"`, "no services",
			`id="hosts"`, "no service selected",
			`id="chart"`,
		} {
			if !strings.Contains(body, want) {
				t.Errorf("%s: page lacks %q", name, want)
			}
		}
		frag, _ := getPage(t, p, "/?fragment=1")
		if strings.Contains(frag, "<html") || strings.Contains(frag, "<script") || !strings.HasPrefix(frag, `<main id="live"`) {
			t.Errorf("%s: fragment is not only the live part: %.200s", name, frag)
		}
	}
	body, _ := getPage(t, empty, "/")
	if !strings.Contains(body, "no samples yet") || !strings.Contains(body, "NOT READY") {
		t.Errorf("empty page: no 'no samples yet' or 'NOT READY':\n%s", body)
	}
	if body, _ := getPage(t, empty, "/?service=nope"); !strings.Contains(body, "no such service") {
		t.Errorf("unknown service: no 'no such service'")
	}
}

// Every value that comes from a source or a client is escaped, in text,
// attributes and URLs; the page carries a CSP whose nonce is the one of
// its only script.
func TestEscaping(t *testing.T) {
	h := hostileName
	p := &Page{
		Sources: func() []SourceRow {
			return []SourceRow{{Name: h, Synced: true, LastError: h, LastErrorTime: time.Now()}}
		},
		Services: func() []ServiceRow {
			return []ServiceRow{{Name: h, Source: h, Policy: h, Claimants: []string{h}, Unhealthy: 1}}
		},
		Hosts: func(s string) []HostRow {
			if s != h {
				return nil
			}
			return []HostRow{{Host: h, Source: h, SourceHealth: h, Check: h, Checkers: h, Published: true, Health: h, Rule: h}}
		},
		Clients: func() []ClientRow {
			return []ClientRow{{Node: h, Cluster: h, Mode: h, Types: []TypeRow{{Type: h, State: h, NACKDetail: h}}}}
		},
		Chart: &Sampler{},
	}
	for _, target := range []string{"/?service=" + "%3Cscript%3Ewindow.pgPwned%3D1%3C%2Fscript%3E", "/?fragment=1&service=%3Cscript%3Ewindow.pgPwned%3D1%3C%2Fscript%3E"} {
		body, hdr := getPage(t, p, target)
		if strings.Contains(body, "<script>window") || strings.Contains(body, `"<script`) {
			t.Fatalf("%s: hostile value rendered raw:\n%s", target, body)
		}
		esc := strings.Count(body, "&lt;script&gt;window.pgPwned=1&lt;/script&gt;")
		if esc < 10 {
			t.Errorf("%s: the hostile value shows escaped %d times, want >= 10", target, esc)
		}
		// The service link is URL-escaped.
		if !strings.Contains(body, `href="?service=%3cscript%3ewindow.pgPwned%3d1%3c%2fscript%3e"`) {
			t.Errorf("%s: no URL-escaped service link:\n%s", target, body)
		}
		// The hosts table is the hostile service's (selected by name).
		if !strings.Contains(body, `<tr class="host" data-host="&lt;script&gt;`) {
			t.Errorf("%s: the hostile service's host row is missing", target)
		}
		csp := hdr.Get("Content-Security-Policy")
		m := regexp.MustCompile(`script-src 'nonce-([A-Za-z0-9_-]{16,})'`).FindStringSubmatch(csp)
		if m == nil || !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "connect-src 'self'") {
			t.Fatalf("%s: CSP %q", target, csp)
		}
		if scripts := strings.Count(body, "<script"); strings.Contains(target, "fragment") {
			if scripts != 0 {
				t.Errorf("fragment has %d scripts", scripts)
			}
		} else if scripts != 1 || !strings.Contains(body, `<script nonce="`+m[1]+`">`) {
			t.Errorf("page: %d scripts, or not with the CSP's nonce %s", scripts, m[1])
		}
	}
	// A fresh nonce every time.
	_, h1 := getPage(t, p, "/")
	_, h2 := getPage(t, p, "/")
	if h1.Get("Content-Security-Policy") == h2.Get("Content-Security-Policy") {
		t.Errorf("the nonce is reused")
	}
}

// The host table, client states and counts render where the page's
// readers (and the browser test) look for them.
func TestRows(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	p := &Page{
		Now: func() time.Time { return now },
		Services: func() []ServiceRow {
			return []ServiceRow{{Name: "web", Source: "static", Healthy: 1, Unhealthy: 1}, {Name: "api", Source: "static", Healthy: 2}}
		},
		Hosts: func(s string) []HostRow {
			return []HostRow{{Host: s + "-h1:80", Published: true, Health: "UNHEALTHY", Rule: "discovered, health check failed: don't route (UNHEALTHY)"}}
		},
		Clients: func() []ClientRow {
			return []ClientRow{{Node: "envoy-1", Mode: "delta", Types: []TypeRow{{Type: "cds", State: "SYNCED", Since: now.Add(-3 * time.Second), LatencyP50: 2 * time.Millisecond, LatencyP99: 9 * time.Millisecond, Samples: 4}}}}
		},
	}
	body, _ := getPage(t, p, "/")
	for _, want := range []string{
		// No service given: the first by name.
		`<span id="hosts-service">api</span>`, `data-host="api-h1:80"`,
		`<span class="badge unhealthy">UNHEALTHY</span>`, "discovered, health check failed: don&#39;t route (UNHEALTHY)",
		`<tr class="client" data-node="envoy-1">`, `<span class="badge synced">SYNCED</span>`, "3s ago", "2ms / 9ms",
		`<tr class="service sel" data-name="api">`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	body, _ = getPage(t, p, "/?service=web")
	if !strings.Contains(body, `data-host="web-h1:80"`) || !strings.Contains(body, `<tr class="service sel" data-name="web">`) {
		t.Errorf("?service=web does not select web")
	}
	rec := httptest.NewRecorder()
	p.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d", rec.Code)
	}
}

// The sampler keeps the last Keep intervals of pushes (differences of the
// counter) and latency, and the chart scales them.
func TestSampler(t *testing.T) {
	var total uint64
	var lat time.Duration
	at := time.Unix(1000, 0)
	s := &Sampler{
		Pushes:     func() uint64 { return total },
		LatencyP50: func() (time.Duration, bool) { return lat, lat > 0 },
		Keep:       3,
		Now:        func() time.Time { return at },
	}
	s.Tick() // baseline
	total = 5
	for _, step := range []struct {
		add uint64
		lat time.Duration
	}{{10, 0}, {0, 4 * time.Millisecond}, {20, 8 * time.Millisecond}, {40, 2 * time.Millisecond}} {
		total += step.add
		lat = step.lat
		at = at.Add(10 * time.Second)
		s.Tick()
	}
	got := s.Samples()
	var pushes []uint64
	for _, sm := range got {
		pushes = append(pushes, sm.Pushes)
	}
	// 5 before the first interval's tick counts into it: 5+10, then 0, 20, 40; keep 3.
	if len(got) != 3 || pushes[0] != 0 || pushes[1] != 20 || pushes[2] != 40 {
		t.Fatalf("samples %+v", got)
	}
	cv := s.chart(at)
	if cv.MaxPushes != 40 || cv.TotalPushes != 60 || len(cv.Bars) != 2 || cv.MaxLatency != 8*time.Millisecond || len(cv.Dots) != 3 {
		t.Fatalf("chart %+v", cv)
	}
	if full := cv.Bars[1]; full.H != chartH-chartTop || full.Y != chartTop {
		t.Errorf("the highest bar is %+v, want the full height", full)
	}
	if half := cv.Bars[0]; half.H != float64(chartH-chartTop)/2 {
		t.Errorf("the half bar is %+v", half)
	}
	body, _ := getPage(t, &Page{Chart: s}, "/")
	if n := strings.Count(body, `<rect class="bar"`); n != 2 || !strings.Contains(body, `<polyline class="lat"`) {
		t.Errorf("chart: %d bars, polyline %v", n, strings.Contains(body, "polyline"))
	}
}

// The heading names the build when the page has one, and shows no empty
// element when it has none.
func TestBuildInHeading(t *testing.T) {
	body, _ := getPage(t, &Page{Build: "v0.1.0 (0123456789ab, go1.26.8)"}, "/")
	if !strings.Contains(body, `<span id="build" class="meta">v0.1.0 (0123456789ab, go1.26.8)</span>`) {
		t.Errorf("page lacks the build line:\n%.600s", body)
	}
	if body, _ := getPage(t, &Page{}, "/"); strings.Contains(body, `id="build"`) {
		t.Errorf("page without Build shows a build element")
	}
}
