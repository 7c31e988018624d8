package file

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/xdsbridge/xdsbridge/config/decode"
	"github.com/xdsbridge/xdsbridge/sources"
)

// document is the file's format: concise services, Envoy
// ClusterLoadAssignments, or both.
type document struct {
	Services map[string]serviceDoc `json:"services"`
	// ClusterLoadAssignments are Envoy ClusterLoadAssignment documents, as
	// in a static cluster's load_assignment; decoded with protojson.
	ClusterLoadAssignments []json.RawMessage `json:"cluster_load_assignments"`
}

type serviceDoc struct {
	Endpoints []endpointDoc `json:"endpoints"`
}

type endpointDoc struct {
	Address  string           `json:"address"`
	Port     uint32           `json:"port"`
	Hostname string           `json:"hostname"`
	Weight   uint32           `json:"weight"`
	Priority uint32           `json:"priority"`
	Locality sources.Locality `json:"locality"`
	Health   string           `json:"health"`
	Metadata sources.Metadata `json:"metadata"`
}

// ErrEmpty is Parse's error for a document with neither section.
var ErrEmpty = errors.New("empty document: no services: or cluster_load_assignments: (write `services: {}` to serve no services)")

// Parse reads a services file (YAML or JSON). Errors name the field, and
// YAML syntax errors the line.
func Parse(data []byte) ([]sources.Service, error) {
	return ParseContext(context.Background(), data)
}

// ParseContext is Parse that stops with ctx's error when ctx is done: it
// looks at ctx between the decode and each service. (The YAML decode
// itself is one call; the file's size cap bounds it.)
func ParseContext(ctx context.Context, data []byte) ([]sources.Service, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var doc document
	if err := decode.Strict(data, &doc); err != nil {
		return nil, err
	}
	// An empty document (0 bytes, whitespace, comments, `null`, `{}`, or
	// sections that are null) is what a truncate-then-write editor leaves
	// for a moment: it is an error, not "zero services". Serving none takes
	// an explicit empty section.
	if doc.Services == nil && doc.ClusterLoadAssignments == nil {
		return nil, ErrEmpty
	}
	byName := map[string]sources.Service{}
	names := make([]string, 0, len(doc.Services))
	for n := range doc.Services {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		field := "services." + name
		if err := sources.ValidateServiceName(field, name); err != nil {
			return nil, at(data, err, field, "services", name)
		}
		svc := sources.Service{Name: name, Endpoints: []sources.Endpoint{}}
		for i, ed := range doc.Services[name].Endpoints {
			ef := fmt.Sprintf("%s.endpoints[%d]", field, i)
			h, err := sources.ParseHealth(ed.Health)
			if err != nil {
				return nil, at(data, fmt.Errorf("%s.health: %w", ef, err), ef, "services", name, "endpoints", fmt.Sprintf("[%d]", i))
			}
			e := sources.Endpoint{
				Address: canonicalAddr(ed.Address), Port: ed.Port, Hostname: ed.Hostname, Weight: ed.Weight,
				Priority: ed.Priority, Locality: ed.Locality, Health: h, Metadata: ed.Metadata,
			}
			if err := sources.ValidateEndpoint(ef, e); err != nil {
				return nil, at(data, err, ef, "services", name, "endpoints", fmt.Sprintf("[%d]", i))
			}
			svc.Endpoints = append(svc.Endpoints, e)
		}
		if err := checkDuplicates(field, svc.Endpoints); err != nil {
			return nil, at(data, err, field, "services", name)
		}
		byName[name] = svc
	}
	for i, raw := range doc.ClusterLoadAssignments {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		field := fmt.Sprintf("cluster_load_assignments[%d]", i)
		svc, err := fromCLA(field, raw)
		if err != nil {
			return nil, at(data, err, field, "cluster_load_assignments", fmt.Sprintf("[%d]", i))
		}
		if _, dup := byName[svc.Name]; dup {
			err := fmt.Errorf("%s.cluster_name: service %q is defined twice in the file", field, svc.Name)
			return nil, at(data, err, field, "cluster_load_assignments", fmt.Sprintf("[%d]", i))
		}
		byName[svc.Name] = svc
	}
	out := make([]sources.Service, 0, len(byName))
	for _, s := range byName {
		s.Endpoints = sources.Normalize(s.Endpoints)
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// at returns err, a check's error about the value written field (its
// message starting with field and the path below it), with the line and
// column of that value in data; path is field's place in the document
// (a service name may hold dots, so field is not parsed for it).
func at(data []byte, err error, field string, path ...string) error {
	below := errors.New(strings.TrimPrefix(strings.TrimPrefix(err.Error(), field), "."))
	if line, col := decode.Locate(data, path, below); line > 0 {
		return fmt.Errorf("line %d, column %d: %w", line, col, err)
	}
	return err
}

// canonicalAddr returns an IP address in its canonical form (lower case,
// zeros compressed, IPv4-mapped IPv6 unmapped), so the "listed once" rule
// and the published endpoint see one spelling of each host. Anything else
// is returned as it is, for ValidateEndpoint to refuse.
func canonicalAddr(s string) string {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return s
	}
	return a.Unmap().String()
}

func checkDuplicates(field string, eps []sources.Endpoint) error {
	seen := map[sources.HostKey]bool{}
	for _, e := range eps {
		if seen[e.Key()] {
			return fmt.Errorf("%s.endpoints: %s is listed twice", field, e.Key())
		}
		seen[e.Key()] = true
	}
	return nil
}

// fromCLA converts an Envoy ClusterLoadAssignment document.
func fromCLA(field string, raw json.RawMessage) (sources.Service, error) {
	var cla endpoint.ClusterLoadAssignment
	if err := protojson.Unmarshal(raw, &cla); err != nil {
		return sources.Service{}, fmt.Errorf("%s: %w", field, err)
	}
	if err := cla.ValidateAll(); err != nil {
		return sources.Service{}, fmt.Errorf("%s: %w", field, err)
	}
	if err := sources.ValidateServiceName(field+".cluster_name", cla.GetClusterName()); err != nil {
		return sources.Service{}, err
	}
	svc := sources.Service{Name: cla.GetClusterName(), Endpoints: []sources.Endpoint{}}
	for i, loc := range cla.GetEndpoints() {
		lf := fmt.Sprintf("%s.endpoints[%d]", field, i)
		var locality sources.Locality
		if l := loc.GetLocality(); l != nil {
			locality = sources.Locality{Region: l.GetRegion(), Zone: l.GetZone(), SubZone: l.GetSubZone()}
		}
		for j, lb := range loc.GetLbEndpoints() {
			ef := fmt.Sprintf("%s.lb_endpoints[%d]", lf, j)
			ep := lb.GetEndpoint()
			if ep == nil {
				return sources.Service{}, fmt.Errorf("%s.endpoint: missing (named endpoints are not supported)", ef)
			}
			sa := ep.GetAddress().GetSocketAddress()
			if sa == nil {
				return sources.Service{}, fmt.Errorf("%s.endpoint.address.socket_address: missing (only socket addresses are supported)", ef)
			}
			if _, ok := sa.GetPortSpecifier().(*core.SocketAddress_PortValue); !ok {
				return sources.Service{}, fmt.Errorf("%s.endpoint.address.socket_address.port_value: missing (named ports are not supported)", ef)
			}
			if _, err := netip.ParseAddr(sa.GetAddress()); err != nil {
				return sources.Service{}, fmt.Errorf("%s.endpoint.address.socket_address.address: %q is not an IP address (names belong to the dns source)", ef, sa.GetAddress())
			}
			if p := sa.GetPortValue(); p == 0 || p > 65535 {
				return sources.Service{}, fmt.Errorf("%s.endpoint.address.socket_address.port_value: %d is not in 1..65535", ef, p)
			}
			if _, ok := core.HealthStatus_name[int32(lb.GetHealthStatus())]; !ok {
				return sources.Service{}, fmt.Errorf("%s.health_status: unknown health status %d", ef, lb.GetHealthStatus())
			}
			e := sources.Endpoint{
				Address:  canonicalAddr(sa.GetAddress()),
				Port:     sa.GetPortValue(),
				Hostname: ep.GetHostname(),
				Weight:   lb.GetLoadBalancingWeight().GetValue(),
				Priority: loc.GetPriority(),
				Locality: locality,
				Health:   sources.HealthStatus(lb.GetHealthStatus()),
			}
			if md := lb.GetMetadata().GetFilterMetadata(); len(md) > 0 {
				e.Metadata = sources.Metadata{}
				for ns, st := range md {
					e.Metadata[ns] = st.AsMap()
				}
			}
			if err := sources.ValidateEndpoint(ef+".endpoint.address.socket_address", e); err != nil {
				return sources.Service{}, err
			}
			svc.Endpoints = append(svc.Endpoints, e)
		}
	}
	if err := checkDuplicates(field, svc.Endpoints); err != nil {
		return sources.Service{}, err
	}
	return svc, nil
}
