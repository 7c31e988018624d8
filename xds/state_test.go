package xds_test

import (
	"fmt"
	"runtime"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/xdsbridge/xdsbridge/xds"
	"github.com/xdsbridge/xdsbridge/xds/store"
)

// rsim drives the cache for one delta stream and type as the delta
// stream handler does (xds.DeltaDriver), and keeps what the client holds.
type rsim struct {
	t      *testing.T
	c      *xds.Cache
	typ    string
	d      *xds.DeltaDriver
	cancel func()
	nonce  string
	n      int
	held   map[string]string // what the client holds
	err    error
}

func newSim(t *testing.T, c *xds.Cache, typ string) *rsim {
	return &rsim{t: t, c: c, typ: typ, d: xds.NewDeltaDriver(c, 10), held: map[string]string{}}
}

func (s *rsim) req(subs, unsubs []string, initial map[string]string) {
	if s.cancel != nil {
		s.cancel()
	}
	cancel, err := s.d.Watch(&discovery.DeltaDiscoveryRequest{TypeUrl: s.typ, ResponseNonce: s.nonce,
		ResourceNamesSubscribe: subs, ResourceNamesUnsubscribe: unsubs, InitialResourceVersions: initial})
	s.cancel, s.err = cancel, err
	if err != nil {
		s.t.Logf("stream reset: %v", err)
	}
}

// take applies a pending response, if any.
func (s *rsim) take() *discovery.DeltaDiscoveryResponse {
	dr := s.d.Take()
	if dr == nil {
		return nil
	}
	for _, res := range dr.Resources {
		s.held[res.Name] = res.Version
	}
	for _, n := range dr.RemovedResources {
		delete(s.held, n)
	}
	s.n++
	s.nonce = dr.GetNonce()
	s.cancel = nil
	return dr
}

func (s *rsim) sync() {
	for i := 0; i < 100; i++ {
		if s.take() == nil {
			return
		}
		s.req(nil, nil, nil)
	}
}

func cl(name string, t uint32) store.Resource {
	return store.Resource{Name: name, Msg: &cluster.Cluster{Name: name, ConnectTimeout: nil, PerConnectionBufferLimitBytes: nil, LbPolicy: cluster.Cluster_LbPolicy(t)}}
}

func current(c *xds.Cache, typ string) map[string]string {
	m := map[string]string{}
	for _, ri := range c.List(typ) {
		m[ri.Name] = ri.Version
	}
	return m
}

// TestFailedApplyStoresNothingOfTheStep: an Apply whose step fails stores
// nothing of that step, so a retry is a change that reaches every client.
func TestFailedApplyStoresNothingOfTheStep(t *testing.T) {
	c := xds.NewCache(xds.WithTypes(xds.ClusterType))
	c.MarkReady()
	c.Apply(store.Change{TypeURL: xds.ClusterType, Upserts: []store.Resource{cl("a", 0)}})
	s := newSim(t, c, xds.ClusterType)
	s.req(nil, nil, nil) // legacy wildcard
	s.sync()
	bad := store.Resource{Name: "bad", Msg: &cluster.Cluster{Name: "\xff"}}
	if err := c.Apply(store.Change{TypeURL: xds.ClusterType, Upserts: []store.Resource{cl("a", 1), bad}}); err == nil {
		t.Fatal("expected error")
	}
	// the caller retries without the bad one
	if err := c.Apply(store.Change{TypeURL: xds.ClusterType, Upserts: []store.Resource{cl("a", 1)}}); err != nil {
		t.Fatal(err)
	}
	// and another, unrelated change happens
	c.Apply(store.Change{TypeURL: xds.ClusterType, Upserts: []store.Resource{cl("z", 0)}})
	s.sync()
	if s.held["a"] != current(c, xds.ClusterType)["a"] {
		t.Fatalf("client holds a@%s, cache has a@%s", s.held["a"], current(c, xds.ClusterType)["a"])
	}
}

// TestWildcardToggleKeepsRemovals: a wildcard subscribe or unsubscribe
// ("*") is checked in full, and a deletion made since the client's last
// response still reaches it.
func TestWildcardToggleKeepsRemovals(t *testing.T) {
	for _, mode := range []string{"subscribe *", "unsubscribe *"} {
		t.Run(mode, func(t *testing.T) {
			c := xds.NewCache(xds.WithTypes(xds.ClusterType))
			c.MarkReady()
			c.Apply(store.Change{TypeURL: xds.ClusterType, Upserts: []store.Resource{cl("a", 0), cl("b", 0)}})
			s := newSim(t, c, xds.ClusterType)
			if mode == "subscribe *" {
				s.req([]string{"a"}, nil, nil)
			} else {
				s.req([]string{"*", "a"}, nil, nil)
			}
			s.take() // response received; client has not ACKed yet
			c.Apply(store.Change{TypeURL: xds.ClusterType, Deletes: []string{"a"}})
			if mode == "subscribe *" {
				s.req([]string{"*"}, nil, nil)
			} else {
				s.req(nil, []string{"*"}, nil)
			}
			s.sync()
			if _, ok := s.held["a"]; ok {
				t.Fatalf("client still holds deleted a: %v", s.held)
			}
		})
	}
}

// TestQuietNamedClientOlderThanLog: a client subscribed by name whose
// resources stay quiet while the type churns past the change log is not
// reset; it gets what it subscribes to next, and what changed meanwhile.
func TestQuietNamedClientOlderThanLog(t *testing.T) {
	c := xds.NewCache(xds.WithTypes(xds.ClusterType))
	c.MarkReady()
	c.Apply(store.Change{TypeURL: xds.ClusterType, Upserts: []store.Resource{cl("a", 0), cl("b", 0), cl("c", 0)}})
	s := newSim(t, c, xds.ClusterType)
	s.req([]string{"a"}, nil, nil)
	s.sync()
	for i := range 4100 {
		c.Apply(store.Change{TypeURL: xds.ClusterType, Upserts: []store.Resource{cl("b", uint32(1+i%2))}})
	}
	c.Apply(store.Change{TypeURL: xds.ClusterType, Upserts: []store.Resource{cl("a", 1)}})
	s.req([]string{"c"}, nil, nil)
	if s.err != nil {
		t.Fatalf("up-to-date client reset: %v", s.err)
	}
	s.sync()
	want := current(c, xds.ClusterType)
	delete(want, "b")
	eq(t, "held", want, s.held)
}

// splitCache serves n clusters, 26 to a response (each ~106 bytes
// encoded, and the response's own fields).
func splitCache(t *testing.T, n int) (*xds.Cache, []string) {
	t.Helper()
	c := xds.NewCache(xds.WithTypes(xds.ClusterType), xds.WithMaxResponseBytes(2800))
	var all []store.Resource
	var names []string
	for i := range n {
		name := fmt.Sprintf("c%05d", i)
		all = append(all, cl(name, 0))
		names = append(names, name)
	}
	if err := c.Apply(store.Change{TypeURL: xds.ClusterType, Upserts: all}); err != nil {
		t.Fatal(err)
	}
	c.MarkReady()
	return c, names
}

// TestSplitRestGoesWithTheStream: the rest of a split response is part of
// the stream's state, so it is gone with the stream: 300 streams that end
// after their first part leave nothing behind in the cache. (The rests were
// kept cache-side until a publish swept them, 5 minutes later.)
func TestSplitRestGoesWithTheStream(t *testing.T) {
	c, names := splitCache(t, 3000)
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	for range 300 {
		s := newSim(t, c, xds.ClusterType)
		// All but the last name: a rest that is a suffix of the type's
		// names is a substring of the cache's shared sorted names
		// (store/sortednames.go), which a rest kept cache-side would not grow;
		// this one is the stream's own.
		s.req(names[:len(names)-1], nil, nil)
		if s.take() == nil {
			t.Fatal("no first part")
		}
		s.req(nil, nil, nil) // the ACK: the next part is sent, then the stream ends
	}
	// Each stream's rest names ~3,000 resources (48 KB as slices of names).
	if grown := int64(heap()) - int64(before); grown > 2<<20 {
		t.Fatalf("heap grew by %d bytes after 300 streams ended", grown)
	}
	eq(t, "open watches", 0, c.Stats().Watches[xds.ClusterType])
}

// TestSplitRestKeptAcrossSubscriptionChanges: a client that subscribes
// more names while a split is under way (as an Envoy does while clusters
// arrive) gets everything, and a synced state is compact again.
func TestSplitRestKeptAcrossSubscriptionChanges(t *testing.T) {
	c, names := splitCache(t, 300)
	s := newSim(t, c, xds.ClusterType)
	s.req(names[:100], nil, nil)
	for i := 1; i < 3; i++ {
		if s.take() == nil {
			t.Fatal("no response")
		}
		s.req(names[i*100:(i+1)*100], nil, nil) // subscribe more, instead of a bare ACK
	}
	s.sync()
	eq(t, "held", current(c, xds.ClusterType), s.held)
	if n := s.d.StateEntries(); n > 2 {
		t.Fatalf("synced state has %d entries", n)
	}
}
