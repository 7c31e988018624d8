package xds

import (
	"context"
	"slices"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/types/known/anypb"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/xdsbridge/xdsbridge/translate"
	"github.com/xdsbridge/xdsbridge/xds/store"
)

// TestUpdateOrderTypesAfterWhatTheyReferTo: every order of types is
// updateOrder's: clusters, assignments, listeners, routes (and virtual
// hosts, served outside the store, last); a type that
// holds back waits for types ranked before it; publications upsert in
// that order and remove in reverse.
func TestUpdateOrderTypesAfterWhatTheyReferTo(t *testing.T) {
	want := []string{ClusterType, EndpointType, ListenerType, RouteType}
	if !slices.Equal(DefaultTypes, want) {
		t.Fatalf("DefaultTypes = %v, want %v", DefaultTypes, want)
	}
	if r := orderRank(VirtualHostType); r != len(updateOrder)-1 || !updateOrder[r].outsideStore {
		t.Fatalf("VirtualHost ranks %d, want last (%d), served outside the store", r, len(updateOrder)-1)
	}
	waitsFor := map[holdRule][]string{
		holdUntilCluster:     {ClusterType},
		holdUntilAssignments: {ClusterType, EndpointType},
		holdUntilRouteSent:   {RouteType},
	}
	for i, r := range updateOrder {
		for _, u := range waitsFor[r.hold] {
			if orderRank(u) >= i {
				t.Errorf("%s waits for %s, ranked after it", r.typeURL, u)
			}
		}
	}
	c := NewCache()
	for i := 1; i < len(want); i++ {
		a, b := c.types[want[i-1]], c.types[want[i]]
		if typeOrder(a, b) >= 0 || typeOrder(b, a) <= 0 {
			t.Errorf("typeOrder does not put %s before %s", a.URL, b.URL)
		}
	}
	upserts, deletes := map[string][]store.Resource{}, map[string][]string{}
	for _, u := range want {
		upserts[u], deletes[u] = []store.Resource{{Name: "u"}}, []string{"d"}
	}
	var got []string
	for _, ch := range publishSteps(upserts, deletes) {
		switch {
		case len(ch.Upserts) > 0 && len(ch.Deletes) == 0:
			got = append(got, "+"+ch.TypeURL)
		case len(ch.Deletes) > 0 && len(ch.Upserts) == 0:
			got = append(got, "-"+ch.TypeURL)
		default:
			t.Fatalf("a step of %s both upserts and deletes, or neither", ch.TypeURL)
		}
	}
	var wantSteps []string
	for _, u := range want {
		wantSteps = append(wantSteps, "+"+u)
	}
	for _, u := range slices.Backward(want) {
		wantSteps = append(wantSteps, "-"+u)
	}
	if !slices.Equal(got, wantSteps) {
		t.Fatalf("publish steps %v, want %v", got, wantSteps)
	}
}

// TestUpdateOrderHolds: on a stream that was sent no cluster version yet
// and no assignment, an assignment is held until its cluster is sent, a
// route until its cluster's assignment is sent; clusters and listeners
// are never held.
func TestUpdateOrderHolds(t *testing.T) {
	c := NewCache()
	routeTo := &route.RouteConfiguration{Name: "r", VirtualHosts: []*route.VirtualHost{{Name: "v", Domains: []string{"*"},
		Routes: []*route.Route{{Action: &route.Route_Route{Route: &route.RouteAction{ClusterSpecifier: &route.RouteAction_Cluster{Cluster: "A"}}}}}}}}
	if err := c.Apply(
		store.Change{TypeURL: ClusterType, Upserts: []store.Resource{{Name: "A", Msg: &cluster.Cluster{Name: "A"}}}},
		store.Change{TypeURL: EndpointType, Upserts: []store.Resource{{Name: "A", Msg: &endpoint.ClusterLoadAssignment{ClusterName: "A"}, DependsOn: &store.Dep{TypeURL: ClusterType, Name: "A"}}}},
		store.Change{TypeURL: ListenerType, Upserts: []store.Resource{{Name: "l", Msg: &listener.Listener{Name: "l"}}}},
		store.Change{TypeURL: RouteType, Upserts: []store.Resource{{Name: "r", Msg: routeTo}}},
	); err != nil {
		t.Fatal(err)
	}
	st := &streamState{key: streamKey{delta: true}, cds: &sentClusters{wild: true}, edsSeen: true}
	held := func(typeURL, name string) bool {
		ts := c.types[typeURL]
		hold := c.holder(&watch{ts: ts, delta: true, stream: st}, 0)
		return hold.holds(ts.Resources[name])
	}
	for _, step := range []struct {
		typeURL, name string
		want          bool
	}{{ClusterType, "A", false}, {EndpointType, "A", true}, {ListenerType, "l", false}, {RouteType, "r", true}} {
		if got := held(step.typeURL, step.name); got != step.want {
			t.Errorf("before the cluster is sent: %s %s held %v, want %v", step.typeURL, step.name, got, step.want)
		}
	}
	st.cds.gen = c.types[ClusterType].Gen
	if held(EndpointType, "A") {
		t.Error("the assignment is held after its cluster was sent")
	}
	if !held(RouteType, "r") {
		t.Error("the route is not held while its cluster's assignment is not sent")
	}
	c.edsDelivered(st, []string{"A"})
	if held(RouteType, "r") {
		t.Error("the route is held after its cluster's assignment was sent")
	}
}

// TestUpdateOrderVirtualHostAfterRoute: a stream's VHDS subscription is
// not answered before the stream was sent the route configuration whose
// vhds names the virtual hosts; once it is, the answer goes.
func TestUpdateOrderVirtualHostAfterRoute(t *testing.T) {
	c := NewCache()
	e := translate.Egress{RouteConfigName: "eg", VHDS: true}.WithDefaults()
	if err := c.ServeVHDS(VHDSOptions{RouteConfigName: "eg", Split: e.VHDSSplit}); err != nil {
		t.Fatal(err)
	}
	rc, _ := e.RouteTable([]translate.EgressService{{Name: "api"}})
	if err := c.PublishServices([]translate.Resources{{Route: rc}}, nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := c.vhdsOpen(ctx, deltaQueue{ch: make(chan *deltaResponse, 4)})
	defer s.close()
	s.request(&discovery.DeltaDiscoveryRequest{ResourceNamesSubscribe: []string{"eg/api"}}, true)
	if r := s.next(); r != nil {
		t.Fatalf("answered before the route configuration was sent: %v", r)
	}
	stub := c.Get(RouteType, translate.VHDSStubName("eg"))
	a, err := anypb.New(stub)
	if err != nil {
		t.Fatal(err)
	}
	s.sending(&discovery.DeltaDiscoveryResponse{TypeUrl: RouteType, Resources: []*discovery.Resource{{Name: translate.VHDSStubName("eg"), Resource: a}}})
	r := s.next()
	if len(r.GetResources()) != 1 || r.Resources[0].Name != "eg/api" {
		t.Fatalf("after the route configuration: %v, want eg/api", r)
	}
}
