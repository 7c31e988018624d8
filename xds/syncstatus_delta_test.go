package xds_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"

	"github.com/xdsbridge/xdsbridge/translate"
	"github.com/xdsbridge/xdsbridge/xds"
)

// A wildcard delta CDS client: SYNCED, STALE while a removal is not
// acknowledged, SYNCED after.
func TestSyncStatusDeltaWildcardRemoval(t *testing.T) {
	h, _ := syncHarness(t, true)
	h.publish([]translate.Resources{svc("a", 1001), svc("b", 1002)})
	c := h.delta("test-node")
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: cds})
	r := c.recv()
	c.ack(r)
	waitSyncState(t, h, "test-node", cds, xds.Synced)
	h.publish(nil, "b")
	r = c.recv()
	eq(t, "removed", []string{"b"}, r.RemovedResources)
	waitSyncState(t, h, "test-node", cds, xds.Stale)
	c.ack(r)
	waitSyncState(t, h, "test-node", cds, xds.Synced)
}

// A delta client that subscribes only to a name that does not exist holds
// everything of interest once answered.
func TestSyncStatusDeltaNonexistent(t *testing.T) {
	h, _ := syncHarness(t, true)
	h.publish([]translate.Resources{svc("a", 1001)})
	c := h.delta("test-node")
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: []string{"nope"}})
	r := c.recv()
	eq(t, "removed", []string{"nope"}, r.RemovedResources)
	c.ack(r)
	waitSyncState(t, h, "test-node", eds, xds.Synced)
}

// A delta client NACKs b, then unsubscribes b: it holds everything it
// subscribes to; its status must not stay NACKED.
func TestSyncStatusDeltaNackThenUnsubscribe(t *testing.T) {
	h, _ := syncHarness(t, true)
	h.publish([]translate.Resources{svc("a", 1001), svc("b", 1002)})
	c := h.delta("test-node")
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: []string{"a", "b"}})
	c.ack(c.recv())
	waitSyncState(t, h, "test-node", eds, xds.Synced)
	h.publish([]translate.Resources{svc("b", 1012)})
	r := c.recv()
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResponseNonce: r.Nonce, ErrorDetail: &status.Status{Code: 3, Message: "bad b"}})
	waitSyncState(t, h, "test-node", eds, xds.Nacked)
	e := c.recv()
	c.ack(e)
	waitSyncState(t, h, "test-node", eds, xds.Nacked)
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesUnsubscribe: []string{"b"}})
	waitSyncState(t, h, "test-node", eds, xds.Synced)
}

// Status reads racing subscription churn, commits and answers (go test
// -race).
func TestSyncStatusConcurrent(t *testing.T) {
	h, _ := syncHarness(t, true)
	all, ns := services(20)
	h.publish(all)
	d := h.delta("test-node")
	d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: cds})
	d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: ns[:10]})
	s := h.sotw()
	s.send(&discovery.DiscoveryRequest{TypeUrl: cds})
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			h.srv.ClientStatuses()
			h.srv.ClientStatus("test-node")
			h.srv.ClientStatus("grpc-client")
		}
	}()
	// Answer everything in the background.
	wg.Add(2)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			select {
			case r := <-d.resp:
				d.sendFn(&discovery.DeltaDiscoveryRequest{TypeUrl: r.TypeUrl, ResponseNonce: r.Nonce})
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	go func() {
		defer wg.Done()
		for !stop.Load() {
			select {
			case r := <-s.resp:
				s.sendFn(&discovery.DiscoveryRequest{TypeUrl: r.TypeUrl, ResponseNonce: r.Nonce, VersionInfo: r.VersionInfo})
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	for i := range 60 {
		n := ns[i%20]
		if i%2 == 0 {
			d.sendFn(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: []string{n}})
		} else {
			d.sendFn(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesUnsubscribe: []string{n}})
		}
		h.publish([]translate.Resources{svc(n, 2000+uint32(i))})
		if i%7 == 0 {
			h.publish(nil, ns[(i+3)%20])
		}
		time.Sleep(2 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
}
