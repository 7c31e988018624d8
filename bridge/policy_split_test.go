package bridge

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/xdsbridge/xdsbridge/policy"
	"github.com/xdsbridge/xdsbridge/sources"
	"github.com/xdsbridge/xdsbridge/translate"
)

// subsetRecorder records, per publish, the endpoints of x's subset
// "live" (-1 when the publish does not carry x).
type subsetRecorder struct {
	mu    sync.Mutex
	lives []int
	ch    chan struct{}
	gate  chan struct{} // when set, the next publish waits for it to close
}

func (r *subsetRecorder) PublishServices(changed []translate.Resources, _ []string) error {
	r.mu.Lock()
	if g := r.gate; g != nil {
		r.gate = nil
		r.mu.Unlock()
		<-g
		r.mu.Lock()
	}
	defer r.mu.Unlock()
	n := -1
	for _, res := range changed {
		if res.Cluster.GetName() != "x" {
			continue
		}
		n = 0
		for _, s := range res.Subsets {
			if s.Cluster.GetName() != translate.SubsetCluster("x", "live") {
				continue
			}
			for _, g := range s.Load.GetEndpoints() {
				n += len(g.GetLbEndpoints())
			}
		}
	}
	r.lives = append(r.lives, n)
	select {
	case r.ch <- struct{}{}:
	default:
	}
	return nil
}

func (r *subsetRecorder) MarkReady() {}

func subsetHost(port uint32, version string) sources.Service {
	return sources.Service{Name: "x", Endpoints: []sources.Endpoint{{
		Address: "10.0.0.1", Port: port,
		Metadata: sources.Metadata{"app": {"version": version}},
	}}}
}

func livePolicy(version string) *policy.File {
	return &policy.File{Services: map[string]policy.Service{"x": {
		Subsets:       map[string]policy.Subset{"live": {Filter: `Metadata.app.version == ` + version}},
		DefaultSubset: "live",
	}}}
}

// TestServicesAndPolicyFlushNotSplit: a source that publishes both
// services and a policy (the Consul source: config entries and the
// catalog) hands one flush of its state to the loop as two calls,
// PublishPolicy then Publish, back to back (consul coordinate). A
// blue/green switch seen in one Consul coalescing window (hosts move to
// version v2 and the resolver's default subset "live" follows them) must
// not be published half-done: new policy with the old hosts is a default
// subset with no endpoint, every request failing until the next publish.
// The leading edge flushed at the policy event, before the services event
// was queued.
func TestServicesAndPolicyFlushNotSplit(t *testing.T) {
	const quiet = 20 * time.Millisecond
	rec := &subsetRecorder{ch: make(chan struct{}, 1)}
	l := run(t, Options{Sources: []string{"c"}, ServicesAndPolicy: []string{"c"}, Quiet: quiet, MaxHold: 10 * quiet}, rec)
	ctx := context.Background()
	flushOnce := func(port uint32, version string) {
		// As consul's coordinate: pol.flush, then sink.Publish.
		if err := l.PublishPolicy(ctx, sources.PolicyUpdate{Source: "c", Policy: livePolicy(version)}); err != nil {
			t.Fatal(err)
		}
		// Between the two, coordinate compares the whole snapshot with
		// the last one (reflect.DeepEqual over every service): a
		// millisecond for a large catalog.
		time.Sleep(time.Millisecond)
		if err := l.Publish(ctx, sources.Update{Source: "c", Services: []sources.Service{subsetHost(port, version)}}); err != nil {
			t.Fatal(err)
		}
	}
	flushOnce(1, "v0")
	waitTrue(t, l.Ready)
	const trials = 20
	for i := 1; i <= trials; i++ {
		time.Sleep(3 * quiet) // quiet: the next change is a leading edge
		flushOnce(uint32(i+1), "v"+string(rune('a'+i)))
	}
	time.Sleep(15 * quiet)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	empty := 0
	for _, n := range rec.lives {
		if n == 0 {
			empty++
		}
	}
	if empty > 0 {
		t.Fatalf("%d of %d blue/green switches published half-done: the default subset with no endpoint (endpoints of x/live per publish: %v)", empty, trials, rec.lives)
	}
}

// TestQueuedPolicyHoldsOff: the same when the policy is not the event
// that takes the leading edge but is queued behind it (another source's
// change) and applied with it (handleQueued): the flush must still wait
// for the services that follow the policy.
func TestQueuedPolicyHoldsOff(t *testing.T) {
	const quiet = 20 * time.Millisecond
	rec := &subsetRecorder{ch: make(chan struct{}, 1)}
	l := run(t, Options{Sources: []string{"a", "c"}, ServicesAndPolicy: []string{"c"}, Quiet: quiet, MaxHold: 10 * quiet}, rec)
	ctx := context.Background()
	pol := func(version string) {
		if err := l.PublishPolicy(ctx, sources.PolicyUpdate{Source: "c", Policy: livePolicy(version)}); err != nil {
			t.Fatal(err)
		}
	}
	svcs := func(port uint32, version string) {
		if err := l.Publish(ctx, sources.Update{Source: "c", Services: []sources.Service{subsetHost(port, version)}}); err != nil {
			t.Fatal(err)
		}
	}
	pol("v1")
	svcs(1, "v1")
	publish(t, l, "a", service("y", 1))
	waitTrue(t, l.Ready)
	time.Sleep(3 * quiet)

	// A flush held in the publisher longer than the quiet period, while
	// another change of a and Consul's policy are queued behind it.
	gate := make(chan struct{})
	rec.mu.Lock()
	rec.gate = gate
	rec.mu.Unlock()
	publish(t, l, "a", service("y", 1, 2))
	time.Sleep(2 * quiet)
	publish(t, l, "a", service("y", 1, 2, 3)) // takes the leading edge once the flush is done
	pol("v2")
	close(gate)
	time.Sleep(2 * time.Millisecond) // Consul compares its snapshot between the two calls
	svcs(2, "v2")
	time.Sleep(10 * quiet)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, n := range rec.lives {
		if n == 0 {
			t.Fatalf("the switch was published half-done: the default subset with no endpoint (endpoints of x/live per publish: %v)", rec.lives)
		}
	}
}
