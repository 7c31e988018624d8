// Package sources defines what a discovery source is and what it publishes.
//
// Data flows one way:
//
//	source.Run ──Publish/Fail──▶ bridge.Loop (one goroutine owns the state)
//	                               │ merge with health checks (healthcheck)
//	                               ▼
//	                           translate (pure) ──▶ xds cache ──▶ Envoy / gRPC clients
//
// A source owns a set of service names. Each time that set or anything in it
// changes, the source publishes the full set again (Publish). When it cannot
// refresh (its registry is down, a file fails to parse), it reports the error
// (Fail) and publishes nothing: the bridge keeps serving the last good set.
//
// Each service's endpoints are published in normal form (Normalize):
// canonical addresses, each host once, sorted. That is the one sort and
// de-duplication of a host list between a source and the translator; the
// merge and translation rely on it.
package sources

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xdsbridge/xdsbridge/policy"
)

// HealthStatus is the health of one endpoint as a source (or the merge) sees it.
// Its values map one to one onto Envoy's core.v3.HealthStatus.
type HealthStatus int

const (
	HealthUnknown HealthStatus = iota
	HealthHealthy
	HealthUnhealthy
	HealthDraining
	HealthTimeout
	HealthDegraded
)

var healthNames = [...]string{"UNKNOWN", "HEALTHY", "UNHEALTHY", "DRAINING", "TIMEOUT", "DEGRADED"}

func (h HealthStatus) String() string {
	if h >= 0 && int(h) < len(healthNames) {
		return healthNames[h]
	}
	return fmt.Sprintf("HealthStatus(%d)", int(h))
}

// MarshalText writes the Envoy name of the status (HEALTHY, DRAINING, ...).
func (h HealthStatus) MarshalText() ([]byte, error) { return []byte(h.String()), nil }

// UnmarshalText accepts the Envoy names, case-insensitively.
func (h *HealthStatus) UnmarshalText(b []byte) error {
	v, err := ParseHealth(string(b))
	if err != nil {
		return err
	}
	*h = v
	return nil
}

// ParseHealth parses an Envoy health status name (case-insensitive). The
// empty string is UNKNOWN.
func ParseHealth(s string) (HealthStatus, error) {
	if s == "" {
		return HealthUnknown, nil
	}
	for i, n := range healthNames {
		if strings.EqualFold(s, n) {
			return HealthStatus(i), nil
		}
	}
	return HealthUnknown, fmt.Errorf("unknown health status %q (want one of %s)", s, strings.Join(healthNames[:], ", "))
}

// Locality is where an endpoint runs, as Envoy's core.v3.Locality.
type Locality struct {
	Region  string `json:"region,omitempty"`
	Zone    string `json:"zone,omitempty"`
	SubZone string `json:"sub_zone,omitempty"`
}

// Metadata is endpoint metadata as Envoy's filter_metadata: namespace → key →
// value. Values must be JSON values (string, float64, bool, nil, []any,
// map[string]any); sources are responsible for that.
type Metadata map[string]map[string]any

// Endpoint is one host of a service.
type Endpoint struct {
	// Address is an IP literal. Sources resolve names before publishing.
	Address string `json:"address"`
	Port    uint32 `json:"port"`
	// Hostname is optional; Envoy uses it for auto host rewrite and logs.
	Hostname string `json:"hostname,omitempty"`
	// Weight is the load-balancing weight; 0 means unset (Envoy's default, 1).
	Weight   uint32       `json:"weight,omitempty"`
	Priority uint32       `json:"priority,omitempty"`
	Locality Locality     `json:"locality"`
	Health   HealthStatus `json:"health"`
	Metadata Metadata     `json:"metadata,omitempty"`
}

// Key identifies an endpoint within a service: its address and port.
func (e Endpoint) Key() HostKey { return HostKey{Address: e.Address, Port: e.Port} }

// HostKey is an address:port pair.
type HostKey struct {
	Address string
	Port    uint32
}

func (k HostKey) String() string {
	if a, err := netip.ParseAddr(k.Address); err == nil {
		return netip.AddrPortFrom(a, uint16(k.Port)).String()
	}
	return fmt.Sprintf("%s:%d", k.Address, k.Port)
}

// Service is one named service: it becomes four Envoy resources of its
// name (a Cluster, its ClusterLoadAssignment, and the Listener and
// RouteConfiguration of gRPC clients), plus those of its policy's subsets
// (translate.Resources).
type Service struct {
	Name      string     `json:"name"`
	Endpoints []Endpoint `json:"endpoints"`
}

// Update is the full set of services a source owns, replacing what it
// published before. A service the source published before and leaves out is
// removed. Each service's endpoints are in normal form (Normalize: canonical
// addresses, each host once, sorted). Neither the source nor the receiver
// modifies the slice, or a service's Endpoints, after Publish: a source
// may hand over an unchanged service's Endpoints slice (and its last list)
// again, and the receiver takes a service with the same Endpoints slice as
// it had for unchanged without reading it (the Consul source does both).
type Update struct {
	Source   string
	Services []Service
	// Incomplete: a part of the source's registry is failing (a DNS name,
	// a Consul watch) as it publishes: what it publishes for that part is
	// its last answer, or nothing if it never had one. Such a publish
	// does not confirm the source's state (a stale mark stays), and a
	// reloaded instance does not replace the one serving with it.
	Incomplete bool
	// Delta, when set, tells what differs from the source's previous
	// update, so that the receiver need not compare every service. It
	// describes Services; it never replaces them.
	Delta *Delta
}

// Delta is what differs between an update and the update of the same
// source it follows (Base). Every service of the update not in Changed
// is in Base, the same value (the same Endpoints slice), and every name
// of Base not in Removed is in the update. Changed and Removed may hold
// more than what differs (a service that changed and changed back), never
// less. A receiver whose last update of the source is not Base (it has
// none, it dropped one, another instance of the source published since)
// ignores the delta and compares every service; so does one given a
// Delta with an empty Base.
type Delta struct {
	// Base is the Services of the update this one follows.
	Base []Service
	// Changed are the services of the update that may differ from Base
	// or be new, each name once, as they are in Services.
	Changed []Service
	// Removed are names that may be in Base and are not in Services.
	Removed []string
}

// Follows reports whether the delta is relative to last, the Services of
// the receiver's last update of the source: the same list, compared by
// identity (the same array and length), not by value.
func (d *Delta) Follows(last []Service) bool {
	return d != nil && len(d.Base) > 0 && len(d.Base) == len(last) && &d.Base[0] == &last[0]
}

// PolicyUpdate is the whole traffic policy a policy source holds,
// replacing what it published before. The receiver owns it after
// PublishPolicy: the source must not modify it.
type PolicyUpdate struct {
	Source string
	// Policy gives services their policy by name or name pattern. It has
	// passed its Check.
	Policy *policy.File
}

// Sink receives what sources publish. Implementations are safe for concurrent
// use by several sources.
type Sink interface {
	// Publish replaces the source's full set of services. It blocks until the
	// update is accepted or ctx is done. Every service's endpoints must be
	// in normal form: the source passes them through Normalize, the one
	// sort and de-duplication of a host list, and the sink (the merge, then
	// translation) relies on it.
	Publish(ctx context.Context, u Update) error
	// PublishPolicy replaces a policy source's whole policy. It blocks
	// until the update is accepted or ctx is done.
	PublishPolicy(ctx context.Context, u PolicyUpdate) error
	// Fail reports that the source could not refresh. What it published last
	// stays served ("fail static"); the error shows in readiness and metrics.
	Fail(ctx context.Context, source string, err error)
}

// Source is one pluggable discovery source.
type Source interface {
	// Name is the configured name of this source instance.
	Name() string
	// Run watches the registry and publishes to sink until ctx is done. It
	// returns nil on cancellation and an error only for failures it cannot
	// recover from; transient errors go to sink.Fail and Run keeps trying.
	Run(ctx context.Context, sink Sink) error
}

// PolicyPublisher is implemented by discovery sources that can publish a
// policy besides their services (the Consul source with config_entries).
// When PublishesPolicy reports true, the bridge counts the source synced
// only once it has published both, so that clients never see its services
// before their policy, nor the other way round. One change of both is
// handed over as PublishPolicy, then Publish: the bridge holds the policy
// back for the services that follow it, so both go out together.
type PolicyPublisher interface {
	PublishesPolicy() bool
}

// StaticClaimer is implemented by sources that know the service names they
// own before they run (from their config or file). The bridge lists the
// conflicts among those claims at start (StaticConflicts) and validate
// reports them.
type StaticClaimer interface {
	ClaimedNames() ([]string, error)
}

// StaticPolicyNamer is implemented by policy sources that know, before
// they run, the service names they give a policy by name (a policy file).
// Of two policy sources naming one service, the one listed first gives it
// its policy; validate reports those names.
type StaticPolicyNamer interface {
	PolicyNames() ([]string, error)
}

// Debugger is implemented by sources with state worth showing on the admin
// debug endpoint. DebugInfo must be safe to call concurrently with Run and
// returns a value that encodes as JSON; it must never contain secrets.
type Debugger interface {
	DebugInfo() any
}

// Env is what a source constructor gets besides its own config.
type Env struct {
	// BaseDir is the directory of the config file; relative paths in a
	// source's config are relative to it.
	BaseDir string
	Logger  *slog.Logger
	// Metrics is where a source registers its own collectors, if any.
	// Collectors must carry a "source" label or constant label with the
	// source name, since several instances of one type may run.
	Metrics prometheus.Registerer
}

// Factory builds a source from its config block (raw JSON, unknown fields are
// errors). Factories do no I/O beyond reading files named in the config and
// start no goroutines.
type Factory func(name string, raw json.RawMessage, env Env) (Source, error)

// Clone returns a deep copy of the service.
func (s Service) Clone() Service {
	out := Service{Name: s.Name, Endpoints: make([]Endpoint, len(s.Endpoints))}
	for i, e := range s.Endpoints {
		out.Endpoints[i] = e.Clone()
	}
	return out
}

// Clone returns a deep copy of the endpoint.
func (e Endpoint) Clone() Endpoint {
	if e.Metadata != nil {
		m := make(Metadata, len(e.Metadata))
		for ns, kv := range e.Metadata {
			c := make(map[string]any, len(kv))
			for k, v := range kv {
				c[k] = v
			}
			m[ns] = c
		}
		e.Metadata = m
	}
	return e
}

// CompareEndpoints orders endpoints by priority, locality (region, zone,
// sub-zone), address and port: the order of the normal form and the one
// translation emits them in.
func CompareEndpoints(a, b Endpoint) int {
	return cmp.Or(
		cmp.Compare(a.Priority, b.Priority),
		cmp.Compare(a.Locality.Region, b.Locality.Region),
		cmp.Compare(a.Locality.Zone, b.Locality.Zone),
		cmp.Compare(a.Locality.SubZone, b.Locality.SubZone),
		cmp.Compare(a.Address, b.Address),
		cmp.Compare(a.Port, b.Port),
	)
}

// SortEndpoints sorts endpoints by CompareEndpoints, stably.
func SortEndpoints(eps []Endpoint) {
	slices.SortStableFunc(eps, CompareEndpoints)
}

// Normalize puts a service's endpoints in the normal form every source
// publishes (see Sink.Publish): each IP address in its canonical spelling
// (lower case, zeros compressed, IPv4-mapped IPv6 unmapped), one endpoint
// per address and port (the first in input order kept, whatever its
// priority or locality), sorted by CompareEndpoints. It reuses eps's
// array. An address that is not an IP is left as it is (ValidateEndpoint
// and translation refuse it). This is the one place a host list is sorted
// and de-duplicated on its way from a source to the translator: the merge
// and translation rely on it.
func Normalize(eps []Endpoint) []Endpoint {
	seen := make(map[HostKey]bool, len(eps))
	out := eps[:0]
	for _, e := range eps {
		if a, err := netip.ParseAddr(e.Address); err == nil {
			e.Address = a.Unmap().String()
		}
		if seen[e.Key()] {
			continue
		}
		seen[e.Key()] = true
		out = append(out, e)
	}
	clear(eps[len(out):]) // no stale copies (and their metadata) past the end
	SortEndpoints(out)
	return out
}

// CheckNormal reports how eps departs from the normal form (Normalize),
// or nil if it does not.
func CheckNormal(eps []Endpoint) error {
	seen := make(map[HostKey]bool, len(eps))
	for i, e := range eps {
		if a, err := netip.ParseAddr(e.Address); err == nil && a.Unmap().String() != e.Address {
			return fmt.Errorf("endpoints[%d]: address %q is not in its canonical form %q", i, e.Address, a.Unmap().String())
		}
		if seen[e.Key()] {
			return fmt.Errorf("endpoints[%d]: %s is listed twice", i, e.Key())
		}
		seen[e.Key()] = true
		if i > 0 && CompareEndpoints(eps[i-1], e) > 0 {
			return fmt.Errorf("endpoints[%d]: %s is out of order (after %s)", i, e.Key(), eps[i-1].Key())
		}
	}
	return nil
}

// ValidateEndpoint checks the fields every source must get right: an IP
// address and a port in range. field names the endpoint in the error, e.g.
// `services.web.endpoints[2]`.
func ValidateEndpoint(field string, e Endpoint) error {
	if e.Address == "" {
		return fmt.Errorf("%s.address: missing", field)
	}
	if _, err := netip.ParseAddr(e.Address); err != nil {
		return fmt.Errorf("%s.address: %q is not an IP address (names belong to the dns source)", field, e.Address)
	}
	if e.Port == 0 || e.Port > 65535 {
		return fmt.Errorf("%s.port: %d is not in 1..65535", field, e.Port)
	}
	return nil
}

// DerivedNameSeparator is what the names the bridge derives from a
// service name join it to the rest with: a subset's cluster and
// assignment are "<service>/<subset>" (translate.SubsetCluster). No
// service name may hold it (ValidateServiceName), so the names derived
// from services and the names of services are disjoint by construction:
// whatever a registry lets one register, it cannot take over a subset's
// cluster (and its share of the traffic). The other resources of a
// service (its listener and route configuration for gRPC clients) are
// named exactly as the service.
const DerivedNameSeparator = "/"

// ValidateServiceName checks a service (cluster) name: 1 to 255 bytes, no
// whitespace or control characters, and no DerivedNameSeparator. Every
// source applies it, and the merge loop refuses, with a diagnostic, a
// service of any source whose name fails it.
func ValidateServiceName(field, name string) error {
	if name == "" {
		return fmt.Errorf("%s: empty service name", field)
	}
	if len(name) > 255 {
		return fmt.Errorf("%s: service name longer than 255 bytes", field)
	}
	for _, r := range name {
		if r <= ' ' || r == 0x7f {
			return fmt.Errorf("%s: service name %q contains whitespace or control characters", field, name)
		}
	}
	if strings.Contains(name, DerivedNameSeparator) {
		return fmt.Errorf("%s: service name %q contains %q, which only the names the bridge derives hold (a subset's cluster is <service>/<subset>); a service must not be able to take one over", field, name, DerivedNameSeparator)
	}
	return nil
}
