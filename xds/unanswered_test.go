package xds_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/xdsbridge/xdsbridge/translate"
	"github.com/xdsbridge/xdsbridge/xds"
)

// A delta client that subscribes to a name, unsubscribes and subscribes
// again, each answered with a response it never answers, has its stream
// ended when the responses unanswered go over max_unanswered_responses
// plus the one name it subscribes to: ResourceExhausted, the message
// naming the field and the count, counted.
func TestLimitUnansweredResponsesEndsStream(t *testing.T) {
	const limit = 16
	h := newLimitHarness(t, xds.Options{Limits: xds.Limits{MaxUnansweredResponses: limit}})
	h.publish([]translate.Resources{svc("a", 1001)})
	d := h.delta("d")
	for i := range limit + 2 {
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
	if msg, want := grpcstatus.Convert(d.err).Message(), fmt.Sprintf("sent %d responses of %s", limit+2, eds); !strings.Contains(msg, want) {
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

// The records dropped once answered are those of the type answered: on an
// ADS stream whose types share one nonce counter, the ACK of a cluster
// response sent after an assignment response the client has not answered
// yet does not drop that response's record, and a NACK of it is still
// answered by sending its resources again in halves.
func TestDeltaAnsweredRecordsPerType(t *testing.T) {
	h := newHarness(t, true)
	h.publish([]translate.Resources{svc("a", 1001), svc("b", 1002), svc("c", 1003), svc("d", 1004), svc("e", 1005), svc("x", 1006)})
	d := h.delta("d")
	d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: cds, ResourceNamesSubscribe: []string{"a", "b", "c", "d", "e"}})
	d.ack(d.recv())
	d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: []string{"a", "b"}})
	r1 := d.recv()
	d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: []string{"c", "d"}})
	r2 := d.recv()
	eq(t, "the second assignment response", []string{"c", "d"}, names(r2))
	d.ack(r1)
	// A cluster response, with a nonce after r2's, answered.
	d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: cds, ResourceNamesSubscribe: []string{"x"}})
	d.ack(d.recv())
	// An assignment response installed after that answer.
	d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: []string{"e"}})
	r3 := d.recv()
	eq(t, "the third assignment response", []string{"e"}, names(r3))
	// r2 rejected: its two resources come again, one per response.
	d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResponseNonce: r2.Nonce, ErrorDetail: &status.Status{Code: 3, Message: "rejected"}})
	half := d.recv()
	if got := names(half); len(got) != 1 || (got[0] != "c" && got[0] != "d") {
		t.Fatalf("after the NACK of %s, sent %v; want one of c and d", r2.Nonce, got)
	}
	d.ack(r3)
	d.ack(half)
	other := d.recv()
	eq(t, "the other half", slices.DeleteFunc([]string{"c", "d"}, func(n string) bool { return n == names(half)[0] }), names(other))
}

// A delta client that subscribes to names one request at a time, sending
// each request before it reads the answers to the earlier ones, then
// answers every response in order (what Envoy's on-demand CDS does for a
// burst of requests naming other clusters: internal/e2e
// TestEnvoyOnDemandBurstUnansweredLimit) answers all it is sent: its stream
// is not ended, and it gets each name it subscribed to.
func TestLimitUnansweredResponsesPipelinedSubscriptions(t *testing.T) {
	const limit, burst = 16, 4 * 16
	h := newLimitHarness(t, xds.Options{Limits: xds.Limits{MaxUnansweredResponses: limit}})
	var rs []translate.Resources
	for i := range burst {
		rs = append(rs, svc(fmt.Sprintf("s%02d", i), uint32(1000+i)))
	}
	h.publish(rs)
	d := h.delta("d")
	for i := range burst {
		d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: []string{fmt.Sprintf("s%02d", i)}})
	}
	got := map[string]bool{}
	for range burst {
		r := d.recv()
		for _, n := range names(r) {
			got[n] = true
		}
		d.ack(r)
	}
	if len(got) != burst {
		t.Errorf("received %d of the %d names subscribed", len(got), burst)
	}
	select {
	case <-d.ended:
		t.Fatalf("stream ended: %v", d.err)
	case <-time.After(100 * time.Millisecond):
	}
	if n := h.refusals("max_unanswered_responses"); n != 0 {
		t.Fatalf("%d refusals counted", n)
	}
}

// A delta client that holds many names, then unsubscribes and subscribes
// again to one of them, each answered with a response it never answers,
// gets no more room for the names it holds than for that one: its stream
// is ended once the responses unanswered go over
// max_unanswered_responses plus one.
func TestLimitUnansweredResponsesOneNameChurn(t *testing.T) {
	const limit, held = 16, 4 * 16
	h := newLimitHarness(t, xds.Options{Limits: xds.Limits{MaxUnansweredResponses: limit}})
	var rs []translate.Resources
	var all []string
	for i := range held {
		all = append(all, fmt.Sprintf("s%02d", i))
		rs = append(rs, svc(all[i], uint32(1000+i)))
	}
	h.publish(rs)
	d := h.delta("d")
	d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: all})
	for got := 0; got < held; {
		r := d.recv()
		got += len(r.Resources)
		d.ack(r)
	}
	for i := range limit + 2 {
		d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesUnsubscribe: []string{"s00"}})
		d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: []string{"s00"}})
		if r := d.recv(); len(r.Resources) != 1 {
			t.Fatalf("response %d carried %d resources", i+1, len(r.Resources))
		}
	}
	select {
	case <-d.ended:
	case <-time.After(5 * time.Second):
		t.Fatalf("the stream was not ended with %d responses of one name unanswered, holding %d names", limit+2, held)
	}
	wantLimit(t, d.err, codes.ResourceExhausted, "max_unanswered_responses")
	if msg, want := grpcstatus.Convert(d.err).Message(), fmt.Sprintf("sent %d responses of %s", limit+2, eds); !strings.Contains(msg, want) {
		t.Fatalf("message %q does not say %q", msg, want)
	}
	if n := h.refusals("max_unanswered_responses"); n != 1 {
		t.Fatalf("%d refusals counted, want 1", n)
	}
}
