package app

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/xdsbridge/xdsbridge/sources"
	"github.com/xdsbridge/xdsbridge/xds"
)

// AdminHandler serves /healthz, /readyz, /metrics and /debug/*.
func (a *App) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		body := map[string]any{"ready": a.Loop.Ready(), "sources": a.Loop.Sources()}
		code := http.StatusOK
		if !a.Loop.Ready() {
			code = http.StatusServiceUnavailable
		}
		writeJSON(w, code, body)
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /debug/resources", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, Resources(a.Cache, r.URL.Query().Get("type"), r.URL.Query().Get("name")))
	})
	mux.HandleFunc("GET /debug/sources", func(w http.ResponseWriter, _ *http.Request) {
		out := []map[string]any{}
		status := map[string]any{}
		for _, st := range a.Loop.Sources() {
			status[st.Name] = st
		}
		for _, s := range a.Sources {
			e := map[string]any{"name": s.Name(), "status": status[s.Name()]}
			if d, ok := s.(sources.Debugger); ok {
				e["debug"] = d.DebugInfo()
			}
			out = append(out, e)
		}
		writeJSON(w, http.StatusOK, map[string]any{"sources": out, "conflicts": a.Loop.Conflicts(), "diagnostics": a.Loop.Diagnostics()})
	})
	mux.HandleFunc("GET /debug/hosts", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, a.Loop.Hosts(r.URL.Query().Get("service")))
	})
	mux.HandleFunc("GET /debug/clients", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"clients": a.XDS.Clients(), "nacks": a.XDS.NACKs()})
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

// ResourceDump is one served resource as shown by /debug/resources and
// `xdsbridge dump`.
type ResourceDump struct {
	Name     string          `json:"name"`
	Version  string          `json:"version"`
	Bytes    int             `json:"bytes"`
	Resource json.RawMessage `json:"resource"`
}

// Resources renders the served resources, by type short name (cds, eds, lds,
// rds), optionally filtered by type and name.
func Resources(c *xds.Cache, typ, name string) map[string][]ResourceDump {
	out := map[string][]ResourceDump{}
	for short, url := range map[string]string{"cds": xds.ClusterType, "eds": xds.EndpointType, "lds": xds.ListenerType, "rds": xds.RouteType} {
		if typ != "" && typeAliases[strings.ToLower(typ)] != url {
			continue
		}
		list := []ResourceDump{}
		for _, ri := range c.List(url) {
			if name != "" && ri.Name != name {
				continue
			}
			b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(ri.Msg)
			if err != nil {
				b, _ = json.Marshal(err.Error())
			}
			list = append(list, ResourceDump{Name: ri.Name, Version: ri.Version, Bytes: ri.Bytes, Resource: b})
		}
		out[short] = list
	}
	return out
}
