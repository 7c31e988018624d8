package policygate

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"

	"go.yaml.in/yaml/v3"
)

// gen generates policies over the catalog, deterministic for a seed: most
// values plausible, some hostile (at the edges of their range, or of what
// Envoy, grpc-go and RE2 accept), so that most policies get past the
// parser and reach the clients.
type gen struct {
	r *rand.Rand
	// hostile is the chance that a value is picked from the hostile
	// ones, drawn for each policy from hostileRates.
	hostile float64
}

func newGen(seed uint64) *gen { return &gen{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))} }

// hostileRates: a third of the policies plausible only, the others with
// few or many hostile values.
var hostileRates = []float64{0, 0.03, 0.15}

func (g *gen) chance(p float64) bool { return g.r.Float64() < p }

func pick[T any](g *gen, list ...T) T { return list[g.r.IntN(len(list))] }

// val picks a plausible value, or a hostile one at hostileRate.
func val[T any](g *gen, ok []T, hostile []T) T {
	if len(hostile) > 0 && g.chance(g.hostile) {
		return pick(g, hostile...)
	}
	return pick(g, ok...)
}

// next is the i-th case: a policy file two times in three, else Consul
// config entries.
func (g *gen) next(i int) policyCase {
	g.hostile = pick(g, hostileRates...)
	if g.r.IntN(3) == 2 {
		return g.consulCase(i)
	}
	return g.fileCase(i)
}

var (
	ghosts   = []string{"ghost", "a/b", "api/v1", "API", "gatemark2"}
	patterns = []string{"*", "g*", "[ab]*", "?eb", "*i"}
	u32Edges = []any{0, 4294967295, 4294967296, -1}
	durOK    = []string{"1ms", "25ms", "250ms", "1s", "5s", "30s"}
	durBad   = []string{"0s", "1ns", "-1s", "87600h", "1.5ms", "9223372036s"}
)

// service is a catalog service, or (rarely) one nobody publishes.
func (g *gen) service() string {
	return val(g, catalogNames(), ghosts)
}

func (g *gen) duration() string { return val(g, durOK, durBad) }

func (g *gen) regex() string {
	return val(g,
		[]string{"/api/.*", "/v[0-9]+/users", "/x", "/(a|b)/c", "/[^/]+/get", `/\d+`, "/.*/Get", "(?i)/upper/.*"},
		[]string{`/x\x{100}`, `/\x{10FFFF}`, `(?:a+?){33}`, `(?:a+?){45}`, `(?:a*?){60}`, `(a{100}){100}`, `a{1001}`,
			`\C`, `/\pN+`, `/\p{Greek}`, `[[:alpha:]]+`, `\Qa.b\E`, `(?P<n>a)`, `(?<n>a)`, `/\z`, `(?U)a+`, `(?s).*`,
			`[^\x00-\x{10FFFF}]`, `/\8`, `/(`, `/x{2,1}`, "/" + strings.Repeat("a", 3000), `.{1000}`, `((((((((((a))))))))))*`,
			"/\x00", "/é+", `(?m)^/a$`, `\b/a`, `/a**`})
}

func (g *gen) path() string {
	return val(g, []string{"/", "/api", "/grpc.health.v1.Health/", "/v1/", "/a.A/Get", "/static"},
		[]string{"", "api", "/a b", "/\x01", "/%zz", "/" + strings.Repeat("x", 4000), "/é", "/a?b", "/a#b", "//", "/\x7f"})
}

func (g *gen) headerName() string {
	return val(g, []string{"x-tenant", "x-region", "x-id", "x-debug", "user-agent"},
		[]string{"X-Upper", ":authority", ":path", "host", "x bad", "x\x01", "", "grpc-timeout", "te", "content-type",
			"x-" + strings.Repeat("h", 300), ":method", "x_under", "x-é"})
}

func (g *gen) headerValue() string {
	return val(g, []string{"a", "test", "eu-west", "1", "abc"},
		[]string{"", "a\nb", "a\x00", "\x7f", " lead", "trail ", "é", "a\rb", strings.Repeat("v", 5000), "a\tb"})
}

func (g *gen) headerMatch() map[string]any {
	h := map[string]any{"name": g.headerName()}
	switch g.r.IntN(8) {
	case 0:
		h["exact"] = g.headerValue()
	case 1:
		h["prefix"] = g.headerValue()
	case 2:
		h["suffix"] = g.headerValue()
	case 3:
		h["contains"] = g.headerValue()
	case 4:
		h["regex"] = g.regex()
	case 5:
		h["present"] = true
	case 6:
		s := val(g, []int64{0, 1, -5, 100}, []int64{-9223372036854775808, 9223372036854775807})
		h["range"] = map[string]any{"start": s, "end": s + val(g, []int64{1, 10, 1000}, []int64{0, -1})}
	default:
		h["exact"] = g.headerValue()
		if g.chance(g.hostile) {
			h["prefix"] = g.headerValue() // two kinds: refused by the parser
		}
	}
	if g.chance(0.2) {
		h["invert"] = true
	}
	return h
}

func (g *gen) match() map[string]any {
	m := map[string]any{}
	switch g.r.IntN(5) {
	case 0:
		m["prefix"] = g.path()
	case 1:
		m["path"] = g.path()
	case 2:
		m["regex"] = g.regex()
	case 3:
		m["prefix"] = g.path()
		m["case_insensitive"] = true
	}
	if g.chance(0.4) {
		var hs []any
		for range 1 + g.r.IntN(3) {
			hs = append(hs, g.headerMatch())
		}
		m["headers"] = hs
	}
	if g.chance(0.15) {
		m["methods"] = []any{val(g, []string{"GET", "POST", "PUT"}, []string{"get", "FOO", "", "G ET", "CONNECT"})}
	}
	if g.chance(0.15) {
		q := map[string]any{"name": val(g, []string{"q", "page", "debug"}, []string{"", "a b", "\x01"})}
		switch g.r.IntN(3) {
		case 0:
			q["exact"] = g.headerValue()
		case 1:
			q["regex"] = g.regex()
		default:
			q["present"] = true
		}
		m["query_parameters"] = []any{q}
	}
	if g.chance(0.15) {
		m["fraction"] = val(g, []float64{0, 0.0001, 33.3333, 50, 100}, []float64{100.0001, -1, 1e-5, 12.34567})
	}
	return m
}

func (g *gen) splits(subsets []string) []any {
	var out []any
	n := 1 + g.r.IntN(4)
	for range n {
		s := map[string]any{"weight": val(g, []float64{10, 20, 25, 33.33, 50, 90, 100}, []float64{0, 0.01, 1e6, -5, 100.001, 0.001})}
		if g.chance(0.6) {
			s["service"] = g.service()
		}
		if len(subsets) > 0 && g.chance(0.4) {
			s["subset"] = pick(g, subsets...)
		}
		out = append(out, s)
	}
	return out
}

func (g *gen) retry() map[string]any {
	on := []string{"unavailable", "cancelled", "deadline-exceeded", "internal", "resource-exhausted", "5xx", "gateway-error", "reset", "connect-failure", "retriable-4xx", "refused-stream", "retriable-status-codes"}
	var ons []any
	for range 1 + g.r.IntN(3) {
		ons = append(ons, val(g, on, []string{"bogus", "5xx,reset", "", "UNAVAILABLE", "retriable-headers"}))
	}
	r := map[string]any{"retry_on": ons}
	if g.chance(0.2) {
		r["retry_on"] = append(ons, "retriable-status-codes")
		r["status_codes"] = []any{val(g, []any{500, 503, 429}, []any{100, 0, 600, 599, 4294967295})}
	}
	if g.chance(0.6) {
		r["num_retries"] = val(g, []any{1, 2, 3, 5, 10}, append([]any{100, 101}, u32Edges...))
	}
	if g.chance(0.4) {
		// An interval each, as often as not plausible together (max
		// at least base).
		i := g.r.IntN(len(durOK))
		r["base_interval"] = val(g, durOK[i:i+1], durBad)
		if g.chance(0.5) {
			r["max_interval"] = val(g, durOK[i:], durBad)
		}
	} else if g.chance(0.2) {
		r["max_interval"] = g.duration()
	}
	if g.chance(0.2) {
		r["per_try_timeout"] = g.duration()
	}
	return r
}

func (g *gen) target(self string, subsets []string) map[string]any {
	t := map[string]any{}
	if !g.chance(g.hostile) {
		t["service"] = val(g, append(catalogNames(), self), ghosts)
	}
	if len(subsets) > 0 && g.chance(0.4) {
		t["subset"] = pick(g, subsets...)
	} else if g.chance(0.05) {
		t["subset"] = "nope"
	}
	if g.chance(0.05) {
		t["datacenter"] = pick(g, "dc2", "", "dc1")
	}
	return t
}

func (g *gen) subsetNames() []string {
	if !g.chance(0.5) {
		return nil
	}
	var out []string
	seen := map[string]bool{}
	for range 1 + g.r.IntN(3) {
		n := val(g, []string{"v1", "v2", "v3", "canary", "stable"}, []string{"", "a/b", "V1", "x y", "a:b", strings.Repeat("s", 200), "*"})
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}

func (g *gen) filter() string {
	return val(g, []string{`Metadata.app.version == "1"`, `Metadata.app.version == "2"`, `Metadata.app.version != "1"`, `Metadata.app.version == "3"`, ""},
		[]string{`Metadata.app.version ==`, `Service.Tags contains "x"`, `Nope.field == "1"`, `Metadata.app.version == "9"`, "(", `Metadata.app.version matches "["`})
}

func (g *gen) serviceKey() string {
	if g.chance(0.1) {
		return pick(g, patterns...)
	}
	if g.chance(0.03) {
		return pick(g, ghosts...)
	}
	return pick(g, catalogNames()...)
}

// filePolicy is a random service policy of a policy file.
func (g *gen) filePolicy(self string) map[string]any {
	s := map[string]any{}
	if g.chance(0.3) {
		s["protocol"] = val(g, []string{"tcp", "http", "http2", "grpc"}, []string{"", "HTTP", "udp"})
	}
	if g.chance(0.15) {
		s["connect_timeout"] = g.duration()
	}
	if g.chance(0.25) {
		policy := val(g, []string{"round_robin", "least_request", "ring_hash", "maglev", "random"}, []string{"", "bogus"})
		lb := map[string]any{"policy": policy}
		// Each policy's settings, and now and then another's.
		if g.chance(0.5) && (policy == "least_request" || g.chance(g.hostile)) {
			lb["least_request"] = map[string]any{"choice_count": val(g, []any{2, 3, 10}, u32Edges)}
		}
		if g.chance(0.5) && (policy == "ring_hash" || g.chance(g.hostile)) {
			lb["ring_hash"] = map[string]any{
				"minimum_ring_size": val(g, []any{1024, 4096}, []any{0, 1, 8388608, 8388609, uint64(1) << 63}),
				"maximum_ring_size": val(g, []any{8192, 65536}, []any{0, 1, 8388608, 8388609, uint64(1) << 63}),
			}
		}
		if g.chance(0.7) && (policy == "ring_hash" || policy == "maglev" || g.chance(g.hostile)) {
			var hps []any
			for range 1 + g.r.IntN(3) {
				hp := map[string]any{}
				switch g.r.IntN(4) {
				case 0:
					hp["header"] = g.headerName()
				case 1:
					c := map[string]any{"name": val(g, []string{"session", "id"}, []string{"", "a b", "a;b", "\x01"})}
					if g.chance(0.5) {
						c["ttl"] = val(g, []string{"1s", "10s", "1h"}, durBad)
					}
					if g.chance(0.3) {
						c["path"] = g.path()
					}
					hp["cookie"] = c
				case 2:
					hp["source_ip"] = true
				default:
					hp["query_parameter"] = val(g, []string{"user", "id"}, []string{"", "a b"})
				}
				if g.chance(0.3) {
					hp["terminal"] = true
				}
				hps = append(hps, hp)
			}
			lb["hash_policies"] = hps
		}
		s["load_balancer"] = lb
	}
	if g.chance(0.2) {
		cb := map[string]any{}
		for _, f := range []string{"max_connections", "max_pending_requests", "max_requests", "max_retries"} {
			if g.chance(0.5) {
				cb[f] = val(g, []any{1, 100, 1024}, u32Edges)
			}
		}
		s["circuit_breakers"] = cb
	}
	if g.chance(0.2) {
		od := map[string]any{}
		for _, f := range []string{"consecutive_5xx", "consecutive_gateway_failure", "max_ejection_percent", "enforcing_consecutive_5xx"} {
			if g.chance(0.4) {
				od[f] = val(g, []any{1, 5, 10, 50, 100}, append([]any{101, 1000}, u32Edges...))
			}
		}
		for _, f := range []string{"interval", "base_ejection_time", "max_ejection_time"} {
			if g.chance(0.5) {
				od[f] = val(g, []string{"1s", "10s", "30s", "60s", "300s"}, durBad)
			}
		}
		s["outlier_detection"] = od
	}
	if g.chance(0.05) {
		s["tls"] = map[string]any{"sni": val(g, []string{"api.internal", self + ".svc"}, []string{"", "a b", strings.Repeat("n", 300), "\x01"})}
	}
	subsets := g.subsetNames()
	if len(subsets) > 0 {
		m := map[string]any{}
		for _, n := range subsets {
			sub := map[string]any{}
			if f := g.filter(); f != "" {
				sub["filter"] = f
			}
			if g.chance(0.2) {
				sub["only_passing"] = true
			}
			m[n] = sub
		}
		s["subsets"] = m
		if g.chance(0.3) {
			s["default_subset"] = val(g, subsets, []string{"nope"})
		}
	}
	if g.chance(0.08) {
		s["redirect"] = g.target(self, subsets)
		if !g.chance(g.hostile) {
			delete(s, "default_subset") // a redirect takes its target's
		}
	}
	if g.chance(0.2) && (s["redirect"] == nil || g.chance(g.hostile)) {
		var fo []any
		for range 1 + g.r.IntN(3) {
			fo = append(fo, g.target(self, subsets))
		}
		s["failover"] = fo
	}
	if g.chance(0.15) {
		var ds []any
		for range 1 + g.r.IntN(3) {
			ds = append(ds, val(g, []string{self + ".example.com", "*." + self + ".internal", self + ".*", "*"}, []string{"", "a*b", "API.EXAMPLE.COM", "x:80", "[::1]", "*.*", "a b"}))
		}
		s["domains"] = ds
	}
	if g.chance(0.5) {
		var rs []any
		for range 1 + g.r.IntN(4) {
			r := map[string]any{"match": g.match()}
			if g.chance(0.25) {
				r["split"] = g.splits(subsets)
			} else if g.chance(0.8) {
				r["destination"] = g.target(self, subsets)
			}
			if g.chance(0.1) {
				r["prefix_rewrite"] = val(g, []string{"/", "/v2/", "/x"}, []string{"", "a", "/a\nb", "/\x00", "/a b"})
			}
			if g.chance(0.15) {
				r["timeout"] = g.duration()
			}
			if g.chance(0.2) {
				r["retry"] = g.retry()
			}
			rs = append(rs, r)
		}
		s["routes"] = rs
	}
	if g.chance(0.2) {
		s["split"] = g.splits(subsets)
	}
	if g.chance(0.15) {
		s["timeout"] = g.duration()
	}
	if g.chance(0.2) {
		s["retry"] = g.retry()
	}
	return s
}

func (g *gen) fileCase(i int) policyCase {
	svcs := map[string]any{}
	for range 1 + g.r.IntN(3) {
		k := g.serviceKey()
		svcs[k] = g.filePolicy(k)
	}
	b, err := yaml.Marshal(map[string]any{"services": svcs})
	if err != nil {
		panic(err)
	}
	return policyCase{Name: fmt.Sprintf("gen-%d.yaml", i), Body: b}
}

// consulCase is Consul config entries for a few catalog services.
func (g *gen) consulCase(i int) policyCase {
	var entries []any
	for range 1 + g.r.IntN(3) {
		name := val(g, catalogNames(), ghosts)
		var subsets []string
		if g.chance(0.5) {
			e := map[string]any{"Kind": "service-defaults", "Name": name, "Protocol": val(g, []string{"http", "grpc", "http2", "tcp"}, []string{"", "udp"})}
			entries = append(entries, e)
		}
		if g.chance(0.6) {
			e := map[string]any{"Kind": "service-resolver", "Name": name}
			subsets = g.subsetNames()
			if len(subsets) > 0 {
				m := map[string]any{}
				for _, n := range subsets {
					m[n] = map[string]any{"Filter": g.filter(), "OnlyPassing": g.chance(0.2)}
				}
				e["Subsets"] = m
				if g.chance(0.3) {
					e["DefaultSubset"] = val(g, subsets, []string{"nope"})
				}
			}
			if g.chance(0.1) {
				e["Redirect"] = consulTarget(g.target(name, subsets), false)
			}
			if g.chance(0.3) {
				fo := map[string]any{}
				keys := append([]string{"*"}, subsets...)
				for range 1 + g.r.IntN(2) {
					t := g.target(name, subsets)
					if g.chance(0.3) {
						fo[pick(g, keys...)] = map[string]any{"Targets": []any{consulTarget(t, true), consulTarget(g.target(name, subsets), true)}}
					} else {
						fo[pick(g, keys...)] = consulTarget(t, false)
					}
				}
				e["Failover"] = fo
			}
			if g.chance(0.2) {
				e["ConnectTimeout"] = g.duration()
			}
			if g.chance(0.2) {
				e["RequestTimeout"] = g.duration()
			}
			if g.chance(0.25) {
				lb := map[string]any{"Policy": val(g, []string{"round_robin", "least_request", "ring_hash", "maglev", "random"}, []string{"", "bogus"})}
				if g.chance(0.4) {
					lb["RingHashConfig"] = map[string]any{"MinimumRingSize": val(g, []any{1024}, []any{0, 8388609}), "MaximumRingSize": val(g, []any{8192}, []any{0, 1, 8388609})}
				}
				if g.chance(0.3) {
					lb["LeastRequestConfig"] = map[string]any{"ChoiceCount": val(g, []any{2, 5}, u32Edges[:2])}
				}
				if g.chance(0.5) {
					hp := map[string]any{}
					switch g.r.IntN(4) {
					case 0:
						hp["Field"], hp["FieldValue"] = "header", g.headerName()
					case 1:
						hp["Field"], hp["FieldValue"] = "cookie", val(g, []string{"session"}, []string{"", "a b"})
						hp["CookieConfig"] = map[string]any{"TTL": g.duration(), "Path": g.path()}
					case 2:
						hp["SourceIP"] = true
					default:
						hp["Field"], hp["FieldValue"] = "query_parameter", "user"
					}
					hp["Terminal"] = g.chance(0.3)
					lb["HashPolicies"] = []any{hp}
				}
				e["LoadBalancer"] = lb
			}
			entries = append(entries, e)
		}
		if g.chance(0.4) {
			var splits []any
			for _, s := range g.splits(subsets) {
				m := s.(map[string]any)
				c := map[string]any{"Weight": m["weight"]}
				if v, ok := m["service"]; ok {
					c["Service"] = v
				}
				if v, ok := m["subset"]; ok {
					c["ServiceSubset"] = v
				}
				splits = append(splits, c)
			}
			entries = append(entries, map[string]any{"Kind": "service-splitter", "Name": name, "Splits": splits})
		}
		if g.chance(0.5) {
			var routes []any
			for range 1 + g.r.IntN(3) {
				routes = append(routes, g.consulRoute(name, subsets))
			}
			entries = append(entries, map[string]any{"Kind": "service-router", "Name": name, "Routes": routes})
		}
	}
	b, err := json.MarshalIndent(entries, "", "  ")
	if err != nil {
		panic(err)
	}
	return policyCase{Name: fmt.Sprintf("gen-%d.consul.json", i), Consul: true, Body: b}
}

// consulTarget is a policy target as a Consul resolver target (Redirect,
// Failover, an item of Failover Targets). An item of Targets names a
// service (api if the target has none).
func consulTarget(t map[string]any, inTargets bool) map[string]any {
	c := map[string]any{}
	if v, ok := t["service"]; ok {
		c["Service"] = v
	}
	if v, ok := t["subset"]; ok {
		c["ServiceSubset"] = v
	}
	if v, ok := t["datacenter"]; ok {
		c["Datacenter"] = v
	}
	if inTargets && c["Service"] == nil {
		c["Service"] = "api"
	}
	return c
}

func (g *gen) consulRoute(self string, subsets []string) map[string]any {
	m := map[string]any{}
	switch g.r.IntN(4) {
	case 0:
		m["PathExact"] = g.path()
	case 1:
		m["PathPrefix"] = g.path()
	case 2:
		m["PathRegex"] = g.regex()
	}
	if g.chance(0.2) {
		m["CaseInsensitive"] = true
	}
	if g.chance(0.4) {
		h := g.headerMatch()
		c := map[string]any{"Name": h["name"]}
		for k, v := range map[string]string{"exact": "Exact", "prefix": "Prefix", "suffix": "Suffix", "regex": "Regex", "present": "Present", "invert": "Invert"} {
			if x, ok := h[k]; ok {
				c[v] = x
			}
		}
		m["Header"] = []any{c}
	}
	if g.chance(0.15) {
		m["QueryParam"] = []any{map[string]any{"Name": "q", "Exact": g.headerValue()}}
	}
	if g.chance(0.1) {
		m["Methods"] = []any{val(g, []string{"GET", "POST"}, []string{"get", "", "FOO"})}
	}
	d := map[string]any{}
	if g.chance(0.7) {
		d["Service"] = val(g, append(catalogNames(), self), ghosts)
	}
	if len(subsets) > 0 && g.chance(0.4) {
		d["ServiceSubset"] = pick(g, subsets...)
	}
	if g.chance(0.1) {
		d["PrefixRewrite"] = val(g, []string{"/", "/v2/"}, []string{"a", "/a\nb"})
	}
	if g.chance(0.2) {
		d["RequestTimeout"] = g.duration()
	}
	if g.chance(0.3) {
		d["NumRetries"] = val(g, []any{1, 3}, u32Edges[:2])
		d["RetryOnConnectFailure"] = g.chance(0.5)
		d["RetryOn"] = []any{val(g, []string{"5xx", "reset", "gateway-error", "unavailable", "cancelled"}, []string{"bogus", ""})}
		if g.chance(0.3) {
			d["RetryOnStatusCodes"] = []any{val(g, []any{503}, []any{0, 600})}
		}
	}
	return map[string]any{"Match": map[string]any{"HTTP": m}, "Destination": d}
}
