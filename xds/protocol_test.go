package xds_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sort"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xdsbridge/xdsbridge/sources"
	"github.com/xdsbridge/xdsbridge/translate"
	"github.com/xdsbridge/xdsbridge/xds"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	cds = xds.ClusterType
	eds = xds.EndpointType
)

// harness runs a cache and server on 127.0.0.1:0.
type harness struct {
	t     *testing.T
	cache *xds.Cache
	srv   *xds.Server
	conn  *grpc.ClientConn
}

func newHarness(t *testing.T, ready bool, opts ...xds.Option) *harness {
	t.Helper()
	c := xds.NewCache(opts...)
	if ready {
		c.MarkReady()
	}
	// The protocol tests multiplex their clients on one connection (the
	// limits have their own tests, guard_test.go).
	s := xds.NewServer(c, xds.Options{Limits: xds.Limits{MaxStreamsPerConnection: 256}})
	conn, err := grpc.NewClient(runServer(t, s), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() }) // before the server stops (cleanups run last first)
	return &harness{t: t, cache: c, srv: s, conn: conn}
}

// runServer serves s on a loopback port until the test ends, and returns
// its address.
func runServer(t *testing.T, s *xds.Server) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, lis) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server: %v", err)
		}
	})
	return lis.Addr().String()
}

func svc(name string, ports ...uint32) translate.Resources {
	s := sources.Service{Name: name}
	for _, p := range ports {
		s.Endpoints = append(s.Endpoints, sources.Endpoint{Address: "127.0.0.1", Port: p})
	}
	r, _ := translate.Service(s)
	return r
}

// waitWatches waits until the cache holds n open watches of each type, i.e.
// the client's ACKs have arrived.
func (h *harness) waitWatches(n int, types ...string) {
	h.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := h.cache.Stats()
		ok := true
		for _, t := range types {
			ok = ok && st.Watches[t] >= n
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("timed out waiting for %d watches of %v: %v", n, types, st.Watches)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// services are n services s00, s01, ... with one endpoint each, and their names.
func services(n int) ([]translate.Resources, []string) {
	var all []translate.Resources
	var names []string
	for i := range n {
		name := fmt.Sprintf("s%02d", i)
		all = append(all, svc(name, 1000+uint32(i)))
		names = append(names, name)
	}
	return all, names
}

func (h *harness) publish(changed []translate.Resources, removed ...string) {
	h.t.Helper()
	if err := h.cache.PublishServices(changed, removed); err != nil {
		h.t.Fatal(err)
	}
}

// adsStream is a raw ADS stream of either variant: requests go out as sent,
// responses are read in the background.
type adsStream[Req, Resp any] struct {
	t        *testing.T
	ended    chan struct{} // closed when the stream ends (err set)
	err      error
	sendFn   func(Req) error
	resp     chan Resp
	cancel   context.CancelFunc
	describe func(Resp) string
}

type grpcStream[Req, Resp any] interface {
	Send(Req) error
	Recv() (Resp, error)
}

func openStream[Req, Resp any](h *harness, open func(context.Context) (grpcStream[Req, Resp], error), describe func(Resp) string) *adsStream[Req, Resp] {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st, err := open(ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	c := &adsStream[Req, Resp]{t: h.t, sendFn: st.Send, resp: make(chan Resp, 100), cancel: cancel, describe: describe, ended: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			r, err := st.Recv()
			if err != nil {
				c.err = err
				close(c.ended)
				return
			}
			c.resp <- r
		}
	}()
	h.t.Cleanup(func() { cancel(); <-done })
	return c
}

func (c *adsStream[Req, Resp]) send(r Req) {
	c.t.Helper()
	if err := c.sendFn(r); err != nil {
		c.t.Fatal(err)
	}
}

func (c *adsStream[Req, Resp]) recv() Resp {
	c.t.Helper()
	select {
	case r := <-c.resp:
		return r
	case <-time.After(5 * time.Second):
		c.t.Fatal("timed out waiting for a response")
		var zero Resp
		return zero
	}
}

// none proves no response arrives for a while.
func (c *adsStream[Req, Resp]) none() {
	c.t.Helper()
	select {
	case r := <-c.resp:
		c.t.Fatalf("unexpected response: %s", c.describe(r))
	case <-time.After(300 * time.Millisecond):
	}
}

// deltaClient is a raw delta ADS stream.
type deltaClient struct {
	*adsStream[*discovery.DeltaDiscoveryRequest, *discovery.DeltaDiscoveryResponse]
}

func (h *harness) delta(node string) *deltaClient {
	h.t.Helper()
	return &deltaClient{openStream(h, func(ctx context.Context) (grpcStream[*discovery.DeltaDiscoveryRequest, *discovery.DeltaDiscoveryResponse], error) {
		return discovery.NewAggregatedDiscoveryServiceClient(h.conn).DeltaAggregatedResources(ctx)
	}, func(r *discovery.DeltaDiscoveryResponse) string {
		return fmt.Sprintf("type %s, resources %v, removed %v", r.TypeUrl, names(r), r.RemovedResources)
	})}
}

func (c *deltaClient) send(r *discovery.DeltaDiscoveryRequest) {
	c.t.Helper()
	if r.Node == nil {
		r.Node = &core.Node{Id: "test-node"}
	}
	c.adsStream.send(r)
}

func (c *deltaClient) ack(r *discovery.DeltaDiscoveryResponse) {
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: r.TypeUrl, ResponseNonce: r.Nonce})
}

func names(r *discovery.DeltaDiscoveryResponse) []string {
	var out []string
	for _, res := range r.Resources {
		out = append(out, res.Name)
	}
	sort.Strings(out)
	return out
}

func versions(r *discovery.DeltaDiscoveryResponse) map[string]string {
	out := map[string]string{}
	for _, res := range r.Resources {
		out[res.Name] = res.Version
	}
	return out
}

func eq(t *testing.T, what string, want, got any) {
	t.Helper()
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("%s (-want +got):\n%s", what, d)
	}
}

func TestDeltaWildcardCDSAndNamedEDS(t *testing.T) {
	h := newHarness(t, true)
	h.publish([]translate.Resources{svc("a", 1001), svc("b", 1002)})
	c := h.delta("n1")

	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: cds})
	r := c.recv()
	eq(t, "wildcard CDS", []string{"a", "b"}, names(r))
	c.ack(r)

	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: []string{"a"}})
	r = c.recv()
	eq(t, "EDS a", []string{"a"}, names(r))
	c.ack(r)
	c.none()

	// A change to b: the client is not subscribed to b's endpoints and b's
	// cluster did not change, so nothing is sent.
	h.publish([]translate.Resources{svc("b", 1002, 1003)})
	c.none()

	// A change to a: only a's endpoints, not its cluster.
	h.publish([]translate.Resources{svc("a", 1001, 1004)})
	r = c.recv()
	eq(t, "type", eds, r.TypeUrl)
	eq(t, "EDS a after change", []string{"a"}, names(r))
	var cla endpoint.ClusterLoadAssignment
	if err := r.Resources[0].Resource.UnmarshalTo(&cla); err != nil {
		t.Fatal(err)
	}
	eq(t, "endpoints of a", 2, len(cla.Endpoints[0].LbEndpoints))
	c.ack(r)
	c.none()

	// Subscribe b, then unsubscribe a: changes to a no longer reach us.
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: []string{"b"}, ResourceNamesUnsubscribe: []string{"a"}})
	r = c.recv()
	eq(t, "EDS b", []string{"b"}, names(r))
	c.ack(r)
	h.publish([]translate.Resources{svc("a", 1001)})
	c.none()
}

func TestDeltaRemovalOrderAndAdditionOrder(t *testing.T) {
	h := newHarness(t, true)
	h.publish([]translate.Resources{svc("a", 1001)})
	c := h.delta("n1")
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: cds})
	c.ack(c.recv())
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: []string{"a", "b"}})
	c.ack(c.recv())
	h.waitWatches(1, cds, eds)

	// Adding b: its cluster comes before its endpoints.
	h.publish([]translate.Resources{svc("b", 1002)})
	r1 := c.recv()
	r2 := c.recv()
	eq(t, "first push", cds, r1.TypeUrl)
	eq(t, "second push", eds, r2.TypeUrl)
	c.ack(r1)
	c.ack(r2)
	h.waitWatches(1, cds, eds)

	// Removing a: endpoints first, the cluster last.
	h.publish(nil, "a")
	r1 = c.recv()
	r2 = c.recv()
	eq(t, "first removal", eds, r1.TypeUrl)
	eq(t, "removed EDS", []string{"a"}, r1.RemovedResources)
	eq(t, "last removal", cds, r2.TypeUrl)
	eq(t, "removed CDS", []string{"a"}, r2.RemovedResources)
}

func TestDeltaClusterChangeResendsEndpoints(t *testing.T) {
	h := newHarness(t, true)
	h.publish([]translate.Resources{svc("a", 1001)})
	c := h.delta("n1")
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: cds})
	c.ack(c.recv())
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: []string{"a"}})
	first := c.recv()
	c.ack(first)
	h.waitWatches(1, cds, eds)

	// Same endpoints, changed cluster: Envoy warms the new cluster and needs
	// its endpoints again.
	r := svc("a", 1001)
	r.Cluster.ConnectTimeout.Seconds = 7
	h.publish([]translate.Resources{r})
	r1, r2 := c.recv(), c.recv()
	eq(t, "cluster first", cds, r1.TypeUrl)
	eq(t, "then endpoints", eds, r2.TypeUrl)
	eq(t, "EDS a resent", []string{"a"}, names(r2))
	if !proto.Equal(first.Resources[0].Resource, r2.Resources[0].Resource) {
		t.Fatal("endpoint content changed; want the same content re-sent")
	}
	if first.Resources[0].Version == r2.Resources[0].Version {
		t.Fatal("re-sent endpoints carry the same version")
	}
}

func TestDeltaReconnectWithInitialVersions(t *testing.T) {
	h := newHarness(t, true)
	h.publish([]translate.Resources{svc("a", 1001), svc("b", 1002)})
	c := h.delta("n1")
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: cds})
	cdsResp := c.recv()
	c.ack(cdsResp)
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: []string{"a", "b"}})
	edsResp := c.recv()
	c.ack(edsResp)
	c.cancel()

	// A replica (or the same bridge restarted) with the same content has the
	// same versions: a client reconnecting with them receives nothing it has.
	h2 := newHarness(t, true)
	h2.publish([]translate.Resources{svc("b", 1002), svc("a", 1001)})
	c2 := h2.delta("n1")
	c2.send(&discovery.DeltaDiscoveryRequest{TypeUrl: cds, InitialResourceVersions: versions(cdsResp)})
	r := c2.recv() // the first wildcard request is always answered, here with nothing
	eq(t, "resources resent on reconnect", 0, len(r.Resources))
	c2.ack(r)
	c2.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: []string{"a", "b"}, InitialResourceVersions: versions(edsResp)})
	r = c2.recv() // answered, with nothing: the client's state is taken as it is
	eq(t, "resources resent on reconnect", 0, len(r.Resources)+len(r.RemovedResources))
	c2.ack(r)
	c2.none()

	// One stale version: only that one is sent.
	stale := versions(edsResp)
	stale["a"] = "stale"
	c3 := h2.delta("n2")
	c3.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: []string{"a", "b"}, InitialResourceVersions: stale})
	eq(t, "only the stale resource", []string{"a"}, names(c3.recv()))
}

func TestDeltaNACKIsNotAnsweredWithSameContent(t *testing.T) {
	h := newHarness(t, true)
	h.publish([]translate.Resources{svc("a", 1001)})
	c := h.delta("n1")
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: []string{"a"}})
	r := c.recv()
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResponseNonce: r.Nonce, ErrorDetail: &status.Status{Code: 3, Message: "rejected for the test"}})
	// The answer installs the state that remembers the rejection: empty.
	e := c.recv()
	eq(t, "answer to the NACK", 0, len(e.Resources)+len(e.RemovedResources))
	c.ack(e)
	c.none()
	if n := h.srv.NACKs(); n != 1 {
		t.Fatalf("NACKs counted = %d, want 1", n)
	}
	// New content is sent.
	h.publish([]translate.Resources{svc("a", 1002)})
	eq(t, "new content after NACK", []string{"a"}, names(c.recv()))
}

func TestNotServedBeforeReady(t *testing.T) {
	h := newHarness(t, false)
	h.publish([]translate.Resources{svc("a", 1001)})
	c := h.delta("n1")
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: cds})
	c.none()
	h.cache.MarkReady()
	eq(t, "after ready", []string{"a"}, names(c.recv()))
}

// sotwClient is a raw state-of-the-world ADS stream.
type sotwClient struct {
	*adsStream[*discovery.DiscoveryRequest, *discovery.DiscoveryResponse]
}

func (h *harness) sotw() *sotwClient {
	h.t.Helper()
	return &sotwClient{openStream(h, func(ctx context.Context) (grpcStream[*discovery.DiscoveryRequest, *discovery.DiscoveryResponse], error) {
		return discovery.NewAggregatedDiscoveryServiceClient(h.conn).StreamAggregatedResources(ctx)
	}, func(r *discovery.DiscoveryResponse) string {
		return fmt.Sprintf("type %s version %s, %d resources", r.TypeUrl, r.VersionInfo, len(r.Resources))
	})}
}

func (c *sotwClient) send(r *discovery.DiscoveryRequest) {
	c.t.Helper()
	if r.Node == nil {
		r.Node = &core.Node{Id: "grpc-client"}
	}
	c.adsStream.send(r)
}

func sotwNames(t *testing.T, r *discovery.DiscoveryResponse) []string {
	t.Helper()
	var out []string
	for _, a := range r.Resources {
		switch r.TypeUrl {
		case cds:
			var c cluster.Cluster
			if err := a.UnmarshalTo(&c); err != nil {
				t.Fatal(err)
			}
			out = append(out, c.Name)
		case eds:
			var c endpoint.ClusterLoadAssignment
			if err := a.UnmarshalTo(&c); err != nil {
				t.Fatal(err)
			}
			out = append(out, c.ClusterName)
		}
	}
	sort.Strings(out)
	return out
}

func TestSotwFullStateCDSAndIncrementalEDS(t *testing.T) {
	h := newHarness(t, true)
	h.publish([]translate.Resources{svc("a", 1001), svc("b", 1002)})
	c := h.sotw()
	c.send(&discovery.DiscoveryRequest{TypeUrl: cds})
	r := c.recv()
	eq(t, "CDS", []string{"a", "b"}, sotwNames(t, r))
	c.send(&discovery.DiscoveryRequest{TypeUrl: cds, VersionInfo: r.VersionInfo, ResponseNonce: r.Nonce})
	c.send(&discovery.DiscoveryRequest{TypeUrl: eds, ResourceNames: []string{"a", "b"}})
	e := c.recv()
	eq(t, "EDS", []string{"a", "b"}, sotwNames(t, e))
	c.send(&discovery.DiscoveryRequest{TypeUrl: eds, ResourceNames: []string{"a", "b"}, VersionInfo: e.VersionInfo, ResponseNonce: e.Nonce})
	c.none()

	// Endpoint change of b: EDS carries only b; CDS is not resent.
	h.publish([]translate.Resources{svc("b", 1003)})
	e = c.recv()
	eq(t, "EDS change", eds, e.TypeUrl)
	eq(t, "EDS change", []string{"b"}, sotwNames(t, e))
	c.send(&discovery.DiscoveryRequest{TypeUrl: eds, ResourceNames: []string{"a", "b"}, VersionInfo: e.VersionInfo, ResponseNonce: e.Nonce})
	c.none()

	// Removing a: the full-state CDS response no longer lists it.
	h.publish(nil, "a")
	r = c.recv()
	eq(t, "CDS after removal", []string{"b"}, sotwNames(t, r))
}

func TestSotwNACKOfFirstResponseIsNotResent(t *testing.T) {
	h := newHarness(t, true)
	h.publish([]translate.Resources{svc("a", 1001)})
	c := h.sotw()
	c.send(&discovery.DiscoveryRequest{TypeUrl: cds})
	r := c.recv()
	// A NACK of the first response carries an empty version_info.
	c.send(&discovery.DiscoveryRequest{TypeUrl: cds, ResponseNonce: r.Nonce, ErrorDetail: &status.Status{Code: 3, Message: "bad cluster"}})
	c.none()
	if n := h.srv.NACKs(); n != 1 {
		t.Fatalf("NACKs = %d, want 1", n)
	}
	h.publish([]translate.Resources{svc("b", 1002)})
	eq(t, "new state after NACK", []string{"a", "b"}, sotwNames(t, c.recv()))
}

func TestEachVersionEncodedOnce(t *testing.T) {
	h := newHarness(t, true)
	h.publish([]translate.Resources{svc("a", 1001)})
	before := h.cache.Stats().Marshals
	var clients []*deltaClient
	for i := 0; i < 20; i++ {
		c := h.delta("n")
		c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: []string{"a"}})
		c.ack(c.recv())
		clients = append(clients, c)
	}
	h.publish([]translate.Resources{svc("a", 1001, 1002)})
	for _, c := range clients {
		eq(t, "update", []string{"a"}, names(c.recv()))
	}
	// Only the changed endpoint resource is encoded (the unchanged cluster,
	// listener and route are not), once, whatever the number of clients.
	eq(t, "encodings for 20 clients", uint64(1), h.cache.Stats().Marshals-before)
}

// TestDeltaLargeResponseSplit: above the size bound a delta response
// carries part of what is pending; each ACK brings the next part, a change
// made in between is not lost, and no version is sent twice.
func TestDeltaLargeResponseSplit(t *testing.T) {
	all, want := services(10)
	// The bound counts each resource as encoded in the response (name,
	// version, Any, tag and length) and the response's own fields (type
	// URL, nonce, version: at most len(type URL)+64): three assignments a
	// response. (A bound of 3×proto.Size(assignment) is below the
	// response's own fields: every part carried one assignment.)
	c0 := xds.NewCache()
	if err := c0.PublishServices(all, nil); err != nil {
		t.Fatal(err)
	}
	any0, err := anypb.New(all[0].Load)
	if err != nil {
		t.Fatal(err)
	}
	per := proto.Size(&discovery.DeltaDiscoveryResponse{Resources: []*discovery.Resource{{Name: want[0], Version: current(c0, eds)[want[0]], Resource: any0}}})
	h := newHarness(t, true, xds.WithMaxResponseBytes(len(eds)+64+3*per+per/2)) // three assignments a response
	h.publish(all)
	current := func() map[string]string { return current(h.cache, eds) }
	c := h.delta("n1")
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: want})
	got := map[string]string{}
	sent := map[string]bool{} // name@version
	var parts int
	for parts < 20 && !cmp.Equal(got, current()) {
		r := c.recv()
		parts++
		if len(r.Resources) > 3 {
			t.Fatalf("part %d carries %d resources, bound is 3", parts, len(r.Resources))
		}
		if parts == 1 && len(r.Resources) != 3 {
			t.Fatalf("the first part carries %d resources, want 3", len(r.Resources))
		}
		for n, v := range versions(r) {
			if sent[n+"@"+v] {
				t.Fatalf("%s@%s sent twice", n, v)
			}
			sent[n+"@"+v] = true
			got[n] = v
		}
		if parts == 2 {
			// s00 (already sent) and s09 (not yet) change mid-way.
			h.publish([]translate.Resources{svc("s00", 2000), svc("s09", 2009)})
		}
		c.ack(r)
	}
	c.none()
	eq(t, "versions held", current(), got)
	eq(t, "resources sent", 11, len(sent)) // ten, and s00's second version

	// A reconnect with every version known gets nothing back.
	c2 := h.delta("n1")
	c2.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: want, InitialResourceVersions: current()})
	r := c2.recv()
	eq(t, "resent on reconnect", 0, len(r.Resources)+len(r.RemovedResources))
	c2.ack(r)
	c2.none()
	// ... and its state is the compact one: a change sends only itself.
	h.publish([]translate.Resources{svc("s05", 3005)})
	eq(t, "after a change", []string{"s05"}, names(c2.recv()))
}

// TestSotwSubscriptionChange: a sotw client that adds a name to its request
// (carrying the last nonce, as grpc-go does when it starts using another
// cluster) gets the new resource; one that drops a name and adds it back
// gets it again.
func TestSotwSubscriptionChange(t *testing.T) {
	h := newHarness(t, true)
	h.publish([]translate.Resources{svc("a", 1001), svc("b", 1002)})
	c := h.sotw()
	c.send(&discovery.DiscoveryRequest{TypeUrl: eds, ResourceNames: []string{"a"}})
	e := c.recv()
	eq(t, "EDS a", []string{"a"}, sotwNames(t, e))
	c.send(&discovery.DiscoveryRequest{TypeUrl: eds, ResourceNames: []string{"a"}, VersionInfo: e.VersionInfo, ResponseNonce: e.Nonce})
	c.none()

	c.send(&discovery.DiscoveryRequest{TypeUrl: eds, ResourceNames: []string{"a", "b"}, VersionInfo: e.VersionInfo, ResponseNonce: e.Nonce})
	e = c.recv()
	if got := sotwNames(t, e); !slices.Contains(got, "b") {
		t.Fatalf("after subscribing b: got %v, want b among them", got)
	}
	c.send(&discovery.DiscoveryRequest{TypeUrl: eds, ResourceNames: []string{"a", "b"}, VersionInfo: e.VersionInfo, ResponseNonce: e.Nonce})
	c.none()

	c.send(&discovery.DiscoveryRequest{TypeUrl: eds, ResourceNames: []string{"a"}, VersionInfo: e.VersionInfo, ResponseNonce: e.Nonce})
	c.none()
	c.send(&discovery.DiscoveryRequest{TypeUrl: eds, ResourceNames: []string{"a", "b"}, VersionInfo: e.VersionInfo, ResponseNonce: e.Nonce})
	e = c.recv()
	if got := sotwNames(t, e); !slices.Contains(got, "b") {
		t.Fatalf("after subscribing b again: got %v, want b among them", got)
	}
}

// TestDeltaClientBehind: a delta client that has not ACKed while several
// changes were made gets, on its ACK, only the net result: the changed and
// created resources in their current versions, removals of deleted ones,
// and nothing it already holds.
func TestDeltaClientBehind(t *testing.T) {
	h := newHarness(t, true)
	h.publish([]translate.Resources{svc("a", 1001), svc("b", 1002), svc("c", 1003)})
	c := h.delta("n1")
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: cds})
	c.ack(c.recv())
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: []string{"a", "b", "c", "d"}})
	r := c.recv()
	eq(t, "initial EDS", []string{"a", "b", "c"}, names(r))
	// Not ACKed yet: a changes twice, b is deleted, d is created, c is
	// deleted and created again with the same content.
	h.publish([]translate.Resources{svc("a", 2001)})
	h.publish([]translate.Resources{svc("a", 3001)}, "b")
	h.publish([]translate.Resources{svc("d", 1004)}, "c")
	h.publish([]translate.Resources{svc("c", 1003)})
	c.ack(r)
	// CDS is answered too (b, c removed; c, d added). The assignments of
	// c and d wait for their clusters: the CDS response that carries them
	// waits for the ACK of the one that removed b and c.
	sentEDS, removedEDS := map[string]string{}, []string{}
	clusters := map[string]bool{}
	var got *discovery.DeltaDiscoveryResponse
	for {
		var r *discovery.DeltaDiscoveryResponse
		select {
		case r = <-c.resp:
		case <-time.After(300 * time.Millisecond):
		}
		if r == nil {
			break
		}
		switch r.TypeUrl {
		case cds:
			for _, n := range names(r) {
				clusters[n] = true
			}
		case eds:
			got = r
			for n, v := range versions(r) {
				if (n == "c" || n == "d") && !clusters[n] {
					t.Fatalf("assignment %s sent before its cluster", n)
				}
				if _, twice := sentEDS[n]; twice {
					t.Fatalf("assignment %s sent twice", n)
				}
				sentEDS[n] = v
			}
			removedEDS = append(removedEDS, r.RemovedResources...)
		}
		c.ack(r)
	}
	// c's content is the same, but it was deleted in between: the client
	// may have dropped it, so it comes again.
	eq(t, "EDS sent after the ACK", current(h.cache, eds), sentEDS)
	eq(t, "EDS removed after the ACK", []string{"b"}, removedEDS)
	// An unsubscribe and subscribe again brings the resource back.
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResponseNonce: got.Nonce, ResourceNamesUnsubscribe: []string{"d"}})
	c.none()
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResponseNonce: got.Nonce, ResourceNamesSubscribe: []string{"d"}})
	eq(t, "resubscribed", []string{"d"}, names(c.recv()))
}

// TestDeltaWildcardExplicitUnsubscribe: a wildcard client that unsubscribes
// a name it also subscribed explicitly still gets it (wildcard), sent again
// as the protocol asks (the client may have dropped it); a name
// unsubscribed twice in one request is unsubscribed once.
func TestDeltaWildcardExplicitUnsubscribe(t *testing.T) {
	for _, unsub := range [][]string{{"a"}, {"a", "a"}} {
		t.Run(fmt.Sprint(unsub), func(t *testing.T) {
			h := newHarness(t, true)
			h.publish([]translate.Resources{svc("a", 1001), svc("b", 1002)})
			c := h.delta("n1")
			c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: cds, ResourceNamesSubscribe: []string{"*", "a"}})
			r := c.recv()
			eq(t, "wildcard CDS", []string{"a", "b"}, names(r))
			c.ack(r)
			c.none()
			c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: cds, ResponseNonce: r.Nonce, ResourceNamesUnsubscribe: unsub})
			eq(t, "a sent again", []string{"a"}, names(c.recv()))
		})
	}
}

// TestDeltaWildcardStateOlderThanLogResets: a wildcard client that stays
// silent while more generations pass than the change log keeps has its
// stream ended on its next request (what was deleted meanwhile is no longer
// known), and reconnecting with its versions it gets what changed.
func TestDeltaWildcardStateOlderThanLogResets(t *testing.T) {
	h := newHarness(t, true)
	h.publish([]translate.Resources{svc("a", 1001), svc("b", 1)})
	c := h.delta("n1")
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: cds})
	r := c.recv()
	held := versions(r)
	for i := range 4100 { // more than maxLogGens
		b := svc("b", 1)
		b.Cluster.ConnectTimeout.Seconds = int64(2 + i%2)
		h.publish([]translate.Resources{b})
	}
	h.publish(nil, "a")
	c.ack(r)
	select {
	case <-c.ended:
	case <-time.After(5 * time.Second):
		t.Fatal("stream not ended")
	}
	c2 := h.delta("n1")
	c2.send(&discovery.DeltaDiscoveryRequest{TypeUrl: cds, InitialResourceVersions: held})
	r = c2.recv()
	eq(t, "sent after reconnect", []string{"b"}, names(r))
	eq(t, "removed after reconnect", []string{"a"}, r.RemovedResources)
}

// TestDeltaReconnectRemovesWhatIsGone: a client reconnecting with versions
// of resources that no longer exist is told they are removed, whether it
// names them or holds them through its wildcard subscription.
func TestDeltaReconnectRemovesWhatIsGone(t *testing.T) {
	h := newHarness(t, true)
	h.publish([]translate.Resources{svc("a", 1001), svc("b", 1002)})
	a := h.cache.List(cds)[0]
	c := h.delta("n1")
	c.send(&discovery.DeltaDiscoveryRequest{
		TypeUrl:                 cds,
		ResourceNamesSubscribe:  []string{"*", "x"},
		InitialResourceVersions: map[string]string{a.Name: a.Version, "x": "old", "y": "old"},
	})
	r := c.recv()
	eq(t, "sent", []string{"b"}, names(r))
	eq(t, "removed", []string{"x", "y"}, r.RemovedResources)
}

// TestDeltaStateIsCompact: once synced, what the server keeps of a delta
// client subscribed to many resources is a generation, not a version per
// name; with the state the client still gets exactly what changes.
func TestDeltaStateIsCompact(t *testing.T) {
	c := xds.NewCache()
	var all []translate.Resources
	var subscribe []string
	for i := range 2000 {
		r := svc(fmt.Sprintf("s%04d", i), 1000)
		all = append(all, r)
		subscribe = append(subscribe, r.Cluster.GetName())
	}
	if err := c.PublishServices(all, nil); err != nil {
		t.Fatal(err)
	}
	c.MarkReady()
	d := xds.NewDeltaDriver(c, 1)
	got := map[string]string{}
	nonce := ""
	take := func() bool {
		dr := d.Take()
		if dr == nil {
			return false
		}
		for _, res := range dr.Resources {
			got[res.Name] = res.Version
		}
		nonce = dr.GetNonce()
		return true
	}
	arm := func(subscribe []string) {
		if _, err := d.Watch(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResponseNonce: nonce, ResourceNamesSubscribe: subscribe}); err != nil {
			t.Fatal(err)
		}
	}
	for arm(subscribe); take(); arm(nil) {
	}
	eq(t, "resources received", len(subscribe), len(got))
	if n := d.StateEntries(); n > 2 {
		t.Fatalf("state of a synced client has %d entries, want at most 2", n)
	}
	if err := c.PublishServices([]translate.Resources{svc("s0042", 2000)}, nil); err != nil {
		t.Fatal(err)
	}
	dr := d.Take()
	if dr == nil {
		t.Fatal("no response to the change")
	}
	eq(t, "after one change", []string{"s0042"}, names(dr))
}

// TestDeltaSubscribeMoreSendsOnlyTheNew: a delta request that only changes
// the subscription carries no response_nonce (the protocol says to omit
// it); the client still gets only what it does not hold.
func TestDeltaSubscribeMoreSendsOnlyTheNew(t *testing.T) {
	h := newHarness(t, true)
	h.publish([]translate.Resources{svc("a", 1001), svc("b", 1002), svc("c", 1003)})
	c := h.delta("n1")
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: []string{"a", "b"}})
	r := c.recv()
	eq(t, "first", []string{"a", "b"}, names(r))
	c.ack(r)
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: []string{"c"}})
	eq(t, "after subscribing c", []string{"c"}, names(c.recv()))
	c.none()
}
