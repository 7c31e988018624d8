package xds

import (
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
)

// TestUnregisteredStreamRefusedOnceStreamsRegister: when the server
// registers its streams as they open (it authorizes its clients), a
// stream it did not register gets no watch, delta or sotw, even while no
// registered stream is restricted; a registered one that may read
// everything is served.
func TestUnregisteredStreamRefusedOnceStreamsRegister(t *testing.T) {
	c := NewCache(WithTypes(EndpointType))
	c.MarkReady()
	setAssignmentA(t, c, 1)
	req := func() *discovery.DeltaDiscoveryRequest {
		return &discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResourceNamesSubscribe: []string{"a"}}
	}
	sub := func() deltaSub { return newDeltaSub([]string{"a"}, nil, nil, nil) }

	// Before any registration, a stream's state is made with its watch.
	if _, cancel, err := c.newDeltaWatch(streamKey{true, 1}, req(), sub(), deltaQueue{ch: make(chan *deltaResponse, 2)}); err != nil {
		t.Fatalf("unregistered stream before registration: %v", err)
	} else {
		cancel()
	}
	c.streamClosed(streamKey{true, 1})

	c.openStream(streamKey{true, 2}, nil) // may read everything
	ch := make(chan *deltaResponse, 2)
	_, cancel, err := c.newDeltaWatch(streamKey{true, 2}, req(), sub(), deltaQueue{ch: ch})
	if err != nil {
		t.Fatalf("registered stream: %v", err)
	}
	defer cancel()
	select {
	case r := <-ch:
		if got := len(r.resp.GetResources()); got != 1 {
			t.Errorf("registered stream got %d resources, want 1", got)
		}
	default:
		t.Error("registered stream got no response")
	}

	if _, _, err := c.newDeltaWatch(streamKey{true, 3}, req(), sub(), deltaQueue{ch: make(chan *deltaResponse, 2)}); err == nil {
		t.Error("a delta watch of a stream never registered was created")
	}
	sreq := &discovery.DiscoveryRequest{TypeUrl: EndpointType, ResourceNames: []string{"a"}}
	c.noteRequest(sreq, streamKey{false, 4}, EndpointType)
	if _, ok := c.streams[streamKey{false, 4}]; ok {
		t.Error("noting a request of a stream never registered made its state")
	}
}
