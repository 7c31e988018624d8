package xds_test

import (
	"testing"
	"time"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"

	"github.com/xdsbridge/xdsbridge/translate"
	"github.com/xdsbridge/xdsbridge/xds"
	"github.com/xdsbridge/xdsbridge/xds/store"
)

// fsNotified reports whether ch holds a notification.
func fsNotified(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestCacheSubscribe: a subscriber is told of MarkReady and of each Apply
// that changes something (coalesced: many changes, one pending value),
// not of an Apply that changes nothing, and nothing after cancel.
// Snapshot returns the types at one instant.
func TestCacheSubscribe(t *testing.T) {
	c := xds.NewCache()
	ch, cancel := c.Subscribe()
	if fsNotified(ch) {
		t.Fatal("notified before any change")
	}
	web := []store.Change{
		{TypeURL: xds.ClusterType, Upserts: []store.Resource{{Name: "web", Msg: translate.Cluster("web")}}},
		{TypeURL: xds.EndpointType, Upserts: []store.Resource{{Name: "web", Msg: &endpoint.ClusterLoadAssignment{ClusterName: "web"}}}},
	}
	if err := c.Apply(web...); err != nil {
		t.Fatal(err)
	}
	if !fsNotified(ch) {
		t.Fatal("not notified of a change (before MarkReady)")
	}
	if fsNotified(ch) {
		t.Fatal("two changes in one Apply left two notifications; want one")
	}
	if err := c.Apply(web...); err != nil {
		t.Fatal(err)
	}
	if fsNotified(ch) {
		t.Fatal("notified of an Apply that changed nothing")
	}
	c.MarkReady()
	if !fsNotified(ch) {
		t.Fatal("not notified of MarkReady")
	}
	snap := c.Snapshot(xds.ClusterType, xds.EndpointType, "type.googleapis.com/unknown")
	if len(snap[xds.ClusterType]) != 1 || len(snap[xds.EndpointType]) != 1 || snap[xds.ClusterType][0].Version == "" {
		t.Fatalf("snapshot %v", snap)
	}
	cancel()
	if err := c.Apply(store.Change{TypeURL: xds.ClusterType, Deletes: []string{"web"}}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
		t.Fatal("notified after cancel")
	case <-time.After(10 * time.Millisecond):
	}
}
