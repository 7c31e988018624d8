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
	check(t, cds, &discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: cdsType})

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
	check(t, cds, &discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: cdsType, InitialResourceVersions: map[string]string{
		fl.names[0]: "v" + fl.names[0], fl.names[2]: "", fl.names[5]: "v" + fl.names[5],
	}})
	check(t, eds, &discovery.DeltaDiscoveryRequest{TypeUrl: edsType,
		ResourceNamesSubscribe:  []string{fl.names[0], fl.names[2], fl.names[4], fl.names[5]},
		InitialResourceVersions: map[string]string{fl.names[5]: "e5"}})
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
