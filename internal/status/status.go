// Package status serves the admin listener's status page: sources,
// services, one service's hosts with the health-check matrix rule of each,
// xDS clients with their sync status, and a chart of pushes and change →
// ACK latency. It is rendered on the server by html/template (every value
// from a source or a client is escaped by it), uses no external asset, and
// refreshes itself: a small inline script fetches the page's live part as
// a server-rendered fragment every RefreshInterval and swaps it in (it
// never builds HTML from data itself).
//
// The page knows nothing of the bridge: a Page is fed by function fields
// returning view rows, which internal/app fills from the merge loop and the
// xDS server.
package status

import (
	"bytes"
	"crypto/rand"
	"embed"
	"encoding/base64"
	"fmt"
	"html/template"
	"net/http"
	"sort"
	"strings"
	"time"
)

// RefreshInterval is how often the page fetches its live part again.
const RefreshInterval = 2 * time.Second

// SourceRow is one source.
type SourceRow struct {
	Name          string
	Synced, Stale bool
	// ConfirmedAge is the time since the source last read its registry
	// successfully; ChangedAge the time since its content last changed.
	ConfirmedAge  string
	ChangedAge    string
	LastError     string
	LastErrorTime time.Time
	Services      int
	Policies      int
	// Dropped counts the instances the source leaves out, by reason.
	Dropped map[string]int
	// ClaimsLost counts the services the source publishes that another
	// source, ranked before it, owns.
	ClaimsLost int
}

// DroppedRow is one instance of the selected service that its source
// dropped, and why.
type DroppedRow struct {
	Source, Instance, Reason, Detail string
}

// ServiceRow is one service: its endpoints counted by health (published
// ones; Unpublished counts hosts explained but not published), its owning
// source and the policy it gets, if any.
type ServiceRow struct {
	Name        string
	Source      string
	Policy      string
	Healthy     int
	Unhealthy   int
	Draining    int
	Other       int // UNKNOWN, TIMEOUT, DEGRADED
	Unpublished int
	// Claimants are the other sources claiming the service (a conflict).
	Claimants []string
}

// ConfigRow is the config served and its last reload.
type ConfigRow struct {
	// LoadedAt is when the config served was loaded (start or reload).
	LoadedAt time.Time
	// ReloadRefused is set when the last reload was refused: when, and
	// why (the config loaded at LoadedAt stays served).
	ReloadRefused   bool
	LastReload      time.Time
	LastReloadError string
}

// HostRow is one host of a service and why it is (not) published.
type HostRow struct {
	Host         string
	Source       string
	SourceHealth string
	Check        string
	Published    bool
	Health       string
	Rule         string
	// Why is the source's own explanation of its health (the Consul
	// checks that decided it); "" if it gave none.
	Why string
	// Checkers says which HDS checker said what ("" for a host the bridge
	// checks itself).
	Checkers string
}

// ClientRow is one xDS client (a stream, or a node's streams).
type ClientRow struct {
	Node, Cluster, Mode string
	Connected           time.Time
	// Responses and NACKs count the stream's responses and rejections.
	Responses, NACKs uint64
	Types            []TypeRow
}

// TypeRow is a client's status for one resource type.
type TypeRow struct {
	Type  string
	State string // SYNCED, STALE, NACKED, NOT_SENT; UNKNOWN when not known
	// Since is when the type entered State (zero: unknown).
	Since      time.Time
	NACKDetail string
	LatencyP50 time.Duration
	LatencyP99 time.Duration
	Samples    int
}

// Page is the status page's data sources. Any nil function shows an empty
// section.
type Page struct {
	// Title is shown in the heading (default "xdsbridge").
	Title string
	// Build is the running build, shown in the heading
	// (buildinfo.Info.Short); empty: not shown.
	Build    string
	Ready    func() bool
	Sources  func() []SourceRow
	Services func() []ServiceRow
	// Hosts returns the hosts of one service.
	Hosts func(service string) []HostRow
	// Dropped returns the instances of one service its source dropped.
	Dropped func(service string) []DroppedRow
	Clients func() []ClientRow
	// Config returns the state of the config served and of its last
	// reload; nil: not shown.
	Config func() ConfigRow
	// Chart holds the pushes and latency samples; nil: no chart.
	Chart *Sampler
	// Now is the clock (default time.Now).
	Now func() time.Time
}

//go:embed page.html.tmpl
var tmplFS embed.FS

var pageTmpl = template.Must(template.New("page.html.tmpl").Funcs(template.FuncMap{
	"ago":   ago,
	"dur":   durText,
	"lower": strings.ToLower,
}).ParseFS(tmplFS, "page.html.tmpl"))

// view is what the template renders.
type view struct {
	Title    string
	Build    string
	Nonce    string
	Refresh  int // milliseconds
	Ready    bool
	HasReady bool
	Now      time.Time
	Sources  []SourceRow
	Config   *ConfigRow
	Services []ServiceRow
	Selected string
	// Found tells whether Selected is a known service.
	Found   bool
	Hosts   []HostRow
	Dropped []DroppedRow
	Clients []ClientRow
	Chart   *chartView
}

func (p *Page) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

// data gathers the view for a request: service selects the host table
// (empty: the first service by name).
func (p *Page) data(service string) view {
	v := view{Title: p.Title, Build: p.Build, Now: p.now(), Refresh: int(RefreshInterval / time.Millisecond)}
	if v.Title == "" {
		v.Title = "xdsbridge"
	}
	if p.Ready != nil {
		v.HasReady, v.Ready = true, p.Ready()
	}
	if p.Sources != nil {
		v.Sources = p.Sources()
	}
	if p.Config != nil {
		c := p.Config()
		v.Config = &c
	}
	if p.Services != nil {
		v.Services = p.Services()
		sort.Slice(v.Services, func(i, j int) bool { return v.Services[i].Name < v.Services[j].Name })
	}
	v.Selected = service
	if v.Selected == "" && len(v.Services) > 0 {
		v.Selected = v.Services[0].Name
	}
	for _, s := range v.Services {
		if s.Name == v.Selected {
			v.Found = true
		}
	}
	if v.Selected != "" && p.Hosts != nil {
		v.Hosts = p.Hosts(v.Selected)
		if len(v.Hosts) > 0 {
			v.Found = true
		}
	}
	if v.Selected != "" && p.Dropped != nil {
		v.Dropped = p.Dropped(v.Selected)
	}
	if p.Clients != nil {
		v.Clients = p.Clients()
	}
	if p.Chart != nil {
		v.Chart = p.Chart.chart(v.Now)
	}
	return v
}

// ServeHTTP serves the page (GET, HEAD). ?service=NAME selects the
// service whose hosts are shown; ?fragment=1 returns only the live part,
// which the page's script swaps in.
func (p *Page) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	q := r.URL.Query()
	v := p.data(q.Get("service"))
	nonce, err := newNonce()
	if err != nil {
		http.Error(w, "status page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	v.Nonce = nonce
	name := "page"
	if q.Get("fragment") != "" {
		name = "live"
	}
	var buf bytes.Buffer
	if err := pageTmpl.ExecuteTemplate(&buf, name, v); err != nil {
		http.Error(w, "status page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Content-Security-Policy", fmt.Sprintf(
		"default-src 'none'; style-src 'nonce-%[1]s'; script-src 'nonce-%[1]s'; img-src data:; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'", nonce))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(buf.Bytes())
}

func newNonce() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// ago renders how long before now t was ("3s ago"); "" for a zero time.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := now.Sub(t)
	if d < 0 {
		d = 0
	}
	return durText(d.Round(time.Second)) + " ago"
}

// durText renders a duration shortly; "-" for zero.
func durText(d time.Duration) string {
	switch {
	case d == 0:
		return "-"
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(100 * time.Microsecond).String()
	default:
		return d.Round(time.Millisecond).String()
	}
}
