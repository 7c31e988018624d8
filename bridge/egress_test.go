package bridge

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/xdsbridge/xdsbridge/sources"
	"github.com/xdsbridge/xdsbridge/translate"
)

// egressRecorder records each publish as one line: the services changed
// and removed, or the egress table's virtual hosts.
type egressRecorder struct {
	mu     sync.Mutex
	calls  []string
	routes []string // route configuration names published, in order
	ch     chan struct{}
}

func (r *egressRecorder) PublishServices(changed []translate.Resources, removed []string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var parts []string
	for _, res := range changed {
		if res.Route != nil {
			r.routes = append(r.routes, res.Route.GetName())
		}
		if res.Cluster == nil {
			var hosts []string
			for _, vh := range res.Route.GetVirtualHosts() {
				hosts = append(hosts, vh.GetName())
			}
			parts = append(parts, "table "+strings.Join(hosts, ","))
			if res.Listener != nil {
				parts = append(parts, "listener "+res.Listener.GetName())
			}
			continue
		}
		parts = append(parts, "service "+res.Cluster.GetName())
	}
	for _, n := range removed {
		parts = append(parts, "removed "+n)
	}
	r.calls = append(r.calls, strings.Join(parts, " "))
	r.ch <- struct{}{}
	return nil
}

func (r *egressRecorder) MarkReady() {}

// take waits for n publishes and returns them.
func (r *egressRecorder) take(t *testing.T, n int) []string {
	t.Helper()
	for range n {
		select {
		case <-r.ch:
		case <-time.After(5 * time.Second):
			t.Fatal("timed out waiting for a publish")
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.calls
	r.calls = nil
	return out
}

func TestEgressTableFollowsServices(t *testing.T) {
	rec := &egressRecorder{ch: make(chan struct{}, 100)}
	e := translate.Egress{Listener: &translate.EgressListener{Port: 10001}}.WithDefaults()
	l := run(t, Options{Sources: []string{"a"}, Quiet: time.Millisecond, Egress: &e}, rec)
	publish(t, l, "a", service("x", 1), service("y", 1))
	want := []string{"service x service y", "table x,y,xdsbridge-unknown-host listener xdsbridge:egress"}
	if d := cmp.Diff(want, rec.take(t, 2)); d != "" {
		t.Fatalf("first flush (-want +got):\n%s", d)
	}
	// Removed: the table without y goes before y's cluster is removed.
	publish(t, l, "a", service("x", 1))
	want = []string{"table x,xdsbridge-unknown-host listener xdsbridge:egress", "removed y"}
	if d := cmp.Diff(want, rec.take(t, 2)); d != "" {
		t.Fatalf("removal (-want +got):\n%s", d)
	}
	// Added: the table with z after z's cluster.
	publish(t, l, "a", service("x", 1), service("z", 1))
	want = []string{"service z", "table x,z,xdsbridge-unknown-host listener xdsbridge:egress"}
	if d := cmp.Diff(want, rec.take(t, 2)); d != "" {
		t.Fatalf("addition (-want +got):\n%s", d)
	}
	// A change that leaves the table as it is does not publish it again.
	publish(t, l, "a", service("x", 1, 2), service("z", 1))
	if d := cmp.Diff([]string{"service x"}, rec.take(t, 1)); d != "" {
		t.Fatalf("endpoint change (-want +got):\n%s", d)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.calls) > 0 {
		t.Errorf("more publishes: %v", rec.calls)
	}
}

func TestEgressTableWithoutServices(t *testing.T) {
	rec := &egressRecorder{ch: make(chan struct{}, 100)}
	e := translate.Egress{}.WithDefaults()
	l := run(t, Options{Sources: []string{"a"}, Quiet: time.Millisecond, Egress: &e}, rec)
	publish(t, l, "a")
	if d := cmp.Diff([]string{"table xdsbridge-unknown-host"}, rec.take(t, 1)); d != "" {
		t.Fatalf("(-want +got):\n%s", d)
	}
}

func TestEgressServiceNamedLikeTheTable(t *testing.T) {
	rec := &egressRecorder{ch: make(chan struct{}, 100)}
	e := translate.Egress{}.WithDefaults()
	l := run(t, Options{Sources: []string{"a"}, Quiet: time.Millisecond, Egress: &e}, rec)
	publish(t, l, "a", service(translate.DefaultEgressName, 1), service("x", 1))
	rec.take(t, 2)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	// The service's own route configuration would replace the table.
	if d := cmp.Diff([]string{"x", translate.DefaultEgressName}, rec.routes); d != "" {
		t.Errorf("route configurations published (-want +got):\n%s", d)
	}
}

func TestEgressIncludeByTag(t *testing.T) {
	rec := &egressRecorder{ch: make(chan struct{}, 100)}
	e := translate.Egress{Include: translate.EgressInclude{Tags: []string{"public"}}}.WithDefaults()
	l := run(t, Options{Sources: []string{"a"}, Quiet: time.Millisecond, Egress: &e}, rec)
	pub := service("x", 1)
	pub.Endpoints[0].Metadata = sources.Metadata{"consul": {"tag.public": true}}
	publish(t, l, "a", pub, service("y", 1))
	want := []string{"service x service y", "table x,xdsbridge-unknown-host"}
	if d := cmp.Diff(want, rec.take(t, 2)); d != "" {
		t.Fatalf("(-want +got):\n%s", d)
	}
	// y tagged: it joins the table.
	tagged := service("y", 1)
	tagged.Endpoints[0].Metadata = sources.Metadata{"consul": {"tags": []any{"public"}}}
	publish(t, l, "a", pub, tagged)
	want = []string{"service y", "table x,y,xdsbridge-unknown-host"}
	if d := cmp.Diff(want, rec.take(t, 2)); d != "" {
		t.Fatalf("(-want +got):\n%s", d)
	}
}
