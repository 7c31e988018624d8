package xds_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/xdsbridge/xdsbridge/translate"
	"github.com/xdsbridge/xdsbridge/xds"
)

// A delta client that subscribes to a name, unsubscribes and subscribes
// again, each answered with a response it never answers, has its stream
// ended when the responses unanswered go over max_unanswered_responses:
// ResourceExhausted, the message naming the field and the count, counted.
func TestLimitUnansweredResponsesEndsStream(t *testing.T) {
	const limit = 16
	h := newLimitHarness(t, xds.Options{Limits: xds.Limits{MaxUnansweredResponses: limit}})
	h.publish([]translate.Resources{svc("a", 1001)})
	d := h.delta("d")
	for i := range limit + 1 {
		if i > 0 {
			d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesUnsubscribe: []string{"a"}})
		}
		d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: []string{"a"}})
		if r := d.recv(); len(r.Resources) != 1 {
			t.Fatalf("response %d carried %d resources", i+1, len(r.Resources))
		}
	}
	select {
	case <-d.ended:
	case <-time.After(5 * time.Second):
		t.Fatal("the stream was not ended")
	}
	wantLimit(t, d.err, codes.ResourceExhausted, "max_unanswered_responses")
	if msg, want := grpcstatus.Convert(d.err).Message(), fmt.Sprintf("sent %d responses of %s", limit+1, eds); !strings.Contains(msg, want) {
		t.Fatalf("message %q does not say %q", msg, want)
	}
	if n := h.refusals("max_unanswered_responses"); n != 1 {
		t.Fatalf("%d refusals counted, want 1", n)
	}
}

// Clients that answer their responses are not ended, however many
// subscription changes they make: one that answers each response (as
// Envoy does), and one that answers only every few responses, naming the
// latest (which answers those before it).
func TestLimitUnansweredResponsesAnsweringClient(t *testing.T) {
	const limit = 16
	h := newLimitHarness(t, xds.Options{Limits: xds.Limits{MaxUnansweredResponses: limit}})
	h.publish([]translate.Resources{svc("a", 1001)})
	for _, every := range []int{1, limit - 1} {
		d := h.delta("d")
		for i := range 10 * limit {
			d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: []string{"a"}})
			r := d.recv()
			if len(r.Resources) != 1 {
				t.Fatalf("answering every %d: response %d carried %d resources", every, i+1, len(r.Resources))
			}
			if (i+1)%every == 0 {
				d.ack(r)
			}
			d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesUnsubscribe: []string{"a"}})
		}
		d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: []string{"a"}})
		d.recv()
		select {
		case <-d.ended:
			t.Fatalf("answering every %d: stream ended: %v", every, d.err)
		default:
		}
	}
	if n := h.refusals("max_unanswered_responses"); n != 0 {
		t.Fatalf("%d refusals counted", n)
	}
}
