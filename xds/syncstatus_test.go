package xds_test

import (
	"slices"
	"strconv"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/xdsbridge/xdsbridge/translate"
	"github.com/xdsbridge/xdsbridge/xds"
)

// syncHarness is newHarness with the server's metrics in reg.
func syncHarness(t *testing.T, ready bool) (*harness, *prometheus.Registry) {
	t.Helper()
	c := xds.NewCache()
	if ready {
		c.MarkReady()
	}
	reg := prometheus.NewRegistry()
	s := xds.NewServer(c, xds.Options{Metrics: reg, Limits: xds.Limits{MaxStreamsPerConnection: 256}})
	conn, err := grpc.NewClient(runServer(t, s), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &harness{t: t, cache: c, srv: s, conn: conn}, reg
}

// syncTypeStatus returns the status of type typeURL on node's stream (ok false
// if the node or type is not listed).
func syncTypeStatus(h *harness, node, typeURL string) (xds.TypeStatus, bool) {
	for _, c := range h.srv.ClientStatuses() {
		if c.Node != node {
			continue
		}
		for _, ts := range c.Types {
			if ts.TypeURL == typeURL {
				return ts, true
			}
		}
	}
	return xds.TypeStatus{}, false
}

// waitSyncState waits for node's type to reach state, and returns it.
func waitSyncState(t *testing.T, h *harness, node, typeURL, state string) xds.TypeStatus {
	t.Helper()
	var last xds.TypeStatus
	defer func() {
		if t.Failed() {
			t.Logf("last: %+v", last)
		}
	}()
	waitFor(t, node+" "+xds.ShortType(typeURL)+" "+state, func() bool {
		var ok bool
		last, ok = syncTypeStatus(h, node, typeURL)
		return ok && last.State == state
	})
	t.Logf("%s: %+v", state, last)
	return last
}

// syncHistCount is the number of change → ACK observations of a type.
func syncHistCount(t *testing.T, reg *prometheus.Registry, typeURL string) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "xdsbridge_xds_change_ack_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "type" && l.GetValue() == typeURL {
					return m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return 0
}

// A delta client's status through each state: NOT_SENT while the cache is
// not ready, STALE while it holds its ACK (naming what it lacks), SYNCED
// once it ACKs, STALE again after a change, SYNCED with a newer version and
// a latency sample after its ACK, NACKED (version and detail) when it
// rejects a response, and while it lacks the resource it rejected, then
// SYNCED once a good version goes through.
func TestSyncStatusDeltaStates(t *testing.T) {
	h, reg := syncHarness(t, false)
	h.publish([]translate.Resources{svc("a", 1001), svc("b", 1002), svc("c", 1003)})
	c := h.delta("test-node")
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: []string{"a", "b"}})
	h.waitWatches(1, eds)
	st := waitSyncState(t, h, "test-node", eds, xds.NotSent)
	eq(t, "not sent: subscribed", 2, st.Subscribed)
	eq(t, "not sent: behind", []string{"a", "b"}, st.Behind)

	h.cache.MarkReady()
	r := c.recv()
	st = waitSyncState(t, h, "test-node", eds, xds.Stale)
	if st.Since.IsZero() || st.Sent != st.Current || st.Acked != "" {
		t.Fatalf("first response not acked: %+v", st)
	}
	c.ack(r)
	st = waitSyncState(t, h, "test-node", eds, xds.Synced)
	if st.Acked != st.Current || len(st.Behind) != 0 || st.Samples != 0 {
		t.Fatalf("synced: %+v", st)
	}
	before := st.Acked

	// A change: STALE while the client holds its ACK, naming the resource.
	h.publish([]translate.Resources{svc("a", 1011)})
	r = c.recv()
	eq(t, "change", []string{"a"}, names(r))
	st = waitSyncState(t, h, "test-node", eds, xds.Stale)
	eq(t, "stale: behind", []string{"a"}, st.Behind)
	eq(t, "stale: acked", before, st.Acked)
	c.ack(r)
	st = waitSyncState(t, h, "test-node", eds, xds.Synced)
	a, _ := strconv.Atoi(st.Acked)
	b, _ := strconv.Atoi(before)
	if a <= b || st.Samples != 1 || st.LatencyLast <= 0 || st.LatencyP50 != st.LatencyLast || st.LatencyP99 != st.LatencyLast {
		t.Fatalf("after the change's ACK: acked %s (before %s), %+v", st.Acked, before, st)
	}
	if n := syncHistCount(t, reg, eds); n != 1 {
		t.Fatalf("xdsbridge_xds_change_ack_seconds{type=eds} count = %d, want 1", n)
	}
	t.Logf("change → ACK latency %v over %d sample", st.LatencyLast, st.Samples)

	// A change to a resource the client does not subscribe to: still
	// SYNCED, with the type's generation ahead of the one acked.
	h.publish([]translate.Resources{svc("c", 1013)})
	c.none()
	st = waitSyncState(t, h, "test-node", eds, xds.Synced)
	if st.Acked == st.Current {
		t.Fatalf("acked %s = current %s after a change to an unsubscribed resource", st.Acked, st.Current)
	}

	// A rejected response: NACKED with its generation and the detail.
	h.publish([]translate.Resources{svc("b", 1012)})
	r = c.recv()
	eq(t, "bad b", []string{"b"}, names(r))
	sent := waitSyncState(t, h, "test-node", eds, xds.Stale).Sent
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResponseNonce: r.Nonce, ErrorDetail: &status.Status{Code: 3, Message: "bad b for the test"}})
	st = waitSyncState(t, h, "test-node", eds, xds.Nacked)
	if st.NACK == nil || st.NACK.Version != sent || st.NACK.Detail != "bad b for the test" || st.NACK.At.IsZero() || !st.Since.Equal(st.NACK.At) {
		t.Fatalf("nacked: %+v nack %+v (sent %s)", st, st.NACK, sent)
	}
	// The answer to the NACK (empty: b is not sent again at that
	// version), ACKed: still NACKED, b lacking.
	e := c.recv()
	eq(t, "answer to the NACK", 0, len(e.Resources)+len(e.RemovedResources))
	c.ack(e)
	c.none()
	st = waitSyncState(t, h, "test-node", eds, xds.Nacked)
	eq(t, "nacked: behind", []string{"b"}, st.Behind)
	d := h.srv.ClientStatus("test-node")
	if len(d.Streams) != 1 {
		t.Fatalf("ClientStatus(test-node): %d streams", len(d.Streams))
	}
	var rb xds.ResourceSync
	for _, rs := range d.Streams[0].Resources {
		if rs.Name == "b" {
			rb = rs
		}
	}
	if !rb.Rejected || rb.Synced || rb.Current == "" || rb.Type != "endpoints" {
		t.Fatalf("detail of b: %+v", rb)
	}
	// A good version goes through: SYNCED.
	h.publish([]translate.Resources{svc("b", 1022)})
	r = c.recv()
	c.ack(r)
	st = waitSyncState(t, h, "test-node", eds, xds.Synced)
	if st.NACK != nil || st.Samples != 2 {
		t.Fatalf("after a good b: %+v", st)
	}
	if n := h.srv.NACKs(); n != 1 {
		t.Fatalf("NACKs = %d, want 1 (the test's)", n)
	}
	if n := syncHistCount(t, reg, eds); n != 2 {
		t.Fatalf("xdsbridge_xds_change_ack_seconds{type=eds} count = %d, want 2", n)
	}
}

// A sotw client (wildcard CDS, named EDS, as Envoy's sotw ADS): STALE
// until it ACKs, SYNCED after, per type; a change makes the changed type
// STALE until its ACK, with a latency sample after; a rejected EDS
// response is NACKED; and ClientStatus lists each resource with the
// version held.
func TestSyncStatusSotwStates(t *testing.T) {
	h, reg := syncHarness(t, true)
	h.publish([]translate.Resources{svc("a", 1001), svc("b", 1002)})
	c := h.sotw()
	c.send(&discovery.DiscoveryRequest{TypeUrl: cds})
	rc := c.recv()
	c.send(&discovery.DiscoveryRequest{TypeUrl: eds, ResourceNames: []string{"a", "b"}})
	re := c.recv()
	waitSyncState(t, h, "grpc-client", cds, xds.Stale)
	waitSyncState(t, h, "grpc-client", eds, xds.Stale)
	c.send(&discovery.DiscoveryRequest{TypeUrl: cds, ResponseNonce: rc.Nonce, VersionInfo: rc.VersionInfo})
	st := waitSyncState(t, h, "grpc-client", cds, xds.Synced)
	if !st.Wildcard || st.Subscribed != 0 {
		t.Fatalf("cds: %+v", st)
	}
	waitSyncState(t, h, "grpc-client", eds, xds.Stale)
	c.send(&discovery.DiscoveryRequest{TypeUrl: eds, ResponseNonce: re.Nonce, VersionInfo: re.VersionInfo, ResourceNames: []string{"a", "b"}})
	st = waitSyncState(t, h, "grpc-client", eds, xds.Synced)
	eq(t, "eds subscribed", 2, st.Subscribed)

	// A change to a's assignment.
	h.publish([]translate.Resources{svc("a", 1011)})
	re = c.recv()
	st = waitSyncState(t, h, "grpc-client", eds, xds.Stale)
	eq(t, "eds behind", []string{"a"}, st.Behind)
	waitSyncState(t, h, "grpc-client", cds, xds.Synced)
	c.send(&discovery.DiscoveryRequest{TypeUrl: eds, ResponseNonce: re.Nonce, VersionInfo: re.VersionInfo, ResourceNames: []string{"a", "b"}})
	st = waitSyncState(t, h, "grpc-client", eds, xds.Synced)
	if st.Samples != 1 || st.LatencyLast <= 0 || st.Acked != st.Current {
		t.Fatalf("eds after the change's ACK: %+v", st)
	}
	if n := syncHistCount(t, reg, eds); n != 1 {
		t.Fatalf("xdsbridge_xds_change_ack_seconds{type=eds} count = %d, want 1", n)
	}

	// A rejected response.
	h.publish([]translate.Resources{svc("b", 1012)})
	re = c.recv()
	c.send(&discovery.DiscoveryRequest{TypeUrl: eds, ResponseNonce: re.Nonce, ResourceNames: []string{"a", "b"}, ErrorDetail: &status.Status{Code: 3, Message: "bad b"}})
	st = waitSyncState(t, h, "grpc-client", eds, xds.Nacked)
	if st.NACK == nil || st.NACK.Detail != "bad b" || st.NACK.Version != st.Sent {
		t.Fatalf("nacked: %+v", st)
	}
	eq(t, "nacked: behind", []string{"b"}, st.Behind)
	d := h.srv.ClientStatus("grpc-client")
	if len(d.Streams) != 1 {
		t.Fatalf("ClientStatus(grpc-client): %d streams", len(d.Streams))
	}
	var got []string
	for _, rs := range d.Streams[0].Resources {
		got = append(got, rs.Type+"/"+rs.Name+"="+strconv.FormatBool(rs.Synced))
		if rs.Synced && rs.Held != rs.Current {
			t.Fatalf("synced with held %q != current %q", rs.Held, rs.Current)
		}
	}
	slices.Sort(got)
	eq(t, "resources", []string{"clusters/a=true", "clusters/b=true", "endpoints/a=true", "endpoints/b=false"}, got)
	if n := h.srv.NACKs(); n != 1 {
		t.Fatalf("NACKs = %d, want 1 (the test's)", n)
	}
}
