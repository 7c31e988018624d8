// Package translate turns services into Envoy xDS resources.
//
// It is pure: no I/O, no locks, no logging. Output is deterministic (sorted)
// and every resource passes the Envoy protos' own Validate(). Translation
// never fails as a whole: input a resource cannot carry is dropped from that
// resource and reported as a Diagnostic.
package translate

import (
	"fmt"
	"net/netip"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

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
}

// DefaultConnectTimeout is the connect timeout of generated clusters.
const DefaultConnectTimeout = 5 * time.Second

// Service translates one service into its Cluster and ClusterLoadAssignment.
// The service is not modified.
func Service(s sources.Service) (Resources, []Diagnostic) {
	cla, diags := LoadAssignment(s)
	return Resources{Cluster: Cluster(s.Name), Load: cla}, diags
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

// LoadAssignment builds the ClusterLoadAssignment of a service: endpoints
// grouped by priority and locality, sorted. A service with no endpoints gets
// an empty assignment, so a cluster never waits in warming.
func LoadAssignment(s sources.Service) (*endpoint.ClusterLoadAssignment, []Diagnostic) {
	eps := make([]sources.Endpoint, len(s.Endpoints))
	copy(eps, s.Endpoints)
	sources.SortEndpoints(eps)

	var diags []Diagnostic
	cla := &endpoint.ClusterLoadAssignment{ClusterName: s.Name}
	var cur *endpoint.LocalityLbEndpoints
	var curKey groupKey
	seen := make(map[sources.HostKey]bool, len(eps))
	for i, e := range eps {
		field := fmt.Sprintf("endpoints[%s]", e.Key())
		if _, err := netip.ParseAddr(e.Address); err != nil || e.Port == 0 || e.Port > 65535 {
			diags = append(diags, Diagnostic{s.Name, field, "address must be an IP and port in 1..65535; endpoint dropped"})
			continue
		}
		if seen[e.Key()] {
			diags = append(diags, Diagnostic{s.Name, field, "duplicate address and port; first kept"})
			continue
		}
		seen[e.Key()] = true
		lb, d := lbEndpoint(e)
		if d != "" {
			diags = append(diags, Diagnostic{s.Name, field + ".metadata", d})
		}
		k := groupKey{e.Priority, e.Locality}
		if cur == nil || k != curKey || i == 0 {
			cur = &endpoint.LocalityLbEndpoints{Priority: e.Priority}
			if e.Locality != (sources.Locality{}) {
				cur.Locality = &core.Locality{Region: e.Locality.Region, Zone: e.Locality.Zone, SubZone: e.Locality.SubZone}
			}
			cla.Endpoints = append(cla.Endpoints, cur)
			curKey = k
		}
		cur.LbEndpoints = append(cur.LbEndpoints, lb)
	}
	// Envoy requires priorities to be contiguous from 0; renumber densely
	// while keeping their order.
	diags = append(diags, densePriorities(s.Name, cla)...)
	return cla, diags
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

func lbEndpoint(e sources.Endpoint) (*endpoint.LbEndpoint, string) {
	lb := &endpoint.LbEndpoint{
		HostIdentifier: &endpoint.LbEndpoint_Endpoint{Endpoint: &endpoint.Endpoint{
			Address: &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
				Protocol:      core.SocketAddress_TCP,
				Address:       e.Address,
				PortSpecifier: &core.SocketAddress_PortValue{PortValue: e.Port},
			}}},
			Hostname: e.Hostname,
		}},
		HealthStatus: core.HealthStatus(e.Health),
	}
	if e.Weight > 0 {
		lb.LoadBalancingWeight = wrapperspb.UInt32(e.Weight)
	}
	md, diag := metadata(e.Metadata)
	lb.Metadata = md
	return lb, diag
}

// metadata converts filter metadata; namespaces whose values are not JSON
// values are dropped with a diagnostic.
func metadata(m sources.Metadata) (*core.Metadata, string) {
	if len(m) == 0 {
		return nil, ""
	}
	out := &core.Metadata{FilterMetadata: make(map[string]*structpb.Struct, len(m))}
	var diag string
	for ns, kv := range m {
		st, err := structpb.NewStruct(kv)
		if err != nil {
			diag = fmt.Sprintf("namespace %q dropped: %v", ns, err)
			continue
		}
		out.FilterMetadata[ns] = st
	}
	if len(out.FilterMetadata) == 0 {
		return nil, diag
	}
	return out, diag
}

// Validate runs the Envoy protos' own validation on both resources.
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
	return nil
}
