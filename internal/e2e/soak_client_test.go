package e2e

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xdsbridge/xdsbridge/xds"
)

// soakClient is a raw ADS client (delta or SotW) on the generated stubs
// that behaves as Envoy does for clusters: a wildcard CDS subscription and
// an EDS subscription to the assignment of every cluster it holds. It ACKs
// every response it can decode (and NACKs, counted, one it cannot) and
// keeps the decoded resources it holds, with their versions (delta).
//
// On a reconnect it keeps what it holds, as Envoy does: a delta client
// sends it back as initial_resource_versions, a SotW client is told the
// whole CDS state again and its EDS subscription.
type soakClient struct {
	addr  string
	node  string
	delta bool

	mu        sync.Mutex
	clusters  map[string]heldMsg // name → cluster
	clas      map[string]heldMsg // name → assignment (subscribed names only)
	edsSubs   map[string]bool    // EDS names subscribed on the stream
	edsVer    string             // sotw: last EDS version_info accepted
	edsNonce  string             // sotw: last EDS nonce
	streamErr error              // an end of the stream we did not cause

	responses, acks, nacks, reconnects atomic.Int64

	conn   *grpc.ClientConn
	cancel context.CancelFunc
	done   chan struct{}
}

type heldMsg struct {
	version string // delta: the resource's version; sotw: the response's
	msg     proto.Message
}

func newSoakClient(addr, node string, delta bool) *soakClient {
	return &soakClient{addr: addr, node: node, delta: delta,
		clusters: map[string]heldMsg{}, clas: map[string]heldMsg{}, edsSubs: map[string]bool{}}
}

func (c *soakClient) kind() string {
	if c.delta {
		return "delta"
	}
	return "sotw"
}

// connect opens a new connection and stream and sends the first requests.
func (c *soakClient) connect() error {
	conn, err := grpc.NewClient(c.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	ads := discovery.NewAggregatedDiscoveryServiceClient(conn)
	done := make(chan struct{})
	node := &core.Node{Id: c.node, Cluster: "soak"}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.conn, c.cancel, c.done = conn, cancel, done
	if c.delta {
		st, err := ads.DeltaAggregatedResources(ctx)
		if err != nil {
			cancel()
			conn.Close()
			return err
		}
		first := &discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: xds.ClusterType,
			ResourceNamesSubscribe: []string{"*"}, InitialResourceVersions: versions(c.clusters)}
		if err := st.Send(first); err != nil {
			cancel()
			conn.Close()
			return err
		}
		c.edsSubs = map[string]bool{}
		if len(c.clas) > 0 || len(c.clusters) > 0 {
			names := sortedNames(c.clusters)
			for _, n := range names {
				c.edsSubs[n] = true
			}
			// Assignments of clusters no longer held were dropped with them.
			if err := st.Send(&discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: xds.EndpointType,
				ResourceNamesSubscribe: names, InitialResourceVersions: versions(c.clas)}); err != nil {
				cancel()
				conn.Close()
				return err
			}
		}
		go c.runDelta(ctx, st, done)
		return nil
	}
	st, err := ads.StreamAggregatedResources(ctx)
	if err != nil {
		cancel()
		conn.Close()
		return err
	}
	if err := st.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: xds.ClusterType}); err != nil {
		cancel()
		conn.Close()
		return err
	}
	c.edsVer, c.edsNonce = "", ""
	c.edsSubs = map[string]bool{}
	if len(c.clusters) > 0 {
		names := sortedNames(c.clusters)
		for _, n := range names {
			c.edsSubs[n] = true
		}
		if err := st.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: xds.EndpointType, ResourceNames: names}); err != nil {
			cancel()
			conn.Close()
			return err
		}
	}
	go c.runSotw(ctx, st, done)
	return nil
}

// disconnect ends the stream and the connection and waits for the
// receiving goroutine.
func (c *soakClient) disconnect() {
	c.mu.Lock()
	cancel, done, conn := c.cancel, c.done, c.conn
	c.cancel, c.done, c.conn = nil, nil, nil
	c.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
	conn.Close()
}

// ended records why a stream ended, unless it was disconnect's doing (a
// Send racing with the cancel returns io.EOF, Recv Canceled).
func (c *soakClient) ended(ctx context.Context, err error) {
	if ctx.Err() != nil || grpcstatus.Code(err) == codes.Canceled || errors.Is(err, context.Canceled) {
		return
	}
	c.mu.Lock()
	if c.streamErr == nil {
		c.streamErr = err
	}
	c.mu.Unlock()
}

func (c *soakClient) err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.streamErr
}

func (c *soakClient) runDelta(ctx context.Context, st discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesClient, done chan struct{}) {
	defer close(done)
	for {
		resp, err := st.Recv()
		if err != nil {
			c.ended(ctx, err)
			return
		}
		c.responses.Add(1)
		for _, req := range c.applyDelta(resp) {
			if err := st.Send(req); err != nil {
				c.ended(ctx, err)
				return
			}
		}
	}
}

// applyDelta applies one delta response and returns the requests to send:
// its ACK (or NACK) and, after a CDS change, the EDS (un)subscriptions.
func (c *soakClient) applyDelta(resp *discovery.DeltaDiscoveryResponse) []*discovery.DeltaDiscoveryRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	held, isCDS := c.clas, resp.TypeUrl == xds.ClusterType
	if isCDS {
		held = c.clusters
	}
	// Decode everything first: a response is applied whole or rejected.
	decoded := map[string]heldMsg{}
	for _, r := range resp.Resources {
		m, err := decodeResource(resp.TypeUrl, r.Resource)
		if err != nil {
			c.nacks.Add(1)
			return []*discovery.DeltaDiscoveryRequest{{TypeUrl: resp.TypeUrl, ResponseNonce: resp.Nonce,
				ErrorDetail: &status.Status{Code: int32(codes.InvalidArgument), Message: fmt.Sprintf("%s: %v", r.Name, err)}}}
		}
		decoded[r.Name] = heldMsg{version: r.Version, msg: m}
	}
	for n, h := range decoded {
		if !isCDS && !c.edsSubs[n] {
			continue // no longer subscribed: not kept
		}
		held[n] = h
	}
	for _, n := range resp.RemovedResources {
		delete(held, n)
	}
	c.acks.Add(1)
	out := []*discovery.DeltaDiscoveryRequest{{TypeUrl: resp.TypeUrl, ResponseNonce: resp.Nonce}}
	if isCDS {
		var subs, unsubs []string
		for n := range c.clusters {
			if !c.edsSubs[n] {
				subs = append(subs, n)
				c.edsSubs[n] = true
			}
		}
		for n := range c.edsSubs {
			if _, ok := c.clusters[n]; !ok {
				unsubs = append(unsubs, n)
				delete(c.edsSubs, n)
				delete(c.clas, n)
			}
		}
		if len(subs)+len(unsubs) > 0 {
			sort.Strings(subs)
			sort.Strings(unsubs)
			out = append(out, &discovery.DeltaDiscoveryRequest{TypeUrl: xds.EndpointType,
				ResourceNamesSubscribe: subs, ResourceNamesUnsubscribe: unsubs})
		}
	}
	return out
}

func (c *soakClient) runSotw(ctx context.Context, st discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient, done chan struct{}) {
	defer close(done)
	for {
		resp, err := st.Recv()
		if err != nil {
			c.ended(ctx, err)
			return
		}
		c.responses.Add(1)
		for _, req := range c.applySotw(resp) {
			if err := st.Send(req); err != nil {
				c.ended(ctx, err)
				return
			}
		}
	}
}

// applySotw applies one SotW response: CDS is the whole set of clusters;
// EDS carries some of the subscribed assignments (a split response carries
// part of them), each replacing the one held.
func (c *soakClient) applySotw(resp *discovery.DiscoveryResponse) []*discovery.DiscoveryRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	isCDS := resp.TypeUrl == xds.ClusterType
	decoded := map[string]heldMsg{}
	for _, r := range resp.Resources {
		m, err := decodeResource(resp.TypeUrl, r)
		if err == nil && name(m) == "" {
			err = errors.New("resource without a name")
		}
		if err != nil {
			c.nacks.Add(1)
			ver := c.edsVer
			if isCDS {
				ver = "" // not tracked: never expected
			}
			return []*discovery.DiscoveryRequest{{TypeUrl: resp.TypeUrl, ResponseNonce: resp.Nonce, VersionInfo: ver,
				ResourceNames: c.sotwNames(isCDS), ErrorDetail: &status.Status{Code: int32(codes.InvalidArgument), Message: err.Error()}}}
		}
		decoded[name(m)] = heldMsg{version: resp.VersionInfo, msg: m}
	}
	c.acks.Add(1)
	if !isCDS {
		for n, h := range decoded {
			if c.edsSubs[n] {
				c.clas[n] = h
			}
		}
		c.edsVer, c.edsNonce = resp.VersionInfo, resp.Nonce
		return []*discovery.DiscoveryRequest{{TypeUrl: xds.EndpointType, ResponseNonce: resp.Nonce,
			VersionInfo: resp.VersionInfo, ResourceNames: c.sotwNames(false)}}
	}
	c.clusters = decoded
	out := []*discovery.DiscoveryRequest{{TypeUrl: xds.ClusterType, ResponseNonce: resp.Nonce, VersionInfo: resp.VersionInfo}}
	changed := len(c.edsSubs) != len(c.clusters)
	for n := range c.clusters {
		changed = changed || !c.edsSubs[n]
	}
	if changed {
		c.edsSubs = map[string]bool{}
		for n := range c.clusters {
			c.edsSubs[n] = true
		}
		for n := range c.clas {
			if !c.edsSubs[n] {
				delete(c.clas, n)
			}
		}
		out = append(out, &discovery.DiscoveryRequest{TypeUrl: xds.EndpointType, ResponseNonce: c.edsNonce,
			VersionInfo: c.edsVer, ResourceNames: c.sotwNames(false)})
	}
	return out
}

func (c *soakClient) sotwNames(cds bool) []string {
	if cds {
		return nil
	}
	out := make([]string, 0, len(c.edsSubs))
	for n := range c.edsSubs {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// snapshot copies what the client holds.
func (c *soakClient) snapshot() (clusters, clas map[string]heldMsg) {
	c.mu.Lock()
	defer c.mu.Unlock()
	clusters, clas = map[string]heldMsg{}, map[string]heldMsg{}
	for n, h := range c.clusters {
		clusters[n] = h
	}
	for n, h := range c.clas {
		clas[n] = h
	}
	return clusters, clas
}

func decodeResource(typeURL string, a *anypb.Any) (proto.Message, error) {
	if a == nil {
		return nil, errors.New("no resource")
	}
	var m proto.Message
	switch typeURL {
	case xds.ClusterType:
		m = &cluster.Cluster{}
	case xds.EndpointType:
		m = &endpoint.ClusterLoadAssignment{}
	default:
		return nil, fmt.Errorf("unexpected type %s", typeURL)
	}
	if a.TypeUrl != typeURL {
		return nil, fmt.Errorf("resource of type %s in a %s response", a.TypeUrl, typeURL)
	}
	if err := a.UnmarshalTo(m); err != nil {
		return nil, err
	}
	if v, ok := m.(interface{ ValidateAll() error }); ok {
		if err := v.ValidateAll(); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func name(m proto.Message) string {
	switch m := m.(type) {
	case *cluster.Cluster:
		return m.Name
	case *endpoint.ClusterLoadAssignment:
		return m.ClusterName
	}
	return ""
}

func versions(m map[string]heldMsg) map[string]string {
	if len(m) == 0 {
		return nil
	}
	out := map[string]string{}
	for n, h := range m {
		out[n] = h.version
	}
	return out
}

func sortedNames[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for n := range m {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// endpointSet is an assignment as a client acts on it: per endpoint its
// priority, locality and the locality's weight, address:port, health
// status and weight, sorted.
func endpointSet(cla *endpoint.ClusterLoadAssignment) string {
	if cla == nil {
		return "<none>"
	}
	var eps []string
	for _, le := range cla.Endpoints {
		l := le.GetLocality()
		loc := fmt.Sprintf("p%d %s/%s/%s lw%d", le.Priority, l.GetRegion(), l.GetZone(), l.GetSubZone(), le.GetLoadBalancingWeight().GetValue())
		for _, lb := range le.LbEndpoints {
			sa := lb.GetEndpoint().GetAddress().GetSocketAddress()
			eps = append(eps, fmt.Sprintf("%s %s:%d %s w%d", loc, sa.GetAddress(), sa.GetPortValue(), lb.HealthStatus, lb.GetLoadBalancingWeight().GetValue()))
		}
	}
	sort.Strings(eps)
	return "[" + strings.Join(eps, "; ") + "]"
}
