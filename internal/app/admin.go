package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/xdsbridge/xdsbridge/config"
	"github.com/xdsbridge/xdsbridge/config/decode"
	"github.com/xdsbridge/xdsbridge/sources"
	"github.com/xdsbridge/xdsbridge/xds"
	"github.com/xdsbridge/xdsbridge/xds/store"
)

// AdminHandler serves the status page (/), /healthz (also as /livez),
// /readyz, /metrics and /debug/*. With admin.token_file (a.Token set), the
// status page and every /debug/* handler are wrapped by a.Token.Guard: they
// need Authorization: Bearer <token>; the probes and /metrics stay open.
func (a *App) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	debug := func(pattern string, h http.HandlerFunc) { mux.Handle(pattern, a.Token.Guard(h)) }
	// The status page (status.go), guarded as /debug/* is. "GET /{$}" is
	// / alone: other paths stay 404.
	mux.Handle("GET /{$}", a.Token.Guard(a.StatusPage()))
	// /livez is /healthz under the name Kubernetes' probes use.
	alive := func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) }
	mux.HandleFunc("GET /healthz", alive)
	mux.HandleFunc("GET /livez", alive)
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		body := map[string]any{"ready": a.Loop.Ready(), "sources": a.Loop.Sources()}
		code := http.StatusOK
		if !a.Loop.Ready() {
			code = http.StatusServiceUnavailable
		}
		writeJSON(w, code, body)
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.Registry, promhttp.HandlerOpts{}))
	debug("GET /debug/resources", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		limit := -1
		if l := q.Get("limit"); l != "" {
			n, err := strconv.Atoi(l)
			if err != nil || n < 0 {
				http.Error(w, "limit: want a number >= 0", http.StatusBadRequest)
				return
			}
			limit = n
		}
		if t := q.Get("type"); t != "" && typeAliases[strings.ToLower(t)] == "" {
			http.Error(w, fmt.Sprintf("type: unknown type %q (want %s)", t, acceptedTypes), http.StatusBadRequest)
			return
		}
		lists, truncated := listResources(a.Cache, q.Get("type"), q.Get("name"), limit)
		w.Header().Set("Content-Type", "application/json")
		if truncated {
			w.Header().Set("X-Xdsbridge-Truncated", "true")
		}
		w.WriteHeader(http.StatusOK)
		// A write error (the client went away, the write timeout passed)
		// ends the response; nothing more is encoded.
		_ = streamResources(w, lists)
	})
	debug("GET /debug/sources", func(w http.ResponseWriter, _ *http.Request) {
		out := []map[string]any{}
		status := map[string]any{}
		for _, st := range a.Loop.Sources() {
			status[st.Name] = st
		}
		for _, s := range a.activeSources() {
			e := map[string]any{"name": s.Name(), "status": status[s.Name()]}
			if d, ok := s.(sources.Debugger); ok {
				e["debug"] = d.DebugInfo()
			}
			out = append(out, e)
		}
		writeJSON(w, http.StatusOK, map[string]any{"sources": out, "conflicts": a.Loop.Conflicts(), "diagnostics": a.Loop.Diagnostics(), "config": a.ReloadStatus()})
	})
	// POST /debug/reload reloads the config (reload.go): 200 when
	// applied, 422 when refused (the running config stays).
	debug("POST /debug/reload", func(w http.ResponseWriter, _ *http.Request) {
		res, err := a.Reload()
		if err != nil {
			writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"result": "failure", "error": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, res)
	})
	debug("GET /debug/hosts", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, a.Hosts(r.URL.Query().Get("service")))
	})
	// /debug/clients: every stream and its sync status per type;
	// ?node=N: that client's streams with each resource of interest,
	// current and held (xds.ClientDetail).
	debug("GET /debug/clients", func(w http.ResponseWriter, r *http.Request) {
		if q := r.URL.Query(); q.Has("node") {
			writeJSON(w, http.StatusOK, map[string]any{"node": q.Get("node"), "streams": a.XDS.ClientStatus(q.Get("node")).Streams})
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"clients": a.XDS.ClientStatuses(), "nacks": a.XDS.NACKs()})
	})
	return mux
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

var typeAliases = map[string]string{
	"cds": xds.ClusterType, "clusters": xds.ClusterType,
	"eds": xds.EndpointType, "endpoints": xds.EndpointType,
	"lds": xds.ListenerType, "listeners": xds.ListenerType,
	"rds": xds.RouteType, "routes": xds.RouteType,
}

// acceptedTypes lists the type= values of /debug/resources (any case), for
// its 400 answer: "cds, eds, lds, rds or clusters, endpoints, listeners, routes".
var acceptedTypes = func() string {
	var short, long []string
	for _, t := range resourceTypes {
		short = append(short, t.short)
		for alias, url := range typeAliases {
			if url == t.url && alias != t.short {
				long = append(long, alias)
			}
		}
	}
	slices.Sort(long)
	return strings.Join(short, ", ") + " or " + strings.Join(long, ", ")
}()

// ResourceDump is one served resource as shown by /debug/resources and
// `xdsbridge dump`.
type ResourceDump struct {
	Name     string          `json:"name"`
	Version  string          `json:"version"`
	Bytes    int             `json:"bytes"`
	Resource json.RawMessage `json:"resource"`
}

// resourceTypes are the dumped types by short name, in output order.
var resourceTypes = []struct{ short, url string }{
	{"cds", xds.ClusterType}, {"eds", xds.EndpointType}, {"lds", xds.ListenerType}, {"rds", xds.RouteType},
}

type typeList struct {
	short string
	infos []store.ResourceInfo
}

// listResources selects the resources to dump: by type (a short name or
// alias; empty: every type), by exact name (empty: every name), at most
// limit per type (first by name; negative: no limit). truncated tells
// whether the limit left some out. Nothing is encoded yet.
func listResources(c *xds.Cache, typ, name string, limit int) (out []typeList, truncated bool) {
	for _, t := range resourceTypes {
		if typ != "" && typeAliases[strings.ToLower(typ)] != t.url {
			continue
		}
		var infos []store.ResourceInfo
		for _, ri := range c.List(t.url) {
			if name != "" && ri.Name != name {
				continue
			}
			if limit >= 0 && len(infos) >= limit {
				truncated = true
				break
			}
			infos = append(infos, ri)
		}
		out = append(out, typeList{short: t.short, infos: infos})
	}
	return out, truncated
}

func dumpOf(ri store.ResourceInfo) ResourceDump {
	b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(ri.Msg)
	if err != nil {
		b, _ = json.Marshal(err.Error())
	}
	return ResourceDump{Name: ri.Name, Version: ri.Version, Bytes: ri.Bytes, Resource: b}
}

// streamResources writes the lists as one JSON object, short type name to
// list of ResourceDump (indented as writeJSON does), encoding one resource
// at a time: memory is bounded by the largest resource plus a 32 KiB
// buffer, however many resources there are. It stops at the first write
// error.
func streamResources(w io.Writer, lists []typeList) error {
	var buf bytes.Buffer
	flush := func(force bool) error {
		if buf.Len() < 32<<10 && !force {
			return nil
		}
		_, err := w.Write(buf.Bytes())
		buf.Reset()
		return err
	}
	buf.WriteString("{")
	for i, tl := range lists {
		if i > 0 {
			buf.WriteString(",")
		}
		fmt.Fprintf(&buf, "\n  %q: [", tl.short)
		for j, ri := range tl.infos {
			if j > 0 {
				buf.WriteString(",")
			}
			buf.WriteString("\n    ")
			b, err := json.Marshal(dumpOf(ri))
			if err != nil {
				return err
			}
			if err := json.Indent(&buf, b, "    ", "  "); err != nil {
				return err
			}
			if err := flush(false); err != nil {
				return err
			}
		}
		if len(tl.infos) > 0 {
			buf.WriteString("\n  ")
		}
		buf.WriteString("]")
	}
	if len(lists) > 0 {
		buf.WriteString("\n")
	}
	buf.WriteString("}\n")
	return flush(true)
}

// Resources renders the served resources, by type short name (cds, eds, lds,
// rds), optionally filtered by type and name. It holds the whole dump in
// memory (for `xdsbridge dump`); /debug/resources streams instead.
func Resources(c *xds.Cache, typ, name string) map[string][]ResourceDump {
	out := map[string][]ResourceDump{}
	lists, _ := listResources(c, typ, name, -1)
	for _, tl := range lists {
		list := make([]ResourceDump, 0, len(tl.infos))
		for _, ri := range tl.infos {
			list = append(list, dumpOf(ri))
		}
		out[tl.short] = list
	}
	return out
}

// Admin server defaults (config `admin:`; 0 or absent is the default).
const (
	DefaultAdminReadHeaderTimeout = 5 * time.Second
	DefaultAdminReadTimeout       = 10 * time.Second
	DefaultAdminWriteTimeout      = 30 * time.Second
	DefaultAdminIdleTimeout       = 60 * time.Second
	DefaultAdminShutdownTimeout   = 5 * time.Second
)

// AdminTimeoutSet is the admin server's timeouts with defaults applied.
type AdminTimeoutSet struct {
	ReadHeader, Read, Write, Idle, Shutdown time.Duration
}

// AdminTimeouts applies the defaults to the configured timeouts.
func AdminTimeouts(c config.Admin) AdminTimeoutSet {
	or := func(d decode.Duration, def time.Duration) time.Duration {
		if d <= 0 {
			return def
		}
		return d.D()
	}
	return AdminTimeoutSet{
		ReadHeader: or(c.ReadHeaderTimeout, DefaultAdminReadHeaderTimeout),
		Read:       or(c.ReadTimeout, DefaultAdminReadTimeout),
		Write:      or(c.WriteTimeout, DefaultAdminWriteTimeout),
		Idle:       or(c.IdleTimeout, DefaultAdminIdleTimeout),
		Shutdown:   or(c.ShutdownTimeout, DefaultAdminShutdownTimeout),
	}
}

// NewAdminServer is the admin HTTP server with its timeouts: a client that
// stops reading holds a connection (and what the handler has buffered, a
// few KiB: responses are streamed) for at most the write timeout; an idle
// keep-alive connection is closed after the idle timeout.
func NewAdminServer(c config.Admin, h http.Handler) *http.Server {
	t := AdminTimeouts(c)
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: t.ReadHeader,
		ReadTimeout:       t.Read,
		WriteTimeout:      t.Write,
		IdleTimeout:       t.Idle,
		MaxHeaderBytes:    64 << 10,
	}
}

// ServeAdmin serves srv on lis until ctx is done, then shuts it down: idle
// connections are closed at once, requests in flight get up to grace to
// finish, and whatever is left is then closed. A shutdown is not an error.
func ServeAdmin(ctx context.Context, srv *http.Server, lis net.Listener, grace time.Duration, log *slog.Logger) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }()
	select {
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("admin server: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		if log != nil {
			log.Warn("admin server: requests still in flight after the shutdown timeout; closing their connections", "timeout", grace)
		}
		srv.Close()
	}
	<-errc
	return nil
}
