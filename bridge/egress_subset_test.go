package bridge

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/xdsbridge/xdsbridge/policy"
	"github.com/xdsbridge/xdsbridge/translate"
)

// clusterTracker is a Publisher that keeps the clusters published (the
// services' and their subsets', as the cache removes a changed service's
// subsets that are gone) and records every moment the last egress table
// routes to a cluster that is not published.
type clusterTracker struct {
	mu       sync.Mutex
	subsets  map[string][]string
	clusters map[string]bool
	table    []string // clusters the last egress table routes to
	dangling []string
	ch       chan struct{}
}

func (c *clusterTracker) PublishServices(changed []translate.Resources, removed []string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range changed {
		if r.Cluster == nil {
			c.table = translate.RouteClusters(r.Route)
			continue
		}
		n := r.Cluster.GetName()
		for _, s := range c.subsets[n] {
			delete(c.clusters, s)
		}
		c.subsets[n] = nil
		c.clusters[n] = true
		for _, s := range r.Subsets {
			c.clusters[s.Cluster.GetName()] = true
			c.subsets[n] = append(c.subsets[n], s.Cluster.GetName())
		}
	}
	for _, n := range removed {
		for _, s := range c.subsets[n] {
			delete(c.clusters, s)
		}
		delete(c.subsets, n)
		delete(c.clusters, n)
	}
	for _, cl := range c.table {
		if !c.clusters[cl] && !slices.Contains(c.dangling, cl) {
			c.dangling = append(c.dangling, cl)
		}
	}
	c.ch <- struct{}{}
	return nil
}

func (c *clusterTracker) MarkReady() {}

// Make before break for the egress table: a subset cluster that goes away
// (its service's policy no longer defines it) is never left named by the
// egress table while it is not published.
func TestEgressTableNeverRoutesToAGoneSubset(t *testing.T) {
	rec := &clusterTracker{subsets: map[string][]string{}, clusters: map[string]bool{}, ch: make(chan struct{}, 100)}
	e := translate.Egress{}.WithDefaults()
	l := run(t, Options{Sources: []string{"a", "policy"}, Quiet: time.Millisecond, Egress: &e}, rec)
	publish(t, l, "a", service("b", 1, 2))
	publishPolicy(t, l, "policy", map[string]policy.Service{"b": {Subsets: map[string]policy.Subset{"v1": {}}, DefaultSubset: "v1"}})
	waitTrue(t, func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return slices.Contains(rec.table, "b/v1")
	})
	publishPolicy(t, l, "policy", map[string]policy.Service{"b": {}})
	waitTrue(t, func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return slices.Contains(rec.table, "b") && !slices.Contains(rec.table, "b/v1")
	})
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.dangling) > 0 {
		t.Errorf("the egress table routed to %v while not published", rec.dangling)
	}
}

// Nor is a removed service's cluster left named by another service's
// virtual host (a split share to it) while it is not published.
func TestEgressTableNeverRoutesToARemovedService(t *testing.T) {
	rec := &clusterTracker{subsets: map[string][]string{}, clusters: map[string]bool{}, ch: make(chan struct{}, 100)}
	e := translate.Egress{}.WithDefaults()
	l := run(t, Options{Sources: []string{"a", "policy"}, Quiet: time.Millisecond, Egress: &e}, rec)
	publishPolicy(t, l, "policy", map[string]policy.Service{"web": {Split: []policy.Split{{Weight: 50, Service: "web"}, {Weight: 50, Service: "api"}}}})
	publish(t, l, "a", service("web", 1), service("api", 2))
	waitTrue(t, func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return slices.Contains(rec.table, "api")
	})
	time.Sleep(50 * time.Millisecond) // the flush is done
	publish(t, l, "a", service("web", 1))
	waitTrue(t, func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return !slices.Contains(rec.table, "api")
	})
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.dangling) > 0 {
		t.Errorf("the egress table routed to %v while not published", rec.dangling)
	}
}
