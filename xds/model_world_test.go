package xds_test

// The model's view of the server side: what the cache serves after each
// publish, and every version it ever served, by content. Filled in from the
// cache's public List after each Apply, so the test knows versions without
// knowing how the cache computes them.

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/xdsbridge/xdsbridge/xds"
)

var modelTypes = []string{cds, eds}

// mver is one version of one resource as the cache served it.
type mver struct {
	typ, name, version string
	content            string // hash of the deterministic encoding
	poison             bool   // a client rejects any response carrying it
	seq                int    // the publish at which it last became current
	// cluster: for an EDS version, the version of the cluster of the same
	// name when it was current ("" if there was none).
	cluster string
}

func (v *mver) String() string { return v.name + "@" + short(v.version) + poisonMark(v.poison) }

type world struct {
	seq       int                                      // publishes so far
	served    map[string]map[string]*mver              // type → name → current
	hist      map[string]map[string]map[string]*mver   // type → name → version
	byContent map[string]map[string]map[string][]*mver // type → name → content → versions
	changed   map[string]map[string]int                // type → name → publish of its last change
	bad       string                                   // a version of two contents, if seen
}

func newWorld() *world {
	w := &world{served: map[string]map[string]*mver{}, hist: map[string]map[string]map[string]*mver{},
		byContent: map[string]map[string]map[string][]*mver{}, changed: map[string]map[string]int{}}
	for _, t := range modelTypes {
		w.served[t] = map[string]*mver{}
		w.hist[t] = map[string]map[string]*mver{}
		w.byContent[t] = map[string]map[string][]*mver{}
		w.changed[t] = map[string]int{}
	}
	return w
}

// record takes the cache's state after a publish.
func (w *world) record(c *xds.Cache) {
	w.seq++
	for _, typ := range modelTypes { // CDS first: EDS versions refer to it
		cur := map[string]*mver{}
		for _, ri := range c.List(typ) {
			content := contentHash(ri.Msg)
			byName := w.hist[typ][ri.Name]
			if byName == nil {
				byName = map[string]*mver{}
				w.hist[typ][ri.Name] = byName
			}
			v := byName[ri.Version]
			if v == nil {
				v = &mver{typ: typ, name: ri.Name, version: ri.Version, content: content, poison: isPoison(ri.Msg)}
				byName[ri.Version] = v
				if w.byContent[typ][ri.Name] == nil {
					w.byContent[typ][ri.Name] = map[string][]*mver{}
				}
				w.byContent[typ][ri.Name][content] = append(w.byContent[typ][ri.Name][content], v)
			} else if v.content != content && w.bad == "" {
				w.bad = fmt.Sprintf("%s %s version %s has two contents", typeName(typ), ri.Name, ri.Version)
			}
			cur[ri.Name] = v
		}
		for n, v := range cur {
			if old := w.served[typ][n]; old == nil || old.version != v.version {
				w.changed[typ][n] = w.seq
				v.seq = w.seq
				if typ == eds {
					v.cluster = ""
					if cv := w.served[cds][n]; cv != nil {
						v.cluster = cv.version
					}
				}
			}
		}
		for n := range w.served[typ] {
			if cur[n] == nil {
				w.changed[typ][n] = w.seq
			}
		}
		w.served[typ] = cur
	}
}

// Resources of the model: a cluster in a few variants (its connect
// timeout) and an assignment in a few variants (endpoint count and ports),
// so that publishing the same content again is frequent.

func mkCluster(name string, variant int) *cluster.Cluster {
	return &cluster.Cluster{
		Name:                 name,
		ConnectTimeout:       durationpb.New(time.Duration(variant+1) * time.Second),
		ClusterDiscoveryType: &cluster.Cluster_Type{Type: cluster.Cluster_EDS},
	}
}

func mkCLA(name string, variant int, poison bool) *endpoint.ClusterLoadAssignment {
	n, base := variant%4, uint32(1000+1000*(variant/4))
	if poison && n == 0 {
		n = 1
	}
	loc := &endpoint.LocalityLbEndpoints{}
	for i := range n {
		loc.LbEndpoints = append(loc.LbEndpoints, &endpoint.LbEndpoint{
			HostIdentifier: &endpoint.LbEndpoint_Endpoint{Endpoint: &endpoint.Endpoint{
				Address: &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
					Address: "127.0.0.1", PortSpecifier: &core.SocketAddress_PortValue{PortValue: base + uint32(i)},
				}}},
			}},
		})
	}
	if poison {
		loc.LbEndpoints[0].Metadata = &core.Metadata{FilterMetadata: map[string]*structpb.Struct{"poison": {}}}
	}
	return &endpoint.ClusterLoadAssignment{ClusterName: name, Endpoints: []*endpoint.LocalityLbEndpoints{loc}}
}

// isPoison: an assignment with an endpoint whose metadata has the key
// "poison", which the model's clients reject.
func isPoison(m proto.Message) bool {
	cla, ok := m.(*endpoint.ClusterLoadAssignment)
	if !ok {
		return false
	}
	for _, l := range cla.GetEndpoints() {
		for _, e := range l.GetLbEndpoints() {
			if _, ok := e.GetMetadata().GetFilterMetadata()["poison"]; ok {
				return true
			}
		}
	}
	return false
}

func contentHash(m proto.Message) string {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		panic(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:6])
}

// decodeRes decodes a resource of a response: its name, content hash and
// whether it is poison.
func decodeRes(typ string, a *anypb.Any) (name, content string, poison bool, err error) {
	var m proto.Message
	switch typ {
	case cds:
		m = &cluster.Cluster{}
	case eds:
		m = &endpoint.ClusterLoadAssignment{}
	default:
		return "", "", false, fmt.Errorf("unexpected type %s", typ)
	}
	if err := a.UnmarshalTo(m); err != nil {
		return "", "", false, err
	}
	switch m := m.(type) {
	case *cluster.Cluster:
		name = m.GetName()
	case *endpoint.ClusterLoadAssignment:
		name = m.GetClusterName()
	}
	return name, contentHash(m), isPoison(m), nil
}

func short(v string) string {
	if len(v) > 6 {
		return v[:6]
	}
	return v
}

func poisonMark(p bool) string {
	if p {
		return "☠"
	}
	return ""
}

func typeName(t string) string {
	switch t {
	case cds:
		return "CDS"
	case eds:
		return "EDS"
	case xds.ListenerType:
		return "LDS"
	}
	return t
}
