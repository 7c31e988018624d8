package translate

import (
	"errors"
	"fmt"
	"net/netip"
	"path"
	"slices"
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xdsbridge/xdsbridge/sources"
)

// The egress route table: one RouteConfiguration for Envoys, with a
// virtual host per published service, so that an Envoy reaches every
// service of the registry by name (Host, or :authority for gRPC).
//
// A service's virtual host is the one of its own RouteConfiguration (the
// routes its policy gives proxyless gRPC clients: matches, splits,
// retries, timeouts, hash policies; see route.go), with the domains
//
//	NAME, NAME:*, then for each suffix S: NAME+S, NAME+S:*,
//	then the policy's own domains,
//
// (Envoy compares the whole Host header, port included, with a domain: a
// Host with a port matches NAME only through the prefix wildcard NAME:*).
// Envoy rejects the whole RouteConfiguration when two virtual hosts share
// a domain (compared without case): a domain already taken is left out of
// a virtual host with a Diagnostic. Every service's name (and NAME:*)
// comes first, then the suffixed names, then the policies' domains, each
// rank in name order; "*" is the catch-all's.
//
// The last virtual host, domain "*", takes every other Host: a 404 whose
// body says no service has that host name, or, with a fallback, a route to the
// fallback cluster. A request for a service not in the table never
// reaches another service.

// Egress configures the egress route table and listener. The JSON names
// are the config file's (`egress:` block). Zero fields are defaults
// (WithDefaults).
type Egress struct {
	// RouteConfigName names the RouteConfiguration (default
	// DefaultEgressName). It must not be a service's name.
	RouteConfigName string `json:"route_config_name"`
	// Listener, when set, is an Envoy listener on Address:Port with an
	// HTTP connection manager (HTTP/1.1 and HTTP/2, gRPC included) whose
	// routes are the table, over RDS on ADS. Absent: the table alone is
	// served, for an Envoy's own listener to name.
	Listener *EgressListener `json:"listener"`
	// DomainSuffixes are appended to each service name as more domains of
	// its virtual host (default [".service.consul"]; [] for none). Each
	// starts with a dot.
	DomainSuffixes []string `json:"domain_suffixes"`
	// Include selects the services of the table (default: all).
	Include EgressInclude `json:"include"`
	// Fallback names a cluster the requests for an unknown host go to;
	// empty (default): they get a 404.
	Fallback string `json:"fallback"`
	// VHDS serves the table to delta xDS clients through virtual host
	// discovery (egress_vhds.go): the route configuration they receive
	// holds no virtual host, and each service's virtual host is a
	// VirtualHost resource Envoy fetches when a request first names it.
	// Clients over state of the world receive the whole table.
	VHDS bool `json:"vhds"`
}

// EgressListener is where the egress listener listens.
type EgressListener struct {
	// Name of the Listener resource (default DefaultEgressName). It must
	// not be a service's name.
	Name string `json:"name"`
	// Address is an IP address (default 127.0.0.1).
	Address string `json:"address"`
	// Port, in 1..65535, is required.
	Port uint32 `json:"port"`
}

// EgressInclude selects the services of the egress table. A service is
// in it when every non-empty list has a match: its owning source is one
// of Sources, one of its hosts has one of Tags, its name matches one of
// Names (path.Match patterns: *, ?, [a-z]). All empty: every service.
type EgressInclude struct {
	Sources []string `json:"sources"`
	// Tags match an endpoint metadata key "tag.TAG" set to true, or TAG in
	// a "tags" list, in any namespace (the Consul source's mapping).
	Tags  []string `json:"tags"`
	Names []string `json:"names"`
}

// Defaults of Egress.
const (
	// DefaultEgressName names the egress RouteConfiguration and Listener.
	DefaultEgressName            = "xdsbridge:egress"
	DefaultEgressListenerAddress = "127.0.0.1"
)

// DefaultEgressDomainSuffixes are the domain suffixes of a table that
// does not set them: Consul's DNS form NAME.service.consul.
var DefaultEgressDomainSuffixes = []string{".service.consul"}

// WithDefaults returns e with its zero fields set to their defaults.
func (e Egress) WithDefaults() Egress {
	if e.RouteConfigName == "" {
		e.RouteConfigName = DefaultEgressName
	}
	if e.DomainSuffixes == nil {
		e.DomainSuffixes = slices.Clone(DefaultEgressDomainSuffixes)
	}
	if e.Listener != nil {
		l := *e.Listener
		if l.Name == "" {
			l.Name = DefaultEgressName
		}
		if l.Address == "" {
			l.Address = DefaultEgressListenerAddress
		}
		e.Listener = &l
	}
	return e
}

// Check reports the first field out of its range, naming it (relative
// to the egress block).
func (e Egress) Check() error {
	if err := checkEgressName("route_config_name", e.RouteConfigName); err != nil {
		return err
	}
	for i, s := range e.DomainSuffixes {
		if !strings.HasPrefix(s, ".") || len(s) < 2 || strings.ContainsAny(s, "*: \t\r\n") {
			return fmt.Errorf("domain_suffixes[%d]: %q is not a domain suffix: a dot, then a domain without '*', ':' or whitespace (e.g. \".service.consul\")", i, s)
		}
	}
	for i, p := range e.Include.Names {
		if _, err := path.Match(p, ""); err != nil {
			return fmt.Errorf("include.names[%d]: %q is not a name pattern (*, ?, [a-z]): %v", i, p, err)
		}
	}
	for _, l := range []struct {
		field string
		list  []string
	}{{"include.sources", e.Include.Sources}, {"include.tags", e.Include.Tags}} {
		for i, s := range l.list {
			if s == "" {
				return fmt.Errorf("%s[%d]: empty", l.field, i)
			}
		}
	}
	if e.Fallback != "" && e.VHDS {
		return errors.New("fallback: not available with vhds: true (Envoy fetches a virtual host only for a request no virtual host matches, and a fallback would match them all); unknown hosts get Envoy's 404")
	}
	if e.Fallback != "" {
		if err := checkEgressName("fallback", e.Fallback); err != nil {
			return err
		}
	}
	if l := e.Listener; l != nil {
		if err := checkEgressName("listener.name", l.Name); err != nil {
			return err
		}
		if _, err := netip.ParseAddr(l.Address); err != nil {
			return fmt.Errorf("listener.address: %q is not an IP address", l.Address)
		}
		if l.Port == 0 || l.Port > 65535 {
			return fmt.Errorf("listener.port: %d is not in 1..65535 (required)", l.Port)
		}
	}
	return nil
}

func checkEgressName(field, name string) error {
	if name == "" {
		return fmt.Errorf("%s: empty", field)
	}
	if strings.IndexFunc(name, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0 {
		return fmt.Errorf("%s: %q contains whitespace or control characters", field, name)
	}
	return nil
}

// EgressService is one published service as the egress table sees it.
type EgressService struct {
	Name string
	// Source is the source that owns the service.
	Source string
	// Tags are its hosts' tags (EgressInclude.Tags).
	Tags []string
	// Route is the service's own RouteConfiguration (Resources.Route):
	// its first virtual host is the service's in the table. Nil: one
	// route to the service's cluster.
	Route *route.RouteConfiguration
}

// Includes reports whether the table holds s.
func (e Egress) Includes(s EgressService) bool {
	in := e.Include
	if len(in.Sources) > 0 && !slices.Contains(in.Sources, s.Source) {
		return false
	}
	if len(in.Tags) > 0 && !slices.ContainsFunc(in.Tags, func(t string) bool { return slices.Contains(s.Tags, t) }) {
		return false
	}
	if len(in.Names) > 0 && !slices.ContainsFunc(in.Names, func(p string) bool { m, _ := path.Match(p, s.Name); return m }) {
		return false
	}
	return true
}

// EgressCatchAllName names the catch-all virtual host (followed by as
// many "-" as it takes to be no service's name).
const EgressCatchAllName = "xdsbridge-unknown-host"

// EgressNotFoundBody is the start of the body of the catch-all's 404.
const EgressNotFoundBody = "xdsbridge: no service is published under this host name (egress route table "

// RouteTable builds the egress RouteConfiguration of services (the
// included ones, in name order; e has its defaults) and the Diagnostics
// of the domains left out. The services are not modified.
func (e Egress) RouteTable(services []EgressService) (*route.RouteConfiguration, []Diagnostic) {
	services = slices.Clone(services)
	slices.SortFunc(services, func(a, b EgressService) int { return strings.Compare(a.Name, b.Name) })
	rc := &route.RouteConfiguration{Name: e.RouteConfigName}
	// Domains by rank: every service's name first, then the suffixed
	// names, then the policies' domains; within a rank, in name order.
	var entries []egressEntry
	for _, s := range services {
		if !e.Includes(s) {
			continue
		}
		var vh *route.VirtualHost
		if vhs := s.Route.GetVirtualHosts(); len(vhs) > 0 {
			vh = proto.Clone(vhs[0]).(*route.VirtualHost)
		} else {
			vh = RouteConfig(s.Name).VirtualHosts[0]
		}
		vh.Name = s.Name
		var en egressEntry
		en.ranks[0] = []string{s.Name, s.Name + ":*"}
		en.bases = []string{s.Name}
		for _, suf := range e.DomainSuffixes {
			en.ranks[1] = append(en.ranks[1], s.Name+suf, s.Name+suf+":*")
			en.bases = append(en.bases, s.Name+suf)
		}
		// The policy's domains follow the service's name in its own
		// virtual host.
		if len(vh.Domains) > 1 {
			en.ranks[2] = vh.Domains[1:]
		}
		vh.Domains = nil
		en.vh = vh
		entries = append(entries, en)
	}
	taken := map[string]string{"*": "the catch-all virtual host"} // lower-cased domain → service
	var diags []Diagnostic
	for rank := range 3 {
		for _, en := range entries {
			for _, d := range en.ranks[rank] {
				k := strings.ToLower(d)
				if by, ok := taken[k]; ok {
					diags = append(diags, Diagnostic{en.vh.Name, "egress.domains", fmt.Sprintf("%q is already a domain of %s; left out of this service's virtual host", d, by)})
					continue
				}
				if rank == 2 {
					if by, host := wildcardTakes(k, entries, en.vh.Name); by != "" {
						diags = append(diags, Diagnostic{en.vh.Name, "egress.domains", fmt.Sprintf("%q would take the requests for %s (Host %s), as Envoy matches it before %s's own domains; left out of this service's virtual host", d, by, host, by)})
						continue
					}
				}
				taken[k] = en.vh.Name
				en.vh.Domains = append(en.vh.Domains, d)
			}
		}
	}
	for _, en := range entries {
		if len(en.vh.Domains) > 0 {
			rc.VirtualHosts = append(rc.VirtualHosts, en.vh)
		}
	}
	all := e.catchAll()
	// Virtual host names are unique in a table: no service's name.
	for slices.ContainsFunc(rc.VirtualHosts, func(vh *route.VirtualHost) bool { return vh.Name == all.Name }) {
		all.Name += "-"
	}
	rc.VirtualHosts = append(rc.VirtualHosts, all)
	return rc, diags
}

// egressEntry is a service's virtual host in the table being built, with
// its domains by rank.
type egressEntry struct {
	vh    *route.VirtualHost
	ranks [3][]string
	bases []string // the names a Host names it by, before a port
}

// wildcardTakes reports the first other service of entries (and a Host
// naming it) whose requests the domain d (lower-cased) of a policy would
// take in the table: Envoy matches a Host with a port ("api:8080")
// exactly first, then by suffix wildcards, then by the longest prefix
// wildcard, so "api:8080", "*:8080", "*0" or "api:8*" beat api's own
// "api:*". ("", "") when none.
func wildcardTakes(d string, entries []egressEntry, self string) (string, string) {
	digits := func(s string) bool {
		return s != "" && strings.Trim(s, "0123456789") == ""
	}
	for _, en := range entries {
		if en.vh.Name == self {
			continue
		}
		for _, b := range en.bases {
			b = strings.ToLower(b)
			switch {
			case d == "*":
			case strings.HasPrefix(d, "*"):
				s := d[1:]
				if i := strings.LastIndexByte(s, ':'); i >= 0 {
					if t := s[:i]; digits(s[i+1:]) && len(t) < len(b) && strings.HasSuffix(b, t) {
						return en.vh.Name, b + s[i:]
					}
				} else if digits(s) {
					return en.vh.Name, b + ":" + s
				}
			case strings.HasSuffix(d, "*"):
				p := d[:len(d)-1]
				if len(p) > len(b)+1 && strings.HasPrefix(p, b+":") && digits(p[len(b)+1:]) {
					return en.vh.Name, p
				}
			default:
				// An exact host with a port beats the service's own NAME:*.
				if rest, ok := strings.CutPrefix(d, b+":"); ok && digits(rest) {
					return en.vh.Name, d
				}
			}
		}
	}
	return "", ""
}

// catchAll is the last virtual host: unknown hosts get a 404 naming the
// problem, or go to the fallback cluster.
func (e Egress) catchAll() *route.VirtualHost {
	r := &route.Route{Match: &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}}}
	if e.Fallback != "" {
		r.Action = &route.Route_Route{Route: &route.RouteAction{ClusterSpecifier: &route.RouteAction_Cluster{Cluster: e.Fallback}}}
	} else {
		body := EgressNotFoundBody + e.RouteConfigName + "); check the Host header or :authority, and the egress include filters\n"
		r.Action = &route.Route_DirectResponse{DirectResponse: &route.DirectResponseAction{
			Status: 404,
			Body:   &core.DataSource{Specifier: &core.DataSource_InlineString{InlineString: body}},
		}}
	}
	return &route.VirtualHost{Name: EgressCatchAllName, Domains: []string{"*"}, Routes: []*route.Route{r}}
}

// EgressListener is the egress Listener of e (e.Listener must be set):
// an HTTP connection manager on its address and port, HTTP/1.1 and
// HTTP/2 alike (codec AUTO), routed by the egress table over RDS on ADS.
func (e Egress) EgressListener() (*listener.Listener, error) {
	l := e.Listener
	if l == nil {
		return nil, errors.New("egress: no listener configured")
	}
	m := rdsManager("egress", e.RouteConfigName)
	m.CodecType = hcm.HttpConnectionManager_AUTO
	if e.VHDS {
		if err := e.addOnDemand(m); err != nil {
			return nil, err
		}
	}
	a, err := anypb.New(m)
	if err != nil {
		return nil, err
	}
	return &listener.Listener{
		Name: l.Name,
		Address: &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
			Address:       l.Address,
			PortSpecifier: &core.SocketAddress_PortValue{PortValue: l.Port},
		}}},
		FilterChains: []*listener.FilterChain{{
			Filters: []*listener.Filter{{
				Name:       "envoy.filters.network.http_connection_manager",
				ConfigType: &listener.Filter_TypedConfig{TypedConfig: a},
			}},
		}},
	}, nil
}

// EgressTags are the tags of a service's hosts as EgressInclude.Tags
// reads them: metadata keys "tag.TAG" set to true and the strings of
// "tags" lists, in any namespace; sorted, each once.
func EgressTags(s sources.Service) []string {
	var out []string
	for _, e := range s.Endpoints {
		for _, ns := range e.Metadata {
			for k, v := range ns {
				if t, ok := strings.CutPrefix(k, "tag."); ok && v == true {
					out = append(out, t)
				}
				if k == "tags" {
					if l, ok := v.([]any); ok {
						for _, x := range l {
							if s, ok := x.(string); ok {
								out = append(out, s)
							}
						}
					}
				}
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
