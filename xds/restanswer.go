package xds

import (
	"net/http"
	"sort"
	"strconv"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/xdsbridge/xdsbridge/xds/store"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// REST answers: the state a poll asks for, read from the store, and its
// encoding; NACKs.

// restItem is one resource of a REST answer.
type restItem struct {
	name    string
	version string
	any     *anypb.Any
	msg     proto.Message
}

// state returns the version of what the request asks for, and the channel
// closed on the cache's next change; with items, the resources too.
func (r *REST) state(typeURL string, names restNames, wild bool, items bool) (string, []restItem, <-chan struct{}) {
	var v uint64
	var out []restItem
	ch := r.store.Read(typeURL, names, wild, func(e *store.Entry) {
		v ^= e.VerHash
		if items {
			out = append(out, restItem{name: e.Name, version: e.Version, any: e.Any, msg: e.Msg})
		}
	})
	if typeURL == ClusterType {
		v ^= r.edsHash
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return strconv.FormatUint(v, 16), out, ch
}

// answer writes a 200 with the resources.
func (r *REST) answer(w http.ResponseWriter, typeURL, version string, items []restItem, wild bool) {
	var b []byte
	var err error
	if wild {
		// Every wildcard poll of a version gets the same bytes: encoded
		// once (5,000 clusters: 1.4 MB of JSON, ~80 ms), not per client.
		enc := r.wild[typeURL]
		enc.mu.Lock()
		if enc.version != version || enc.body == nil {
			enc.body, err = r.encode(typeURL, version, items)
			enc.version = version
			if err != nil {
				enc.body = nil
			}
		}
		b = enc.body
		enc.mu.Unlock()
	} else {
		b, err = r.encode(typeURL, version, items)
	}
	if err != nil {
		r.requests.WithLabelValues(servedType(typeURL), "500").Inc()
		r.log.Error("REST xDS: encoding a response", "type", typeURL, "error", err)
		http.Error(w, "xdsbridge: encoding the response failed", http.StatusInternalServerError)
		return
	}
	r.requests.WithLabelValues(servedType(typeURL), "200").Inc()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

// encode returns the JSON DiscoveryResponse of items.
func (r *REST) encode(typeURL, version string, items []restItem) ([]byte, error) {
	r.encodings.WithLabelValues(servedType(typeURL)).Inc()
	resp := &discovery.DiscoveryResponse{VersionInfo: version, TypeUrl: typeURL, Nonce: version, Resources: make([]*anypb.Any, 0, len(items))}
	for _, it := range items {
		a := it.any
		if typeURL == ClusterType && r.edsSource != nil {
			a = r.rewriteCluster(it)
		}
		resp.Resources = append(resp.Resources, a)
	}
	return protojson.Marshal(resp)
}

func (r *REST) notModified(w http.ResponseWriter, typeURL string) {
	r.requests.WithLabelValues(servedType(typeURL), "304").Inc()
	w.WriteHeader(http.StatusNotModified)
}

// rewriteCluster returns the cluster with its EDS config source replaced
// by the REST one, encoded once per cluster version.
func (r *REST) rewriteCluster(it restItem) *anypb.Any {
	c, ok := it.msg.(*cluster.Cluster)
	if !ok || c.GetEdsClusterConfig() == nil {
		return it.any
	}
	r.mu.Lock()
	rc, ok := r.clusters[it.name]
	r.mu.Unlock()
	if ok && rc.version == it.version {
		return rc.any
	}
	nc := proto.Clone(c).(*cluster.Cluster)
	nc.EdsClusterConfig.EdsConfig = r.edsSource
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(nc)
	if err != nil {
		return it.any
	}
	a := &anypb.Any{TypeUrl: ClusterType, Value: b}
	r.mu.Lock()
	if len(r.clusters) >= 1<<16 {
		r.clusters = map[string]restRewrittenCluster{} // forget removed clusters' encodings
	}
	r.clusters[it.name] = restRewrittenCluster{version: it.version, any: a}
	r.mu.Unlock()
	return a
}

// nack logs and counts a REST NACK once per node, type and nonce.
func (r *REST) nack(dr *discovery.DiscoveryRequest, typeURL, nonce string) {
	node, _ := bound(dr.GetNode().GetId(), "", MaxClientStringBytes)
	nonce, _ = bound(nonce, "", MaxClientStringBytes)
	key := node + "\x00" + typeURL
	r.mu.Lock()
	if r.nacked[key] == nonce {
		r.mu.Unlock()
		r.s.m.nackLogsSuppressed.WithLabelValues("repeated").Inc()
		return
	}
	if len(r.nacked) >= 4096 {
		r.nacked = map[string]string{}
	}
	r.nacked[key] = nonce
	r.mu.Unlock()

	s := r.s
	msg, cut := bound(dr.GetErrorDetail().GetMessage(), "", MaxNACKMessageBytes)
	if cut {
		s.m.truncated.WithLabelValues("nack_message").Inc()
	}
	s.mu.Lock()
	s.nackTotal++
	logIt, suppressed := s.nackLogAll.allow(time.Now())
	s.mu.Unlock()
	s.m.nacks.WithLabelValues(servedType(typeURL), "rest").Inc()
	if !logIt {
		s.m.nackLogsSuppressed.WithLabelValues("server_rate").Inc()
		return
	}
	args := []any{"node", node, "mode", "rest", "type", typeURL, "nonce", nonce, "error", msg}
	if suppressed > 0 {
		args = append(args, "nacks_not_logged_server_wide", suppressed)
	}
	s.log.Warn("xDS client rejected an update (NACK); it keeps its previous config and the same content is not sent again", args...)
}
