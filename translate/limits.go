package translate

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/xdsbridge/xdsbridge/sources"
)

// Limits bound what one service's resources may carry, so that no resource
// is one a client rejects or cannot receive: Envoy rejects a whole response
// (every resource in it) when one resource cannot be unpacked, and grpc-go
// drops a response larger than its receive limit. Input over a limit is
// dropped from the resource (the field, or the endpoint's metadata
// namespace) with a Diagnostic; a service whose name or encoded resources
// are over the limits is refused as a whole (Result.Refused).
//
// A zero field means its default. The JSON names are the config file's
// (`limits:` block).
type Limits struct {
	// MaxMetadataDepth bounds the nesting of an endpoint's metadata
	// namespace: the namespace's own object is depth 1, each object or list
	// inside adds 1. A deeper namespace is dropped. Envoy unpacks resources
	// with protobuf's default recursion limit of 100 nested messages; in a
	// ClusterLoadAssignment an object level costs 3 of them (Struct, map
	// entry, Value) after 4 for the path to the metadata, so Envoy 1.40.0
	// accepts 32 levels of objects and rejects 33 ("Unable to unpack as
	// envoy.config.endpoint.v3.ClusterLoadAssignment"; lists cost 2 and
	// fail at 48). grpc-go (Go protobuf's limit of 10,000) takes 3,331.
	// Default 16; at most 32.
	MaxMetadataDepth int `json:"max_metadata_depth"`
	// MaxMetadataBytes bounds the encoded size of one endpoint's
	// filter_metadata. Over it, namespaces are dropped, largest first,
	// until it fits. No client limits it below the message size; the bound
	// keeps one endpoint from pushing its whole assignment over
	// MaxResourceBytes. Default 32 KiB.
	MaxMetadataBytes int `json:"max_metadata_bytes"`
	// MaxHostnameBytes bounds an endpoint's hostname (Envoy's auto host
	// rewrite, gRPC's authority); a longer one is dropped, as is one that
	// is not UTF-8. Envoy and grpc-go accept any length up to the message
	// size; a DNS name has at most 253 bytes. Default 253.
	MaxHostnameBytes int `json:"max_hostname_bytes"`
	// MaxNameBytes bounds a service (cluster) name: a service with a
	// longer name, or one that is not UTF-8, is not served. Envoy 1.40.0
	// accepts cluster names of 1 MB; every source already refuses names
	// over 255 bytes (sources.ValidateServiceName), so this can only
	// lower that. Default 255; at most 255.
	MaxNameBytes int `json:"max_name_bytes"`
	// MaxResourceBytes bounds the encoded size of each of a service's
	// resources. A service with a resource over it is refused: the bridge
	// keeps serving its last published version. grpc-go refuses a message
	// over 4 MiB (4,194,304 bytes: the whole response, whose envelope
	// around one resource is ~190 bytes plus the name); Envoy sets no
	// limit by default. Default 1 MiB; at most 4 MiB - 16 KiB.
	MaxResourceBytes int `json:"max_resource_bytes"`
	// MaxAssignmentEndpoints bounds the hosts of one assignment (a
	// service's or a subset's) once its policy's failover targets are
	// added: a target that would take it over adds nothing, with a
	// Diagnostic. The service's own hosts are never dropped, however
	// many. Default 10,000; 1..1,000,000.
	MaxAssignmentEndpoints int `json:"max_assignment_endpoints"`
	// MaxFailoverEndpoints bounds the hosts failover targets add across
	// the whole catalog (every service's and subset's assignments): one
	// policy such as `"*": {failover: [{service: big}]}` would otherwise
	// copy big's hosts into every service. Failover already published
	// keeps its hosts; a service whose failover would go over adds
	// nothing, with a Diagnostic, until there is room. Default 100,000;
	// 1..100,000,000.
	MaxFailoverEndpoints int `json:"max_failover_endpoints"`
}

// Defaults and ceilings of Limits. The ceilings are what clients accept.
const (
	DefaultMaxMetadataDepth = 16
	DefaultMaxMetadataBytes = 32 << 10
	DefaultMaxHostnameBytes = 253
	DefaultMaxNameBytes     = 255
	DefaultMaxResourceBytes = 1 << 20
	// DefaultMaxAssignmentEndpoints and DefaultMaxFailoverEndpoints are
	// far above what a catalog's failover adds when it fails over to
	// backups of its own size.
	DefaultMaxAssignmentEndpoints = 10_000
	DefaultMaxFailoverEndpoints   = 100_000
	CeilingAssignmentEndpoints    = 1_000_000
	CeilingFailoverEndpoints      = 100_000_000

	// CeilingMetadataDepth is the deepest metadata Envoy 1.40.0 unpacks in
	// a ClusterLoadAssignment (measured: 32 accepted, 33 rejected).
	CeilingMetadataDepth = 32
	// CeilingNameBytes is what every source accepts.
	CeilingNameBytes = 255
	// MinResourceBytes is the least MaxResourceBytes: the cluster,
	// listener and route of a service named with 255 bytes fit.
	MinResourceBytes = 4 << 10
	// CeilingResourceBytes leaves 16 KiB of grpc-go's 4 MiB default
	// receive limit for the response's envelope.
	CeilingResourceBytes = 4<<20 - 16<<10
)

// Limit names, as in the config file and the Result.Exceeded keys.
const (
	LimitMetadataDepth = "max_metadata_depth"
	LimitMetadataBytes = "max_metadata_bytes"
	LimitHostnameBytes = "max_hostname_bytes"
	LimitNameBytes     = "max_name_bytes"
	LimitResourceBytes = "max_resource_bytes"
	// LimitAssignmentEndpoints and LimitFailoverEndpoints count the
	// failover targets dropped.
	LimitAssignmentEndpoints = "max_assignment_endpoints"
	LimitFailoverEndpoints   = "max_failover_endpoints"
	// LimitEncoding counts strings that are not UTF-8 (a client cannot
	// decode them, nor the cache encode them): dropped like the other
	// limits, and refusing the service where nothing can be dropped.
	LimitEncoding = "encoding"
)

// DefaultLimits returns the default limits.
func DefaultLimits() Limits {
	return Limits{
		MaxMetadataDepth: DefaultMaxMetadataDepth,
		MaxMetadataBytes: DefaultMaxMetadataBytes,
		MaxHostnameBytes: DefaultMaxHostnameBytes,
		MaxNameBytes:     DefaultMaxNameBytes,
		MaxResourceBytes: DefaultMaxResourceBytes,

		MaxAssignmentEndpoints: DefaultMaxAssignmentEndpoints,
		MaxFailoverEndpoints:   DefaultMaxFailoverEndpoints,
	}
}

// WithDefaults returns l with every zero field set to its default (the
// metadata bytes' default no more than MaxResourceBytes).
func (l Limits) WithDefaults() Limits {
	d := DefaultLimits()
	if l.MaxResourceBytes > 0 {
		d.MaxMetadataBytes = min(d.MaxMetadataBytes, l.MaxResourceBytes)
	}
	for _, f := range []struct{ v, def *int }{
		{&l.MaxMetadataDepth, &d.MaxMetadataDepth},
		{&l.MaxMetadataBytes, &d.MaxMetadataBytes},
		{&l.MaxHostnameBytes, &d.MaxHostnameBytes},
		{&l.MaxNameBytes, &d.MaxNameBytes},
		{&l.MaxResourceBytes, &d.MaxResourceBytes},
		{&l.MaxAssignmentEndpoints, &d.MaxAssignmentEndpoints},
		{&l.MaxFailoverEndpoints, &d.MaxFailoverEndpoints},
	} {
		if *f.v == 0 {
			*f.v = *f.def
		}
	}
	return l
}

// Check reports the first limit out of its range, naming it. Zero fields
// are defaults and pass.
func (l Limits) Check() error {
	l = l.WithDefaults()
	for _, f := range []struct {
		name      string
		v, lo, hi int
		why       string
	}{
		{LimitMetadataDepth, l.MaxMetadataDepth, 1, CeilingMetadataDepth, "Envoy rejects deeper metadata"},
		{LimitNameBytes, l.MaxNameBytes, 1, CeilingNameBytes, "sources refuse longer names"},
		{LimitResourceBytes, l.MaxResourceBytes, MinResourceBytes, CeilingResourceBytes, "grpc-go receives at most 4 MiB"},
		{LimitMetadataBytes, l.MaxMetadataBytes, 1, l.MaxResourceBytes, "not above " + LimitResourceBytes},
		{LimitHostnameBytes, l.MaxHostnameBytes, 1, l.MaxResourceBytes, "not above " + LimitResourceBytes},
		{LimitAssignmentEndpoints, l.MaxAssignmentEndpoints, 1, CeilingAssignmentEndpoints, "bounds failover's copies"},
		{LimitFailoverEndpoints, l.MaxFailoverEndpoints, 1, CeilingFailoverEndpoints, "bounds failover's copies"},
	} {
		if f.v < f.lo || f.v > f.hi {
			return fmt.Errorf("%s: %d is not in %d..%d (%s)", f.name, f.v, f.lo, f.hi, f.why)
		}
	}
	return nil
}

// Result is one service translated within Limits.
type Result struct {
	// Resources is zero when Refused.
	Resources
	Diagnostics []Diagnostic
	// Exceeded counts, per limit name (LimitMetadataDepth, ...), what each
	// limit dropped or refused. Nil when nothing was.
	Exceeded map[string]int
	// BlackHoles counts, by kind (BlackHoleRoute, ...), the references of
	// the policy to services no source publishes. Nil when none.
	BlackHoles map[string]int
	// FailoverEndpoints is how many hosts the failover targets added, over
	// the service's assignment and its subsets'.
	FailoverEndpoints int
	// Refused is set when nothing of the service can be served within the
	// limits: its name, or the encoding of one of its resources, is over
	// them. A Diagnostic says why; the previous version, if any, is what
	// should stay served.
	Refused bool
}

// ServiceWithin translates one service within lim, with the default
// Options.
func ServiceWithin(s sources.Service, lim Limits) Result { return Options{}.ServiceWithin(s, lim) }

// ServiceWithin translates one service as Service does, within lim (zero
// fields are defaults): what a client would reject is dropped with a
// Diagnostic naming the service and field, and a service that cannot be
// served within the limits is refused. The service is not modified.
//
// With a Policy, the cluster carries the policy's settings (ServiceCluster)
// and Resources.Subsets its subsets (see subset.go); the size limit holds
// for every subset resource too.
func (o Options) ServiceWithin(s sources.Service, lim Limits) Result {
	return o.ServiceWithinBudget(s, lim, -1)
}

// ServiceWithinBudget is ServiceWithin with a bound on the hosts the
// failover targets may add to the service's assignments, its share of
// lim.MaxFailoverEndpoints that the rest of the catalog leaves (the merge
// loop keeps the count); a negative budget is no bound.
func (o Options) ServiceWithinBudget(s sources.Service, lim Limits, budget int) Result {
	lim = lim.WithDefaults()
	var r Result
	if n := len(s.Name); n > lim.MaxNameBytes || !utf8.ValidString(s.Name) {
		msg := fmt.Sprintf("the name is %d bytes, more than %s %d; service not served", n, LimitNameBytes, lim.MaxNameBytes)
		if n <= lim.MaxNameBytes {
			r.refuse(LimitEncoding, Diagnostic{shortName(s.Name), "name", "the name is not UTF-8; service not served"})
		} else {
			r.refuse(LimitNameBytes, Diagnostic{shortName(s.Name), "name", msg})
		}
		return r
	}
	cla, diags := o.LoadAssignment(s)
	r.Diagnostics = diags
	own := len(cla.Endpoints)
	added := r.failover(o, s.Name, cla, true, lim, budget)
	r.limitEndpoints(s.Name, cla, lim)
	if r.Refused {
		return r
	}
	// The whole assignment bounds each endpoint's metadata: look at them
	// one by one only when it is larger than one may be.
	size := proto.Size(cla)
	if size > lim.MaxMetadataBytes && r.limitMetadataBytes(s.Name, cla, lim) {
		size = proto.Size(cla)
	}
	size = r.dropFailoverOverSize(s.Name, "cluster_load_assignment", cla, own, added, size, lim)
	c, cdiags := o.ServiceCluster(s.Name)
	r.Diagnostics = append(r.Diagnostics, cdiags...)
	pol, holeDiags, holes := o.blackHoles(s.Name)
	r.Diagnostics = append(r.Diagnostics, holeDiags...)
	r.BlackHoles = holes
	rc, routeDiags := routeConfig(s.Name, pol, o.Targets)
	r.Diagnostics = append(r.Diagnostics, routeDiags...)
	res := Resources{Cluster: c, Load: cla, Listener: APIListener(s.Name), Route: rc}
	type sized struct {
		field string
		size  int
	}
	sizes := []sized{
		{"cluster", proto.Size(res.Cluster)},
		{"cluster_load_assignment", size},
		{"listener", proto.Size(res.Listener)},
		{"route_configuration", proto.Size(res.Route)},
	}
	if o.Policy != nil && len(o.Policy.Subsets) > 0 {
		subs, sdiags := o.subsets(s, c)
		r.Diagnostics = append(r.Diagnostics, sdiags...)
		for _, sub := range subs {
			subOwn := len(sub.Load.Endpoints)
			subAdded := r.failover(o, s.Name, sub.Load, false, lim, budget)
			// A subset's endpoints are some of the service's, which passed
			// the same limits: what they drop again was reported (and
			// counted) once, for the service's own assignment.
			var again Result
			again.limitEndpoints(sub.Load.GetClusterName(), sub.Load, lim)
			if again.Refused {
				r.refuse(LimitEncoding, again.Diagnostics[len(again.Diagnostics)-1])
				return r
			}
			subSize := proto.Size(sub.Load)
			if subSize > lim.MaxMetadataBytes && again.limitMetadataBytes(sub.Load.GetClusterName(), sub.Load, lim) {
				subSize = proto.Size(sub.Load)
			}
			name := strings.TrimPrefix(sub.Cluster.GetName(), s.Name+"/")
			subSize = r.dropFailoverOverSize(s.Name, "subsets."+name+".cluster_load_assignment", sub.Load, subOwn, subAdded, subSize, lim)
			sizes = append(sizes,
				sized{"subsets." + name + ".cluster", proto.Size(sub.Cluster)},
				sized{"subsets." + name + ".cluster_load_assignment", subSize})
		}
		res.Subsets = subs
	}
	for _, m := range sizes {
		if m.size > lim.MaxResourceBytes {
			r.refuse(LimitResourceBytes, Diagnostic{s.Name, m.field, fmt.Sprintf("encodes to %d bytes, more than %s %d; service update refused", m.size, LimitResourceBytes, lim.MaxResourceBytes)})
			return r
		}
	}
	r.Resources = res
	return r
}

// failover adds the failover targets' hosts to cla within the limits and
// what is left of budget (negative: none), counts them, and returns how
// many it added.
func (r *Result) failover(o Options, service string, cla *endpoint.ClusterLoadAssignment, report bool, lim Limits, budget int) int {
	if budget >= 0 {
		budget = max(budget-r.FailoverEndpoints, 0)
	}
	diags, added, over := o.appendFailover(service, cla, report, lim, budget)
	r.Diagnostics = append(r.Diagnostics, diags...)
	r.FailoverEndpoints += added
	for limit, n := range over {
		if r.Exceeded == nil {
			r.Exceeded = map[string]int{}
		}
		r.Exceeded[limit] += n
	}
	return added
}

// dropFailoverOverSize takes the failover hosts (the groups after the
// first own) out of an assignment that encodes to more than
// MaxResourceBytes with them, so that the failover, not the service's own
// hosts, is what the size limit refuses. It returns the size.
func (r *Result) dropFailoverOverSize(service, field string, cla *endpoint.ClusterLoadAssignment, own, added, size int, lim Limits) int {
	if size <= lim.MaxResourceBytes || len(cla.Endpoints) <= own {
		return size
	}
	cla.Endpoints = cla.Endpoints[:own]
	r.FailoverEndpoints -= added
	r.exceed(LimitResourceBytes)
	r.Diagnostics = append(r.Diagnostics, Diagnostic{service, field, fmt.Sprintf("encodes to %d bytes with its %d failover hosts, more than %s %d; failover dropped (the service's own hosts stay)", size, added, LimitResourceBytes, lim.MaxResourceBytes)})
	return proto.Size(cla)
}

func (r *Result) exceed(limit string) {
	if r.Exceeded == nil {
		r.Exceeded = map[string]int{}
	}
	r.Exceeded[limit]++
}

func (r *Result) refuse(limit string, d Diagnostic) {
	r.exceed(limit)
	r.Diagnostics = append(r.Diagnostics, d)
	r.Refused = true
}

// shortName is a name fit for a diagnostic: at most 64 bytes, valid UTF-8.
func shortName(name string) string {
	if len(name) <= 64 {
		return strings.ToValidUTF8(name, "\uFFFD")
	}
	return strings.ToValidUTF8(name[:64], "\uFFFD") + fmt.Sprintf("…(%d bytes)", len(name))
}

// endpointField names an endpoint in a diagnostic, as LoadAssignment does.
func endpointField(lb *endpoint.LbEndpoint) string {
	sa := lb.GetEndpoint().GetAddress().GetSocketAddress()
	return "endpoints[" + sources.HostKey{Address: sa.GetAddress(), Port: sa.GetPortValue()}.String() + "]"
}

// limitEndpoints drops, in the assignment's order, every hostname over the
// limit and every metadata namespace too deep, and checks that every
// string can be encoded: a client cannot decode a message holding a string
// that is not UTF-8, and the cache cannot encode it. (Metadata keys and
// values are UTF-8: structpb refuses others.) A locality that is not
// UTF-8 cannot be dropped on its own and refuses the service.
func (r *Result) limitEndpoints(service string, cla *endpoint.ClusterLoadAssignment, lim Limits) {
	for _, g := range cla.GetEndpoints() {
		if l := g.GetLocality(); !utf8.ValidString(l.GetRegion()) || !utf8.ValidString(l.GetZone()) || !utf8.ValidString(l.GetSubZone()) {
			r.refuse(LimitEncoding, Diagnostic{service, "locality", fmt.Sprintf("a locality of priority %d is not UTF-8; service update refused", g.GetPriority())})
			return
		}
		for _, lb := range g.GetLbEndpoints() {
			ep := lb.GetEndpoint()
			if h := ep.GetHostname(); len(h) > lim.MaxHostnameBytes {
				r.exceed(LimitHostnameBytes)
				r.Diagnostics = append(r.Diagnostics, Diagnostic{service, endpointField(lb) + ".hostname", fmt.Sprintf("hostname is %d bytes, more than %s %d; hostname dropped", len(h), LimitHostnameBytes, lim.MaxHostnameBytes)})
				ep.Hostname = ""
			} else if !utf8.ValidString(h) {
				r.exceed(LimitEncoding)
				r.Diagnostics = append(r.Diagnostics, Diagnostic{service, endpointField(lb) + ".hostname", "hostname is not UTF-8; hostname dropped"})
				ep.Hostname = ""
			}
			if lb.Metadata != nil {
				r.limitMetadataDepth(service, lb, lim)
			}
		}
	}
}

// limitMetadataDepth drops the namespaces of an endpoint's metadata that
// are nested too deep or whose names are not UTF-8.
func (r *Result) limitMetadataDepth(service string, lb *endpoint.LbEndpoint, lim Limits) {
	fm := lb.GetMetadata().GetFilterMetadata()
	bad := func(ns string) bool {
		return !utf8.ValidString(ns) || structDepth(fm[ns], 1, lim.MaxMetadataDepth) > lim.MaxMetadataDepth
	}
	any := false
	for ns := range fm {
		if any = bad(ns); any {
			break
		}
	}
	if !any {
		return
	}
	// Something to drop: in namespace order, for the diagnostics.
	for _, ns := range slices.Sorted(maps.Keys(fm)) {
		var msg string
		switch {
		case !utf8.ValidString(ns):
			r.exceed(LimitEncoding)
			msg = fmt.Sprintf("namespace %q dropped: its name is not UTF-8", ns)
		case bad(ns):
			r.exceed(LimitMetadataDepth)
			msg = fmt.Sprintf("namespace %q dropped: nested more than %s %d levels deep", shortName(ns), LimitMetadataDepth, lim.MaxMetadataDepth)
		default:
			continue
		}
		r.Diagnostics = append(r.Diagnostics, Diagnostic{service, endpointField(lb) + ".metadata", msg})
		delete(fm, ns)
	}
	if len(fm) == 0 {
		lb.Metadata = nil
	}
}

// limitMetadataBytes drops, from each endpoint whose metadata encodes to
// more than the limit, namespaces largest first (by name among equals)
// until it fits. It reports whether it dropped any.
func (r *Result) limitMetadataBytes(service string, cla *endpoint.ClusterLoadAssignment, lim Limits) bool {
	dropped := false
	for _, g := range cla.GetEndpoints() {
		for _, lb := range g.GetLbEndpoints() {
			md := lb.GetMetadata()
			size := proto.Size(md)
			if size <= lim.MaxMetadataBytes {
				continue
			}
			type nsSize struct {
				name string
				size int
			}
			fm := md.GetFilterMetadata()
			sizes := make([]nsSize, 0, len(fm))
			for ns, st := range fm {
				sizes = append(sizes, nsSize{ns, proto.Size(&core.Metadata{FilterMetadata: map[string]*structpb.Struct{ns: st}})})
			}
			slices.SortFunc(sizes, func(a, b nsSize) int {
				return cmp.Or(cmp.Compare(b.size, a.size), strings.Compare(a.name, b.name))
			})
			for _, s := range sizes {
				if size <= lim.MaxMetadataBytes {
					break
				}
				r.exceed(LimitMetadataBytes)
				r.Diagnostics = append(r.Diagnostics, Diagnostic{service, endpointField(lb) + ".metadata",
					fmt.Sprintf("namespace %q dropped: the endpoint's metadata encodes to %d bytes, more than %s %d", shortName(s.name), size, LimitMetadataBytes, lim.MaxMetadataBytes)})
				delete(fm, s.name)
				size = proto.Size(md)
				dropped = true
			}
			if len(fm) == 0 {
				lb.Metadata = nil
			}
		}
	}
	return dropped
}

// structDepth is the nesting depth of st, which is at depth d; it stops
// looking once past limit.
func structDepth(st *structpb.Struct, d, limit int) int {
	deepest := d
	for _, v := range st.GetFields() {
		if deepest > limit {
			break
		}
		deepest = valueDepth(v, d, limit, deepest)
	}
	return deepest
}

// valueDepth is the deepest of deepest and the depth of v, a value in a
// container at depth d.
func valueDepth(v *structpb.Value, d, limit, deepest int) int {
	switch k := v.GetKind().(type) {
	case *structpb.Value_StructValue:
		return max(deepest, structDepth(k.StructValue, d+1, limit))
	case *structpb.Value_ListValue:
		deepest = max(deepest, d+1)
		for _, e := range k.ListValue.GetValues() {
			if deepest > limit {
				break
			}
			deepest = valueDepth(e, d+1, limit, deepest)
		}
	}
	return deepest
}
