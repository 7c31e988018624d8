package consul

import (
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/hashicorp/consul/api"

	"github.com/xdsbridge/xdsbridge/config/decode"
	"github.com/xdsbridge/xdsbridge/policy"
)

// Config entries become one policy.File, following Consul's discovery
// chain (router → splitter → resolver) as Consul 1.14's agent/xds builds
// it for Envoy. README.md "Config entries" has the field table; this file
// is that table in code. Pure: no I/O.
//
// What cannot be expressed is a Diagnostic, never a silently different
// route: a field that only tunes (header modifications, idle timeouts,
// mesh-only settings) is left out with a diagnostic and the rest of its
// entry kept; a field that decides where requests go (a target in
// another namespace, partition or peer, nested splitters) makes its entry
// skipped as a whole, with a diagnostic, so that the service keeps
// Consul's behaviour without that entry rather than half of it.

// The config entry kinds the source watches, in the order it lists them.
var entryKinds = []string{api.ServiceDefaults, api.ServiceRouter, api.ServiceSplitter, api.ServiceResolver}

// Diagnostic is one config-entry field (or entry) that the policy does not
// carry.
type Diagnostic struct {
	Kind  string `json:"kind"`
	Name  string `json:"name"`
	Field string `json:"field,omitempty"`
	// Skipped is true when the whole entry was left out; false when only
	// the field was.
	Skipped bool   `json:"skipped"`
	Message string `json:"message"`
}

func (d Diagnostic) String() string {
	what := "ignored"
	if d.Skipped {
		what = "entry skipped"
	}
	f := d.Kind + "/" + d.Name
	if d.Field != "" {
		f += " " + d.Field
	}
	return f + ": " + d.Message + " (" + what + ")"
}

// entrySet is the last good list of each kind, by entry name.
type entrySet struct {
	defaults  map[string]*api.ServiceConfigEntry
	routers   map[string]*api.ServiceRouterConfigEntry
	splitters map[string]*api.ServiceSplitterConfigEntry
	resolvers map[string]*api.ServiceResolverConfigEntry
}

func newEntrySet() entrySet {
	return entrySet{
		defaults:  map[string]*api.ServiceConfigEntry{},
		routers:   map[string]*api.ServiceRouterConfigEntry{},
		splitters: map[string]*api.ServiceSplitterConfigEntry{},
		resolvers: map[string]*api.ServiceResolverConfigEntry{},
	}
}

// set replaces the entries of one kind with a list read from Consul.
// Entries of another type than the kind's are ignored.
func (es *entrySet) set(kind string, list []api.ConfigEntry) {
	switch kind {
	case api.ServiceDefaults:
		es.defaults = map[string]*api.ServiceConfigEntry{}
		for _, e := range list {
			if x, ok := e.(*api.ServiceConfigEntry); ok && x != nil {
				es.defaults[x.Name] = x
			}
		}
	case api.ServiceRouter:
		es.routers = map[string]*api.ServiceRouterConfigEntry{}
		for _, e := range list {
			if x, ok := e.(*api.ServiceRouterConfigEntry); ok && x != nil {
				es.routers[x.Name] = x
			}
		}
	case api.ServiceSplitter:
		es.splitters = map[string]*api.ServiceSplitterConfigEntry{}
		for _, e := range list {
			if x, ok := e.(*api.ServiceSplitterConfigEntry); ok && x != nil {
				es.splitters[x.Name] = x
			}
		}
	case api.ServiceResolver:
		es.resolvers = map[string]*api.ServiceResolverConfigEntry{}
		for _, e := range list {
			if x, ok := e.(*api.ServiceResolverConfigEntry); ok && x != nil {
				es.resolvers[x.Name] = x
			}
		}
	}
}

// naming turns Consul service names (and datacenters) into the names of
// the clusters the source publishes (mapping.cluster_name).
type naming struct {
	template string
	// local is the local datacenter's name ("" while unknown: then only a
	// template without {datacenter} can be expanded).
	local string
	// watched are the datacenters the source watches besides the local
	// one (failover_datacenters).
	watched []string
}

func (n naming) cluster(service string) string { return clusterName(n.template, service, n.local) }

// perDC reports whether each datacenter has clusters of its own.
func (n naming) perDC() bool { return strings.Contains(n.template, "{datacenter}") }

// target names service (its subset) in datacenter dc ("": the local one)
// as the policy does, or says why it cannot.
func (n naming) target(service, subset, dc string) (policy.Target, error) {
	if dc == "" || dc == n.local {
		return policy.Target{Service: n.cluster(service), Subset: subset}, nil
	}
	if !slices.Contains(n.watched, dc) {
		return policy.Target{}, fmt.Errorf("datacenter %q is not watched by this source (list it in failover_datacenters)", dc)
	}
	if n.perDC() {
		// Its own cluster, published by this source.
		return policy.Target{Service: clusterName(n.template, service, dc), Subset: subset}, nil
	}
	// The datacenter's instances are in the service's one cluster, at
	// their failover priority: the translator decides what the
	// datacenter means (README "Config entries").
	return policy.Target{Service: n.cluster(service), Subset: subset, Datacenter: dc}, nil
}

// convertEntries converts the config entries into the policy of every
// service they name, keyed by cluster name, and what it could not carry.
// The File passes its Check.
func convertEntries(es entrySet, n naming) (*policy.File, []Diagnostic) {
	c := &converter{es: es, n: n}
	names := map[string]bool{}
	for k := range es.defaults {
		names[k] = true
	}
	for k := range es.routers {
		names[k] = true
	}
	for k := range es.splitters {
		names[k] = true
	}
	for k := range es.resolvers {
		names[k] = true
	}
	byName := map[string]*parts{}
	for _, name := range sortedNames(names) {
		if n.perDC() && n.local == "" {
			c.diag("", name, "", true, "the local datacenter's name is not known yet: mapping.cluster_name needs it")
			continue
		}
		byName[name] = c.service(name)
	}
	byKey := map[string]string{}
	for name := range byName {
		byKey[n.cluster(name)] = name
	}
	// Build, check, and leave out the part an error points to until the
	// file checks clean: each round drops a part, or a whole service.
	var f *policy.File
	for {
		f = &policy.File{Services: map[string]policy.Service{}}
		for name, p := range byName {
			if s, ok := p.build(); ok {
				f.Services[n.cluster(name)] = s
			}
		}
		errs := f.Check()
		if len(errs) == 0 {
			break
		}
		e := errs[0]
		name, ok := "", false
		if len(e.Path) >= 2 {
			name, ok = byKey[e.Path[1]]
		}
		if !ok { // not a service's error: cannot happen, leave out everything
			for name := range byName {
				c.diag("", name, "", true, "the converted policy is refused: %v", e)
			}
			f.Services = map[string]policy.Service{}
			break
		}
		p := byName[name]
		if kind := p.partOf(e.Path[2:]); p.drop(kind) {
			c.diag(kind, name, "", true, "the converted policy is refused: %v", e)
		} else {
			delete(byName, name)
			c.diag("", name, "", true, "the converted policy is refused: %v; the service's entries are all left out", e)
		}
	}
	sort.SliceStable(c.diags, func(i, j int) bool {
		a, b := c.diags[i], c.diags[j]
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		return a.Name < b.Name
	})
	return f, c.diags
}

func sortedNames(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// parts are the converted pieces of one service's policy, each from one
// entry; nil pieces are absent or skipped.
type parts struct {
	defaults *policy.Service // Protocol
	resolver *policy.Service // cluster settings, subsets, redirect, failover, timeout
	split    []policy.Split
	routes   []policy.Route
	hasSplit bool
	hasRoute bool
}

func (p *parts) build() (policy.Service, bool) {
	var s policy.Service
	any := false
	if p.defaults != nil {
		s.Protocol = p.defaults.Protocol
		any = true
	}
	if r := p.resolver; r != nil {
		proto := s.Protocol
		s = *r
		s.Protocol = proto
		any = true
	}
	if p.hasSplit {
		s.Split = p.split
		any = true
	}
	if p.hasRoute {
		s.Routes = p.routes
		any = true
	}
	// An entry that sets nothing the policy has (service-defaults without
	// a protocol) gives no policy: a policy by name would hide the
	// patterns of other policy sources.
	return s, any && !reflect.DeepEqual(s, policy.Service{})
}

// partOf is the kind of entry a policy field comes from.
func (p *parts) partOf(path []string) string {
	if len(path) == 0 {
		return api.ServiceResolver
	}
	switch path[0] {
	case "protocol":
		return api.ServiceDefaults
	case "routes":
		return api.ServiceRouter
	case "split":
		return api.ServiceSplitter
	}
	return api.ServiceResolver
}

// drop leaves out the part of a kind; false if it was absent already.
func (p *parts) drop(kind string) bool {
	switch kind {
	case api.ServiceDefaults:
		if p.defaults == nil {
			return false
		}
		p.defaults = nil
	case api.ServiceResolver:
		if p.resolver == nil {
			return false
		}
		p.resolver = nil
	case api.ServiceSplitter:
		if !p.hasSplit {
			return false
		}
		p.split, p.hasSplit = nil, false
	case api.ServiceRouter:
		if !p.hasRoute {
			return false
		}
		p.routes, p.hasRoute = nil, false
	}
	return true
}

type converter struct {
	es    entrySet
	n     naming
	diags []Diagnostic
}

func (c *converter) diag(kind, name, field string, skipped bool, format string, args ...any) {
	c.diags = append(c.diags, Diagnostic{Kind: kind, Name: name, Field: field, Skipped: skipped, Message: fmt.Sprintf(format, args...)})
}

// skip is an entry that cannot be converted: why, and the field.
type skip struct{ field, msg string }

func (e *skip) Error() string { return e.field + ": " + e.msg }

func skipf(field, format string, args ...any) *skip {
	return &skip{field: field, msg: fmt.Sprintf(format, args...)}
}

func defaultTenancy(ns, partition string) bool {
	return (ns == "" || ns == "default") && (partition == "" || partition == "default")
}

func (c *converter) service(name string) *parts {
	p := &parts{}
	if e := c.es.defaults[name]; e != nil {
		if s, err := c.defaults(e); err != nil {
			c.diag(api.ServiceDefaults, name, err.field, true, "%s", err.msg)
		} else {
			p.defaults = s
		}
	}
	if e := c.es.resolvers[name]; e != nil {
		if s, err := c.resolver(e); err != nil {
			c.diag(api.ServiceResolver, name, err.field, true, "%s", err.msg)
		} else {
			p.resolver = s
		}
	}
	if e := c.es.splitters[name]; e != nil {
		if splits, err := c.splits(name, e); err != nil {
			c.diag(api.ServiceSplitter, name, err.field, true, "%s", err.msg)
		} else {
			p.split, p.hasSplit = splits, true
		}
	}
	if e := c.es.routers[name]; e != nil {
		if routes, err := c.router(e); err != nil {
			c.diag(api.ServiceRouter, name, err.field, true, "%s", err.msg)
		} else {
			p.routes, p.hasRoute = routes, true
		}
	}
	// Consul 1.14 sets the resolver's request timeout on the default
	// route only when the chain starts at the resolver: with a router or
	// a splitter it bounds nothing.
	if r := c.es.resolvers[name]; r != nil && r.RequestTimeout > 0 && p.resolver != nil && (c.es.routers[name] != nil || c.es.splitters[name] != nil) {
		p.resolver.Timeout = 0
		c.diag(api.ServiceResolver, name, "RequestTimeout", false, "Consul applies it only to a service without a service-router and service-splitter; set RequestTimeout on the router's destinations instead")
	}
	return p
}

// defaults converts a service-defaults entry: its protocol. Everything
// else in it configures the service's own sidecar, gateways or mesh.
func (c *converter) defaults(e *api.ServiceConfigEntry) (*policy.Service, *skip) {
	if !defaultTenancy(e.Namespace, e.Partition) {
		return nil, skipf("Namespace", "namespace %q, partition %q: only the default namespace and partition name a service", e.Namespace, e.Partition)
	}
	s := &policy.Service{}
	switch proto := policy.Protocol(strings.ToLower(e.Protocol)); proto {
	case "", policy.ProtocolTCP, policy.ProtocolHTTP, policy.ProtocolHTTP2, policy.ProtocolGRPC:
		s.Protocol = proto
	default:
		c.diag(e.Kind, e.Name, "Protocol", false, "protocol %q is not tcp, http, http2 or grpc", e.Protocol)
	}
	mesh := []struct {
		field string
		v     any
	}{
		{"Mode", e.Mode}, {"TransparentProxy", e.TransparentProxy}, {"MutualTLSMode", e.MutualTLSMode},
		{"MeshGateway", e.MeshGateway}, {"Expose", e.Expose}, {"ExternalSNI", e.ExternalSNI},
		{"UpstreamConfig", e.UpstreamConfig}, {"Destination", e.Destination},
		{"MaxInboundConnections", e.MaxInboundConnections}, {"LocalConnectTimeoutMs", e.LocalConnectTimeoutMs},
		{"LocalRequestTimeoutMs", e.LocalRequestTimeoutMs}, {"BalanceInboundConnections", e.BalanceInboundConnections},
		{"RateLimits", e.RateLimits}, {"EnvoyExtensions", e.EnvoyExtensions}, {"MaxRequestHeadersKB", e.MaxRequestHeadersKB},
	}
	for _, m := range mesh {
		if isSet(m.v) {
			c.diag(e.Kind, e.Name, m.field, false, "configures Consul's service mesh (sidecars, gateways), not the clients of the service")
		}
	}
	return s, nil
}

// isSet reports whether v (a pointer is followed) is other than its zero
// value; empty slices and maps count as zero (Consul sends some empty
// structures, as TransparentProxy: {}).
func isSet(v any) bool {
	rv := reflect.ValueOf(v)
	for rv.Kind() == reflect.Pointer || rv.Kind() == reflect.Interface {
		if rv.IsNil() {
			return false
		}
		rv = rv.Elem()
	}
	switch rv.Kind() {
	case reflect.Slice, reflect.Map:
		return rv.Len() > 0
	case reflect.Struct:
		for i := 0; i < rv.NumField(); i++ {
			if rv.Type().Field(i).IsExported() && isSet(rv.Field(i).Interface()) {
				return true
			}
		}
		return false
	}
	return rv.IsValid() && !rv.IsZero()
}

// resolver converts a service-resolver entry.
func (c *converter) resolver(e *api.ServiceResolverConfigEntry) (*policy.Service, *skip) {
	if !defaultTenancy(e.Namespace, e.Partition) {
		return nil, skipf("Namespace", "namespace %q, partition %q: only the default namespace and partition name a service", e.Namespace, e.Partition)
	}
	s := &policy.Service{
		ConnectTimeout: decode.Duration(e.ConnectTimeout),
		Timeout:        decode.Duration(e.RequestTimeout),
		DefaultSubset:  e.DefaultSubset,
	}
	if len(e.Subsets) > 0 {
		s.Subsets = make(map[string]policy.Subset, len(e.Subsets))
		for name, sub := range e.Subsets {
			s.Subsets[name] = policy.Subset{Filter: sub.Filter, OnlyPassing: sub.OnlyPassing}
		}
	}
	if r := e.Redirect; r != nil {
		switch {
		case !defaultTenancy(r.Namespace, r.Partition):
			return nil, skipf("Redirect", "to namespace %q, partition %q: only the default namespace and partition name a service", r.Namespace, r.Partition)
		case r.Peer != "":
			return nil, skipf("Redirect.Peer", "cluster peers are not watched")
		case r.SamenessGroup != "":
			return nil, skipf("Redirect.SamenessGroup", "sameness groups are not supported")
		}
		svc := r.Service
		if svc == "" {
			svc = e.Name
		}
		t, err := c.n.target(svc, r.ServiceSubset, r.Datacenter)
		if err != nil {
			return nil, skipf("Redirect.Datacenter", "%v", err)
		}
		// A redirect makes the rest of the resolver moot (Consul ignores
		// it too): the target's own resolver applies.
		if len(e.Subsets) > 0 || e.DefaultSubset != "" || e.ConnectTimeout != 0 || e.RequestTimeout != 0 || e.LoadBalancer != nil || len(e.Failover) > 0 {
			c.diag(e.Kind, e.Name, "Redirect", false, "the other fields of a redirecting resolver are ignored (by Consul too): the target's resolver applies")
		}
		return &policy.Service{Redirect: &t}, nil
	}
	for _, key := range slices.Sorted(maps.Keys(e.Failover)) {
		f := e.Failover[key]
		field := fmt.Sprintf("Failover[%q]", key)
		if key != "*" {
			c.diag(e.Kind, e.Name, field, false, "failover of one subset: the policy has failover for the whole service only (the subset gets the \"*\" failover, if any)")
			continue
		}
		targets, err := c.failover(e.Name, f)
		if err != nil {
			c.diag(e.Kind, e.Name, field+"."+err.field, false, "%s: the failover is left out", err.msg)
			continue
		}
		s.Failover = targets
	}
	if e.PrioritizeByLocality != nil && e.PrioritizeByLocality.Mode != "" && e.PrioritizeByLocality.Mode != "none" {
		c.diag(e.Kind, e.Name, "PrioritizeByLocality", false, "not supported (Consul 1.17+ field)")
	}
	if lb := e.LoadBalancer; lb != nil {
		s.LoadBalancer = c.loadBalancer(e, lb)
	}
	return s, nil
}

// failover converts one failover entry into its ordered targets, as
// Consul's chain compiler: Targets if given, else one target per
// datacenter of Datacenters, else Service/ServiceSubset in the local one.
func (c *converter) failover(name string, f api.ServiceResolverFailover) ([]policy.Target, *skip) {
	switch {
	case f.SamenessGroup != "":
		return nil, skipf("SamenessGroup", "sameness groups are not supported")
	case f.Policy != nil && f.Policy.Mode != "" && f.Policy.Mode != "default":
		return nil, skipf("Policy", "failover policy mode %q is not supported", f.Policy.Mode)
	case f.Namespace != "" && f.Namespace != "default":
		return nil, skipf("Namespace", "namespace %q: only the default namespace names a service", f.Namespace)
	}
	var out []policy.Target
	if len(f.Targets) > 0 {
		for i, t := range f.Targets {
			field := fmt.Sprintf("Targets[%d]", i)
			if !defaultTenancy(t.Namespace, t.Partition) {
				return nil, skipf(field, "namespace %q, partition %q: only the default namespace and partition name a service", t.Namespace, t.Partition)
			}
			if t.Peer != "" {
				return nil, skipf(field+".Peer", "cluster peers are not watched")
			}
			svc := orDefault(t.Service, name)
			pt, err := c.n.target(svc, t.ServiceSubset, t.Datacenter)
			if err != nil {
				return nil, skipf(field+".Datacenter", "%v", err)
			}
			out = append(out, pt)
		}
		return out, nil
	}
	svc := orDefault(f.Service, name)
	if len(f.Datacenters) == 0 {
		if f.Service == "" && f.ServiceSubset == "" {
			return nil, skipf("", "names no service, subset or datacenter")
		}
		t, _ := c.n.target(svc, f.ServiceSubset, "")
		return []policy.Target{t}, nil
	}
	for i, dc := range f.Datacenters {
		t, err := c.n.target(svc, f.ServiceSubset, dc)
		if err != nil {
			return nil, skipf(fmt.Sprintf("Datacenters[%d]", i), "%v", err)
		}
		out = append(out, t)
	}
	return out, nil
}

func (c *converter) loadBalancer(e *api.ServiceResolverConfigEntry, lb *api.LoadBalancer) *policy.LoadBalancer {
	out := &policy.LoadBalancer{Policy: lb.Policy}
	if r := lb.RingHashConfig; r != nil && (r.MinimumRingSize != 0 || r.MaximumRingSize != 0) {
		if lb.Policy == policy.LBRingHash {
			out.RingHash = &policy.RingHash{MinimumRingSize: r.MinimumRingSize, MaximumRingSize: r.MaximumRingSize}
		} else {
			c.diag(e.Kind, e.Name, "LoadBalancer.RingHashConfig", false, "only used by policy ring_hash (policy is %q)", lb.Policy)
		}
	}
	if l := lb.LeastRequestConfig; l != nil && l.ChoiceCount != 0 {
		if lb.Policy == policy.LBLeastRequest {
			out.LeastRequest = &policy.LeastRequest{ChoiceCount: l.ChoiceCount}
		} else {
			c.diag(e.Kind, e.Name, "LoadBalancer.LeastRequestConfig", false, "only used by policy least_request (policy is %q)", lb.Policy)
		}
	}
	for i, h := range lb.HashPolicies {
		field := fmt.Sprintf("LoadBalancer.HashPolicies[%d]", i)
		hp := policy.HashPolicy{Terminal: h.Terminal}
		if h.SourceIP {
			// Consul takes source_ip before the field, as Envoy's one
			// connection-properties policy.
			hp.SourceIP = true
			out.HashPolicies = append(out.HashPolicies, hp)
			continue
		}
		switch h.Field {
		case "header":
			hp.Header = h.FieldValue
		case "query_parameter":
			hp.QueryParameter = h.FieldValue
		case "cookie":
			hp.Cookie = &policy.HashCookie{Name: h.FieldValue}
			if cc := h.CookieConfig; cc != nil {
				hp.Cookie.Path = cc.Path
				hp.Cookie.TTL = decode.Duration(cc.TTL)
				if cc.Session {
					c.diag(e.Kind, e.Name, field+".CookieConfig.Session", false, "session cookies (a TTL of 0 that Envoy sets) cannot be expressed: the cookie is hashed when present, never generated")
					hp.Cookie.TTL = 0
				}
			}
		default:
			c.diag(e.Kind, e.Name, field+".Field", false, "unknown field %q (want header, cookie or query_parameter)", h.Field)
			continue
		}
		out.HashPolicies = append(out.HashPolicies, hp)
	}
	return out
}

// splits converts a splitter of service name: its shares, each to a
// service (default: name itself; for name itself the policy's "") and a
// subset. A share naming another service that has a splitter of its own
// is nested splitting, which the policy's one level cannot express.
func (c *converter) splits(name string, e *api.ServiceSplitterConfigEntry) ([]policy.Split, *skip) {
	if !defaultTenancy(e.Namespace, e.Partition) {
		return nil, skipf("Namespace", "namespace %q, partition %q: only the default namespace and partition name a service", e.Namespace, e.Partition)
	}
	return c.splitsOf(e, name)
}

// splitsOf converts splitter e's shares as seen from service self (the
// service whose route or default route they divide).
func (c *converter) splitsOf(e *api.ServiceSplitterConfigEntry, self string) ([]policy.Split, *skip) {
	out := make([]policy.Split, 0, len(e.Splits))
	for i, sp := range e.Splits {
		field := fmt.Sprintf("Splits[%d]", i)
		if !defaultTenancy(sp.Namespace, sp.Partition) {
			return nil, skipf(field, "namespace %q, partition %q: only the default namespace and partition name a service", sp.Namespace, sp.Partition)
		}
		svc := orDefault(sp.Service, e.Name)
		if svc != e.Name && sp.ServiceSubset == "" && c.es.splitters[svc] != nil {
			return nil, skipf(field+".Service", "service %q has a splitter of its own: nested splitters are not supported", svc)
		}
		if !noHeaderMods(sp.RequestHeaders) || !noHeaderMods(sp.ResponseHeaders) {
			c.diag(e.Kind, e.Name, field+".RequestHeaders/ResponseHeaders", false, "header modifications are not supported")
		}
		out = append(out, policy.Split{
			// Consul's weights are float32 with at most two decimals.
			Weight:  math.Round(float64(sp.Weight)*100) / 100,
			Service: c.selfOr(svc, self),
			Subset:  sp.ServiceSubset,
		})
	}
	return out, nil
}

// selfOr is the policy's name of service svc in the policy of self: ""
// for self, else its cluster.
func (c *converter) selfOr(svc, self string) string {
	if svc == self {
		return ""
	}
	return c.n.cluster(svc)
}

// noHeaderMods reports whether h modifies nothing.
func noHeaderMods(h *api.HTTPHeaderModifiers) bool {
	return h == nil || (len(h.Add) == 0 && len(h.Set) == 0 && len(h.Remove) == 0)
}

// router converts a router's routes.
func (c *converter) router(e *api.ServiceRouterConfigEntry) ([]policy.Route, *skip) {
	if !defaultTenancy(e.Namespace, e.Partition) {
		return nil, skipf("Namespace", "namespace %q, partition %q: only the default namespace and partition name a service", e.Namespace, e.Partition)
	}
	out := make([]policy.Route, 0, len(e.Routes))
	for i, r := range e.Routes {
		route, err := c.route(e, fmt.Sprintf("Routes[%d]", i), r)
		if err != nil {
			return nil, err
		}
		out = append(out, route)
	}
	return out, nil
}

func (c *converter) route(e *api.ServiceRouterConfigEntry, field string, r api.ServiceRoute) (policy.Route, *skip) {
	var out policy.Route
	if r.Match != nil && r.Match.HTTP != nil {
		m := r.Match.HTTP
		out.Match = policy.Match{Path: m.PathExact, Prefix: m.PathPrefix, Regex: m.PathRegex}
		// Consul takes the first of exact, prefix and regex.
		switch {
		case m.PathExact != "":
			out.Match.Prefix, out.Match.Regex = "", ""
		case m.PathPrefix != "":
			out.Match.Regex = ""
		}
		if m.CaseInsensitive {
			if out.Match.Regex != "" {
				out.Match.Regex = "(?i)" + out.Match.Regex
			} else if out.Match.Path != "" || out.Match.Prefix != "" {
				out.Match.CaseInsensitive = true
			}
		}
		if out.Match.Regex != "" {
			if err := policy.RegexError(out.Match.Regex); err != nil {
				return out, skipf(field+".Match.HTTP.PathRegex", "%v", err)
			}
		}
		for j, h := range m.Header {
			hm := policy.HeaderMatch{Name: h.Name, Invert: h.Invert}
			// Consul's order: exact, regex, prefix, suffix, present.
			switch {
			case h.Exact != "":
				hm.Exact = h.Exact
			case h.Regex != "":
				if err := policy.RegexError(h.Regex); err != nil {
					return out, skipf(fmt.Sprintf("%s.Match.HTTP.Header[%d].Regex", field, j), "%v", err)
				}
				hm.Regex = h.Regex
			case h.Prefix != "":
				hm.Prefix = h.Prefix
			case h.Suffix != "":
				hm.Suffix = h.Suffix
			case h.Present:
				hm.Present = true
			default:
				return out, skipf(fmt.Sprintf("%s.Match.HTTP.Header[%d]", field, j), "matches nothing (no Present, Exact, Prefix, Suffix or Regex)")
			}
			out.Match.Headers = append(out.Match.Headers, hm)
		}
		out.Match.Methods = append(out.Match.Methods, m.Methods...)
		for j, q := range m.QueryParam {
			qm := policy.QueryParameterMatch{Name: q.Name}
			switch {
			case q.Exact != "":
				qm.Exact = q.Exact
			case q.Regex != "":
				if err := policy.RegexError(q.Regex); err != nil {
					return out, skipf(fmt.Sprintf("%s.Match.HTTP.QueryParam[%d].Regex", field, j), "%v", err)
				}
				qm.Regex = q.Regex
			case q.Present:
				qm.Present = true
			default:
				return out, skipf(fmt.Sprintf("%s.Match.HTTP.QueryParam[%d]", field, j), "matches nothing (no Present, Exact or Regex)")
			}
			out.Match.QueryParameters = append(out.Match.QueryParameters, qm)
		}
	}
	d := r.Destination
	if d == nil {
		d = &api.ServiceRouteDestination{}
	}
	dfield := field + ".Destination"
	if !defaultTenancy(d.Namespace, d.Partition) {
		return out, skipf(dfield, "namespace %q, partition %q: only the default namespace and partition name a service", d.Namespace, d.Partition)
	}
	svc := orDefault(d.Service, e.Name)
	if sp := c.es.splitters[svc]; sp != nil && d.ServiceSubset == "" {
		// Consul's chain compiler sends the route to the service's
		// splitter: its shares, inlined.
		if !defaultTenancy(sp.Namespace, sp.Partition) {
			return out, skipf(dfield+".Service", "the splitter of %q is in namespace %q, partition %q", svc, sp.Namespace, sp.Partition)
		}
		splits, err := c.splitsOf(sp, e.Name)
		if err != nil {
			return out, skipf(dfield+".Service", "the splitter of %q: %s", svc, err.Error())
		}
		out.Split = splits
	} else {
		t := policy.Target{Service: c.selfOr(svc, e.Name), Subset: d.ServiceSubset}
		if t != (policy.Target{}) {
			out.Destination = &t
		}
	}
	out.PrefixRewrite = d.PrefixRewrite
	out.Timeout = decode.Duration(d.RequestTimeout)
	if d.IdleTimeout != 0 {
		c.diag(e.Kind, e.Name, dfield+".IdleTimeout", false, "not supported")
	}
	if !noHeaderMods(d.RequestHeaders) || !noHeaderMods(d.ResponseHeaders) {
		c.diag(e.Kind, e.Name, dfield+".RequestHeaders/ResponseHeaders", false, "header modifications are not supported")
	}
	out.Retry = c.retry(e, dfield, d)
	return out, nil
}

// retry builds a route's retry policy as Consul's agent/xds does: the
// conditions are RetryOn, then connect-failure for RetryOnConnectFailure
// (once), then retriable-status-codes for RetryOnStatusCodes; NumRetries
// 0 keeps Envoy's default (1).
func (c *converter) retry(e *api.ServiceRouterConfigEntry, field string, d *api.ServiceRouteDestination) *policy.Retry {
	if d.NumRetries == 0 && !d.RetryOnConnectFailure && len(d.RetryOnStatusCodes) == 0 && len(d.RetryOn) == 0 {
		return nil
	}
	on := append([]string(nil), d.RetryOn...)
	if d.RetryOnConnectFailure && !slices.Contains(on, "connect-failure") {
		on = append(on, "connect-failure")
	}
	r := &policy.Retry{}
	if len(d.RetryOnStatusCodes) > 0 {
		on = append(on, "retriable-status-codes")
		r.StatusCodes = append(r.StatusCodes, d.RetryOnStatusCodes...)
	}
	if len(on) == 0 {
		// Envoy retries nothing with an empty retry_on, which is what
		// Consul sends: no retry policy is the same.
		c.diag(e.Kind, e.Name, field+".NumRetries", false, "NumRetries without RetryOn, RetryOnConnectFailure or RetryOnStatusCodes retries nothing (in Consul's Envoy config too)")
		return nil
	}
	r.On = on
	if d.NumRetries > 0 {
		n := d.NumRetries
		r.NumRetries = &n
	}
	return r
}
