package load

import (
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
)

// TestResumeRequestsDecodeAsBuilt checks the hand-encoded resume requests
// against the messages the protobuf runtime would send: every held
// version (an empty one too), the EDS subscription, no EDS request when
// nothing is followed.
func TestResumeRequestsDecodeAsBuilt(t *testing.T) {
	fl := newFleet(6)
	c := newClient(3, true, nil, fl, nil)
	node := &core.Node{Id: c.node, Cluster: "xdsload"}

	cds, eds, err := c.resumeRequests(node)
	if err != nil {
		t.Fatal(err)
	}
	if eds != nil {
		t.Errorf("a client following nothing sends an EDS request of %d bytes", len(eds))
	}
	check(t, cds.bytes(), &discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: cdsType})

	for _, i := range []int{0, 2, 5} {
		c.cdsHave[i], c.cdsVer[i] = true, "v"+fl.names[i]
		c.edsSub[i] = true
	}
	c.cdsVer[2] = ""
	c.edsHave[5], c.edsVer[5] = true, "e5"
	c.edsSub[4] = true
	cds, eds, err = c.resumeRequests(node)
	if err != nil {
		t.Fatal(err)
	}
	check(t, cds.bytes(), &discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: cdsType, InitialResourceVersions: map[string]string{
		fl.names[0]: "v" + fl.names[0], fl.names[2]: "", fl.names[5]: "v" + fl.names[5],
	}})
	check(t, eds.bytes(), &discovery.DeltaDiscoveryRequest{TypeUrl: edsType,
		ResourceNamesSubscribe:  []string{fl.names[0], fl.names[2], fl.names[4], fl.names[5]},
		InitialResourceVersions: map[string]string{fl.names[5]: "e5"}})
}

// TestResumeBodiesShared checks that clients holding the same versions
// send one shared encoding of them (in the order of their id), and a
// client holding other versions, or the same client after a change, its
// own.
func TestResumeBodiesShared(t *testing.T) {
	fl := newFleet(40)
	hold := func(c *client, ver string) {
		for i := range fl.names {
			c.cdsHave[i], c.cdsVer[i] = true, ver+fl.names[i]
			c.edsSub[i], c.edsHave[i], c.edsVer[i] = true, i%3 > 0, "e"+ver
		}
	}
	a, b, other := newClient(1, true, nil, fl, nil), newClient(1+resumeOrders, true, nil, fl, nil), newClient(2, true, nil, fl, nil)
	hold(a, "v")
	hold(b, "v")
	hold(other, "v")
	node := &core.Node{Id: "n"}
	ac, ae, _ := a.resumeRequests(node)
	bc, be, _ := b.resumeRequests(node)
	oc, oe, _ := other.resumeRequests(node)
	if &ac[1][0] != &bc[1][0] || &ae[0][0] != &be[0][0] {
		t.Error("two clients holding the same versions, their ids of one order, encoded them twice")
	}
	if string(ac[1]) == string(oc[1]) || string(ae[0]) == string(oe[0]) {
		t.Error("clients of different ids send their entries in one order")
	}
	for _, r := range []rawRequest{ac, oc} {
		var want, got discovery.DeltaDiscoveryRequest
		if err := proto.Unmarshal(r.bytes(), &got); err != nil {
			t.Fatal(err)
		}
		if err := proto.Unmarshal(ac.bytes(), &want); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(&got, &want) {
			t.Error("clients holding the same versions send different requests")
		}
	}

	b.cdsVer[7], b.edsVer[8] = "changed", "changed"
	bc, be, _ = b.resumeRequests(node)
	wantC := &discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: cdsType, InitialResourceVersions: map[string]string{}}
	wantE := &discovery.DeltaDiscoveryRequest{TypeUrl: edsType, InitialResourceVersions: map[string]string{}}
	for i, n := range fl.names {
		wantC.InitialResourceVersions[n] = b.cdsVer[i]
		wantE.ResourceNamesSubscribe = append(wantE.ResourceNamesSubscribe, n)
		if b.edsHave[i] {
			wantE.InitialResourceVersions[n] = b.edsVer[i]
		}
	}
	check(t, bc.bytes(), wantC)
	check(t, be.bytes(), wantE)
	if ac2, _, _ := a.resumeRequests(node); &ac2[1][0] != &ac[1][0] {
		t.Error("a client whose versions did not change got a new encoding")
	}
}

func check(t *testing.T, b []byte, want *discovery.DeltaDiscoveryRequest) {
	t.Helper()
	got := &discovery.DeltaDiscoveryRequest{}
	if err := proto.Unmarshal(b, got); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got, want) {
		t.Errorf("decoded %v, want %v", got, want)
	}
	if len(b) != proto.Size(want) {
		t.Errorf("%d bytes, the runtime writes %d", len(b), proto.Size(want))
	}
}
