// Package translate turns services into Envoy xDS resources.
//
// It is pure: no I/O, no locks, no logging. Output is deterministic (sorted)
// and every resource passes the Envoy protos' own Validate(). Translation
// never fails as a whole: input a resource cannot carry is dropped from that
// resource and reported as a Diagnostic.
package translate

import (
	"fmt"
	"math"
	"net/netip"
	"slices"
	"sort"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/xdsbridge/xdsbridge/policy"
	"github.com/xdsbridge/xdsbridge/sources"
)

// Diagnostic is something in the input that could not be translated.
type Diagnostic struct {
	Service string `json:"service"`
	Field   string `json:"field"`
	Message string `json:"message"`
}

func (d Diagnostic) String() string { return fmt.Sprintf("%s: %s: %s", d.Service, d.Field, d.Message) }

// Resources are the xDS resources of one service.
type Resources struct {
	Cluster *cluster.Cluster
	Load    *endpoint.ClusterLoadAssignment
	// Listener and Route serve proxyless gRPC clients resolving
	// xds:///<service> (see grpc.go); Envoys with static listeners never ask.
	Listener *listener.Listener
	Route    *route.RouteConfiguration
	// Subsets are the clusters of the service's policy subsets, sorted by
	// name: each an EDS cluster named SubsetCluster(service, subset) with
	// its own assignment.
	Subsets []SubsetResources
}

// IsZero reports whether r holds no resource (a refused service's).
func (r Resources) IsZero() bool {
	return r.Cluster == nil && r.Load == nil && r.Listener == nil && r.Route == nil && len(r.Subsets) == 0
}

// SubsetResources are the resources of one subset of a service.
type SubsetResources struct {
	Cluster *cluster.Cluster
	Load    *endpoint.ClusterLoadAssignment
}

// SubsetCluster is the name of the cluster (and assignment) of a subset:
// the service's name, sources.DerivedNameSeparator ("/"), the subset's.
// No service name holds the separator (sources.ValidateServiceName, which
// every source and the merge loop apply), so no service of any source can
// be named like a subset's cluster.
func SubsetCluster(service, subset string) string { return service + "/" + subset }

// DefaultConnectTimeout is the connect timeout of generated clusters.
const DefaultConnectTimeout = 5 * time.Second

// Options configure a translation. The zero value is the default.
type Options struct {
	// DefaultLocality is the locality of endpoints that have none (region,
	// zone and sub_zone all empty). Endpoints with any of them set keep
	// theirs as it is: fields are not filled in one by one. The zero value
	// publishes such endpoints under an empty Locality, which Envoy treats
	// as no locality at all.
	DefaultLocality sources.Locality
	// Policy is the service's traffic policy (cluster settings, subsets,
	// routes); nil is the default policy. It must pass its Check. The
	// translation does not modify it.
	Policy *policy.Service
	// GRPCCertificateProvider names the certificate provider instance
	// (certificate_providers in grpc-go's bootstrap) whose CA bundle gRPC
	// clients verify upstream TLS hosts with. Empty: a cluster with TLS
	// is NACKed by gRPC clients (POLICY.md). Envoys ignore it.
	GRPCCertificateProvider string
	// Failover are the policy's failover targets, in its order, resolved
	// by the merge loop: their hosts follow the service's own in its
	// assignments, at lower priorities.
	Failover []FailoverTarget
	// Targets are the policies of the other services the policy's routes,
	// splits and redirect name (nil: the default policy), resolved by the
	// merge loop; a service not in the map is taken as it is.
	Targets map[string]*policy.Service
	// Absent are the services the policy's routes, splits, redirect and
	// failover name (and the failover targets of those) that no source
	// publishes, sorted: black holes (blackhole.go). Nil: none.
	Absent []string
}

// FailoverTarget is one failover target of a service's policy.
type FailoverTarget struct {
	Target policy.Target
	// Service is the target service as merged; nil when it is not
	// published (or the target is a datacenter): it adds no host.
	Service *sources.Service
	// Policy is the target service's policy, whose Subsets hold the
	// target's subset; nil without a subset.
	Policy *policy.Service
}

// Service translates one service with the default Options.
func Service(s sources.Service) (Resources, []Diagnostic) { return Options{}.Service(s) }

// Service translates one service into its Cluster, ClusterLoadAssignment,
// and the Listener and RouteConfiguration gRPC clients start from, within
// DefaultLimits (see ServiceWithin; a refused service has no resources).
// The service is not modified.
func (o Options) Service(s sources.Service) (Resources, []Diagnostic) {
	r := o.ServiceWithin(s, DefaultLimits())
	return r.Resources, r.Diagnostics
}

// Cluster is the EDS cluster for a service: its endpoints come over ADS.
func Cluster(name string) *cluster.Cluster {
	return &cluster.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &cluster.Cluster_Type{Type: cluster.Cluster_EDS},
		EdsClusterConfig: &cluster.Cluster_EdsClusterConfig{
			EdsConfig: &core.ConfigSource{
				ResourceApiVersion:    core.ApiVersion_V3,
				ConfigSourceSpecifier: &core.ConfigSource_Ads{Ads: &core.AggregatedConfigSource{}},
			},
		},
		ConnectTimeout: durationpb.New(DefaultConnectTimeout),
		LbPolicy:       cluster.Cluster_ROUND_ROBIN,
	}
}

type groupKey struct {
	priority uint32
	locality sources.Locality
}

// LoadAssignment builds a ClusterLoadAssignment with the default Options.
func LoadAssignment(s sources.Service) (*endpoint.ClusterLoadAssignment, []Diagnostic) {
	return Options{}.LoadAssignment(s)
}

// LoadAssignment builds the ClusterLoadAssignment of a service: endpoints
// grouped by priority and locality, sorted. A service with no endpoints gets
// an empty assignment, so a cluster never waits in warming.
//
// Every group carries a Locality message, empty if need be: gRPC clients
// reject an assignment with a group that has none ("EDS response contains
// a locality without ID"), while Envoy reads an absent and an empty
// Locality alike.
func (o Options) LoadAssignment(s sources.Service) (*endpoint.ClusterLoadAssignment, []Diagnostic) {
	var diags []Diagnostic
	// Drop invalid and duplicate endpoints in input order, so "first kept"
	// means the first in the input whatever its priority or locality.
	// Duplicates are compared on the parsed address, IPv4-mapped IPv6
	// unmapped, so 2001:db8::1 and 2001:DB8:0::1 are the same host, and so
	// are 127.0.0.1 and ::ffff:127.0.0.1; the canonical form is published.
	eps := make([]sources.Endpoint, 0, len(s.Endpoints))
	seen := make(map[netip.AddrPort]bool, len(s.Endpoints))
	for _, e := range s.Endpoints {
		field := fmt.Sprintf("endpoints[%s]", e.Key())
		a, err := netip.ParseAddr(e.Address)
		if err != nil || e.Port == 0 || e.Port > 65535 {
			diags = append(diags, Diagnostic{s.Name, field, "address must be an IP and port in 1..65535; endpoint dropped"})
			continue
		}
		a = a.Unmap()
		k := netip.AddrPortFrom(a, uint16(e.Port))
		if seen[k] {
			// Named by the canonical form: the same whichever spelling came first.
			diags = append(diags, Diagnostic{s.Name, fmt.Sprintf("endpoints[%s]", k), "duplicate address and port; first kept"})
			continue
		}
		seen[k] = true
		e.Address = a.String() // e is a copy; the input is not modified
		if e.Locality == (sources.Locality{}) {
			e.Locality = o.DefaultLocality // e is a copy; the input is not modified
		}
		eps = append(eps, e)
	}
	// From the bridge, the endpoints are in normal form (sources.Normalize)
	// and stay sorted unless the default locality moved some; other
	// callers may pass them in any order.
	if !slices.IsSortedFunc(eps, sources.CompareEndpoints) {
		sources.SortEndpoints(eps)
	}

	cla := &endpoint.ClusterLoadAssignment{ClusterName: s.Name}
	var cur *endpoint.LocalityLbEndpoints
	var curKey groupKey
	for _, e := range eps {
		field := fmt.Sprintf("endpoints[%s]", e.Key())
		lb, ds := lbEndpoint(e)
		for _, d := range ds {
			diags = append(diags, Diagnostic{s.Name, field + d.field, d.msg})
		}
		k := groupKey{e.Priority, e.Locality}
		if cur == nil || k != curKey {
			cur = &endpoint.LocalityLbEndpoints{
				Priority: e.Priority,
				Locality: &core.Locality{Region: e.Locality.Region, Zone: e.Locality.Zone, SubZone: e.Locality.SubZone},
			}
			cla.Endpoints = append(cla.Endpoints, cur)
			curKey = k
		}
		cur.LbEndpoints = append(cur.LbEndpoints, lb)
	}
	// Envoy requires priorities to be contiguous from 0; renumber densely
	// while keeping their order.
	diags = append(diags, densePriorities(s.Name, cla)...)
	for _, g := range cla.Endpoints {
		if d := capWeights(g); d != "" {
			diags = append(diags, Diagnostic{s.Name, "weight", d})
		}
		// gRPC clients skip localities without a weight; Envoy uses locality
		// weights only with locality_weighted_lb_config, which our clusters
		// do not set. The endpoint count spreads gRPC's picks evenly.
		g.LoadBalancingWeight = wrapperspb.UInt32(uint32(len(g.LbEndpoints)))
	}
	return cla, diags
}

// capWeights scales down the weights of a locality whose sum exceeds
// what Envoy accepts (it rejects the whole assignment otherwise), keeping
// their proportions as far as integers allow and every weight at least 1.
func capWeights(g *endpoint.LocalityLbEndpoints) string {
	const limit = math.MaxUint32
	weight := func(lb *endpoint.LbEndpoint) uint64 {
		if w := lb.GetLoadBalancingWeight(); w != nil {
			return uint64(w.GetValue())
		}
		return 1 // Envoy's default
	}
	var sum uint64
	for _, lb := range g.LbEndpoints {
		sum += weight(lb)
	}
	if sum <= limit {
		return ""
	}
	// Every weight may be rounded up to 1, so aim n below the limit.
	target := uint64(limit) - uint64(len(g.LbEndpoints))
	for _, lb := range g.LbEndpoints {
		w := max(weight(lb)*target/sum, 1)
		lb.LoadBalancingWeight = wrapperspb.UInt32(uint32(w))
	}
	return fmt.Sprintf("weights of priority %d locality %q sum to %d, more than %d; scaled down",
		g.GetPriority(), localityString(g.GetLocality()), sum, uint64(limit))
}

func localityString(l *core.Locality) string {
	if l.GetRegion() == "" && l.GetZone() == "" && l.GetSubZone() == "" {
		return ""
	}
	return l.GetRegion() + "/" + l.GetZone() + "/" + l.GetSubZone()
}

func densePriorities(service string, cla *endpoint.ClusterLoadAssignment) []Diagnostic {
	var diags []Diagnostic
	next, last := uint32(0), uint32(0)
	for i, g := range cla.Endpoints {
		if i > 0 && g.Priority != last {
			next++
		}
		last = g.Priority
		if g.Priority != next {
			if len(diags) == 0 {
				diags = append(diags, Diagnostic{service, "priority", fmt.Sprintf("priorities must be contiguous from 0; %d renumbered to %d", g.Priority, next)})
			}
			g.Priority = next
		}
	}
	return diags
}

type fieldDiag struct{ field, msg string }

func lbEndpoint(e sources.Endpoint) (*endpoint.LbEndpoint, []fieldDiag) {
	var diags []fieldDiag
	health := core.HealthStatus(e.Health)
	if _, known := core.HealthStatus_name[int32(health)]; !known {
		diags = append(diags, fieldDiag{".health", fmt.Sprintf("unknown health status %d; sent as UNKNOWN", int(e.Health))})
		health = core.HealthStatus_UNKNOWN
	}
	lb := &endpoint.LbEndpoint{
		HostIdentifier: &endpoint.LbEndpoint_Endpoint{Endpoint: &endpoint.Endpoint{
			Address: &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
				Protocol:      core.SocketAddress_TCP,
				Address:       e.Address,
				PortSpecifier: &core.SocketAddress_PortValue{PortValue: e.Port},
			}}},
			Hostname: e.Hostname,
		}},
		HealthStatus: health,
	}
	if e.Weight > 0 {
		lb.LoadBalancingWeight = wrapperspb.UInt32(e.Weight)
	}
	md, mdDiags := metadata(e.Metadata)
	lb.Metadata = md
	for _, d := range mdDiags {
		diags = append(diags, fieldDiag{".metadata", d})
	}
	return lb, diags
}

// metadata converts filter metadata; namespaces whose values are not JSON
// values are dropped with a diagnostic each, in namespace order.
func metadata(m sources.Metadata) (*core.Metadata, []string) {
	if len(m) == 0 {
		return nil, nil
	}
	namespaces := make([]string, 0, len(m))
	for ns := range m {
		namespaces = append(namespaces, ns)
	}
	sort.Strings(namespaces)
	out := &core.Metadata{FilterMetadata: make(map[string]*structpb.Struct, len(m))}
	var diags []string
	for _, ns := range namespaces {
		st, err := structpb.NewStruct(m[ns])
		if err != nil {
			// protobuf's error text is deliberately unstable; name the
			// first offending key instead.
			diags = append(diags, fmt.Sprintf("namespace %q dropped: %s", ns, badValue(m[ns])))
			continue
		}
		out.FilterMetadata[ns] = st
	}
	if len(out.FilterMetadata) == 0 {
		return nil, diags
	}
	return out, diags
}

// badValue describes the first key (in order) whose value is not a JSON value.
func badValue(kv map[string]any) string {
	keys := make([]string, 0, len(kv))
	for k := range kv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if _, err := structpb.NewValue(kv[k]); err != nil {
			return fmt.Sprintf("key %q holds a %T, not a JSON value", k, kv[k])
		}
	}
	return "not JSON values"
}

// Validate runs the Envoy protos' own validation on every resource,
// subsets' included.
func (r Resources) Validate() error {
	if r.Cluster != nil {
		if err := r.Cluster.ValidateAll(); err != nil {
			return fmt.Errorf("cluster %s: %w", r.Cluster.GetName(), err)
		}
	}
	if r.Load != nil {
		if err := r.Load.ValidateAll(); err != nil {
			return fmt.Errorf("cluster load assignment %s: %w", r.Load.GetClusterName(), err)
		}
	}
	if r.Listener != nil {
		if err := r.Listener.ValidateAll(); err != nil {
			return fmt.Errorf("listener %s: %w", r.Listener.GetName(), err)
		}
	}
	if r.Route != nil {
		if err := r.Route.ValidateAll(); err != nil {
			return fmt.Errorf("route configuration %s: %w", r.Route.GetName(), err)
		}
	}
	for _, sub := range r.Subsets {
		if err := (Resources{Cluster: sub.Cluster, Load: sub.Load}).Validate(); err != nil {
			return fmt.Errorf("subset: %w", err)
		}
	}
	return nil
}
