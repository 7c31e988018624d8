package xds_test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"

	"github.com/xdsbridge/xdsbridge/xds"
	"github.com/xdsbridge/xdsbridge/xds/store"
)

// TestDeltaSplitSyncsMatchMapModel: delta clients of the real server sync
// a few hundred clusters and assignments in parts (a small response
// bound), several at once, while names are published, changed and deleted
// between the parts, and while each client subscribes its assignments a
// CDS part at a time and changes its subscription (names twice, "*",
// names it never subscribed unsubscribed, a name subscribed and
// unsubscribed in one request), rejects responses and reconnects with the
// versions it holds. Against a plain map of what is served: no response
// sends a name both ways, sends an assignment the client did not
// subscribe to, or removes a name that was never deleted and that the
// client still subscribes to; once quiet, each client holds exactly what
// is served within its interest, at the current version.
//
// XDSBRIDGE_SPLITSYNC_HISTORIES=N runs N histories (default 6, 2 with
// -short), XDSBRIDGE_SPLITSYNC_SEED=N one.
func TestDeltaSplitSyncsMatchMapModel(t *testing.T) {
	histories := 6
	if testing.Short() {
		histories = 2
	}
	if s := os.Getenv("XDSBRIDGE_SPLITSYNC_HISTORIES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatal(err)
		}
		histories = n
	}
	first := uint64(1)
	if s := os.Getenv("XDSBRIDGE_SPLITSYNC_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		first, histories = n, 1
	}
	for seed := first; seed < first+uint64(histories); seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { runSplitSync(t, seed) })
	}
}

// ssWorld is what is served: each name's variant, per type.
type ssWorld struct {
	clusters, clas map[string]int
	deleted        map[string]bool // ever deleted (either type)
	next           int
	// quiets counts the quiet points; born: type → name → the count when
	// it was first published (a response computed before may report it
	// removed).
	quiets int
	born   map[string]map[string]int
}

func (w *ssWorld) publish(typ, n string, v int) {
	m := w.clusters
	if typ == eds {
		m = w.clas
	}
	m[n] = v
	if _, ok := w.born[typ][n]; !ok {
		w.born[typ][n] = w.quiets
	}
}

type ssClient struct {
	id   int
	dc   *deltaClient
	held map[string]map[string]int // type → name → variant
	// vers: type → name → the version it was sent at.
	vers map[string]map[string]string
	// The EDS subscription: by name, and the wildcard.
	named map[string]bool
	wild  bool
	// unsubbed: names this client ever unsubscribed; window, prevWindow:
	// the assignments of interest at some time since the last quiet
	// point and the one before (a response may cross a request).
	unsubbed           map[string]bool
	window, prevWindow map[string]bool
	windowWild         bool
	prevWindowWild     bool
}

func (c *ssClient) interest(n string) bool { return c.wild || c.named[n] }

func (c *ssClient) newWindow() {
	c.prevWindow, c.prevWindowWild = c.window, c.windowWild
	c.window, c.windowWild = maps.Clone(c.named), c.wild
}

func (c *ssClient) inWindow(n string) bool {
	return c.windowWild || c.prevWindowWild || c.window[n] || c.prevWindow[n]
}

func ssName(i int) string { return fmt.Sprintf("svc-%04d", i) }

func ssCluster(n string, v int) *cluster.Cluster {
	return &cluster.Cluster{Name: n, AltStatName: strconv.Itoa(v)}
}

func ssCLA(n string, v int) *endpoint.ClusterLoadAssignment {
	return &endpoint.ClusterLoadAssignment{ClusterName: n + "@" + strconv.Itoa(v)}
}

// ssVariant reads the variant a resource sent carries.
func ssVariant(t *testing.T, typ string, r *discovery.Resource) int {
	t.Helper()
	var s string
	if typ == cds {
		var m cluster.Cluster
		if err := r.GetResource().UnmarshalTo(&m); err != nil {
			t.Fatal(err)
		}
		s = m.GetAltStatName()
	} else {
		var m endpoint.ClusterLoadAssignment
		if err := r.GetResource().UnmarshalTo(&m); err != nil {
			t.Fatal(err)
		}
		_, s, _ = strings.Cut(m.GetClusterName(), "@")
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%s %s: no variant in %v", typ, r.GetName(), r.GetResource())
	}
	return v
}

func runSplitSync(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x5e11))
	const space = 400
	// Each assignment and cluster costs ~60 B of a response: parts of
	// ~10 to ~80 names (a record of 32 or more is a run of the type's).
	bound := 800 + rng.IntN(4200)
	opts := []xds.Option{xds.WithTypes(cds, eds), xds.WithMaxResponseBytes(bound)}
	if seed%2 == 1 {
		opts = append(opts, xds.WithMinCursor(0))
	}
	// With dependencies, a stream's assignments wait for their clusters
	// (passes within passes: the CDS response sent wakes the EDS watch).
	deps := seed%4 < 2
	h := newHarness(t, false, opts...)
	w := &ssWorld{clusters: map[string]int{}, clas: map[string]int{}, deleted: map[string]bool{}, born: map[string]map[string]int{cds: {}, eds: {}}}
	var log []string
	logf := func(format string, a ...any) { log = append(log, fmt.Sprintf(format, a...)) }
	fail := func(format string, a ...any) {
		t.Helper()
		tail := log[max(0, len(log)-60):]
		t.Fatalf("seed %d, bound %d, dependencies %v: %s\nlast events:\n  %s", seed, bound, deps, fmt.Sprintf(format, a...), strings.Join(tail, "\n  "))
	}

	publish := func(upserts, deletes int) {
		var cu, eu []store.Resource
		var del []string
		cla := func(n string, v int) store.Resource {
			r := store.Resource{Name: n, Msg: ssCLA(n, v)}
			if deps {
				r.DependsOn = &store.Dep{TypeURL: cds, Name: n}
			}
			return r
		}
		for range upserts {
			n := ssName(rng.IntN(space))
			w.next++
			v := w.next
			switch rng.IntN(3) {
			case 0: // the cluster only
				cu = append(cu, store.Resource{Name: n, Msg: ssCluster(n, v)})
				w.publish(cds, n, v)
			case 1: // the assignment only
				eu = append(eu, cla(n, v))
				w.publish(eds, n, v)
			default:
				cu = append(cu, store.Resource{Name: n, Msg: ssCluster(n, v)})
				eu = append(eu, cla(n, v))
				w.publish(cds, n, v)
				w.publish(eds, n, v)
			}
		}
		seen := map[string]bool{}
		for _, r := range cu {
			seen[r.Name] = true
		}
		for _, r := range eu {
			seen[r.Name] = true
		}
		for range deletes {
			n := ssName(rng.IntN(space))
			if seen[n] || slices.Contains(del, n) {
				continue
			}
			del = append(del, n)
			delete(w.clusters, n)
			delete(w.clas, n)
			w.deleted[n] = true
		}
		logf("publish %d clusters, %d assignments, delete %v", len(cu), len(eu), del)
		if err := h.cache.Apply(store.Change{TypeURL: cds, Upserts: cu, Deletes: del}, store.Change{TypeURL: eds, Upserts: eu, Deletes: del}); err != nil {
			t.Fatal(err)
		}
	}
	publish(150+rng.IntN(150), 0)
	h.cache.MarkReady()

	clients := make([]*ssClient, 2+rng.IntN(3))
	// connect opens c's stream: CDS wildcard, EDS by name (what it
	// subscribed, the versions it holds).
	connect := func(c *ssClient) {
		c.dc = h.delta(fmt.Sprintf("node-%d", c.id))
		c.dc.send(&discovery.DeltaDiscoveryRequest{TypeUrl: cds, InitialResourceVersions: ssVersions(c.vers[cds])})
		subs := slices.Sorted(maps.Keys(c.named))
		if c.wild {
			subs = append(subs, "*")
		}
		if len(subs) == 0 {
			// A first request naming nothing would be a wildcard.
			n := ssName(rng.IntN(space))
			c.named[n], c.window[n] = true, true
			subs = []string{n}
		}
		c.dc.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: subs, InitialResourceVersions: ssVersions(c.vers[eds])})
		logf("c%d connects: EDS %d names, wild %v, holding %d clusters and %d assignments", c.id, len(subs), c.wild, len(c.held[cds]), len(c.held[eds]))
	}
	for i := range clients {
		c := &ssClient{id: i, held: map[string]map[string]int{cds: {}, eds: {}}, vers: map[string]map[string]string{cds: {}, eds: {}}, named: map[string]bool{}, unsubbed: map[string]bool{}}
		c.wild = rng.IntN(3) == 0
		c.newWindow()
		clients[i] = c
		connect(c)
	}

	// subChange is a random change of c's EDS subscription: the request's
	// subscriptions and unsubscriptions, applied to the model as the
	// server applies them (subscriptions, then unsubscriptions).
	subChange := func(c *ssClient) (subs, unsubs []string) {
		for range rng.IntN(20) {
			n := ssName(rng.IntN(space))
			subs = append(subs, n)
			if rng.IntN(5) == 0 {
				subs = append(subs, n) // twice
			}
		}
		for range rng.IntN(6) {
			// Some subscribed, some not.
			if names := slices.Sorted(maps.Keys(c.named)); len(names) > 0 && rng.IntN(2) == 0 {
				unsubs = append(unsubs, names[rng.IntN(len(names))])
			} else {
				unsubs = append(unsubs, ssName(rng.IntN(space)))
			}
		}
		if len(subs) > 0 && rng.IntN(6) == 0 {
			unsubs = append(unsubs, subs[rng.IntN(len(subs))]) // both at once
		}
		switch rng.IntN(12) {
		case 0:
			subs = append(subs, "*")
		case 1:
			unsubs = append(unsubs, "*")
		}
		rng.Shuffle(len(subs), func(i, j int) { subs[i], subs[j] = subs[j], subs[i] })
		c.applySub(subs, unsubs)
		return subs, unsubs
	}

	// handle checks one response against the model and answers it.
	handle := func(c *ssClient, r *discovery.DeltaDiscoveryResponse) {
		typ := r.GetTypeUrl()
		sent := map[string]bool{}
		for _, res := range r.GetResources() {
			n := res.GetName()
			if sent[n] {
				fail("c%d %s: %s sent twice in one response", c.id, typ, n)
			}
			sent[n] = true
			if typ == eds && !c.inWindow(n) {
				fail("c%d: assignment %s sent, never subscribed", c.id, n)
			}
		}
		for _, n := range r.GetRemovedResources() {
			if sent[n] {
				fail("c%d %s: %s both sent and removed", c.id, typ, n)
			}
			exists := w.clusters
			if typ == eds {
				exists = w.clas
			}
			if _, ok := exists[n]; ok && !w.deleted[n] && w.born[typ][n] < w.quiets-1 && (typ == cds || (c.named[n] && !c.unsubbed[n])) {
				fail("c%d %s: %s reported removed; it is served since before the last quiet points, was never deleted and is subscribed", c.id, typ, n)
			}
		}
		nack := len(r.GetResources()) >= 2 && rng.IntN(8) == 0
		logf("c%d %s nonce %s: %d sent, %d removed, nack %v", c.id, typ, r.GetNonce(), len(r.GetResources()), len(r.GetRemovedResources()), nack)
		req := &discovery.DeltaDiscoveryRequest{TypeUrl: typ, ResponseNonce: r.GetNonce()}
		if nack {
			req.ErrorDetail = &status.Status{Code: 3, Message: "rejected by the test"}
			c.dc.send(req)
			return
		}
		for _, res := range r.GetResources() {
			n := res.GetName()
			if typ == eds && !c.interest(n) {
				continue // unsubscribed since: dropped
			}
			c.held[typ][n] = ssVariant(t, typ, res)
			c.vers[typ][n] = res.GetVersion()
		}
		for _, n := range r.GetRemovedResources() {
			delete(c.held[typ], n)
			delete(c.vers[typ], n)
		}
		c.dc.send(req)
		if typ == cds && len(r.GetResources()) > 0 && rng.IntN(4) > 0 {
			// As Envoy: the assignments of the clusters of the part.
			var subs []string
			for _, res := range r.GetResources() {
				subs = append(subs, res.GetName())
			}
			c.applySub(subs, nil)
			c.dc.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: subs})
			logf("c%d subscribes to the %d assignments of the part", c.id, len(subs))
		}
	}

	// pump handles the responses arriving within d of each other.
	pump := func(d time.Duration) int {
		handled := 0
		for {
			got := false
			for _, c := range clients {
				select {
				case r := <-c.dc.resp:
					handle(c, r)
					handled++
					got = true
				case <-c.dc.ended:
					fail("c%d: stream ended: %v", c.id, c.dc.err)
				default:
				}
			}
			if got {
				continue
			}
			deadline := time.After(d)
			idle := true
			for idle {
				select {
				case <-deadline:
					return handled
				default:
				}
				for _, c := range clients {
					if len(c.dc.resp) > 0 {
						idle = false
					}
				}
				if idle {
					time.Sleep(2 * time.Millisecond)
				}
			}
		}
	}

	// quiet handles responses until every client holds what is served
	// within its interest and nothing more arrives.
	quiet := func() {
		deadline := time.Now().Add(10 * time.Second)
		for {
			pump(50 * time.Millisecond)
			diff := ""
			for _, c := range clients {
				if diff = c.diff(w); diff != "" {
					break
				}
			}
			if diff == "" && pump(150*time.Millisecond) == 0 {
				break
			}
			if time.Now().After(deadline) {
				fail("not quiet: %s", diff)
			}
		}
		for _, c := range clients {
			c.newWindow()
		}
		w.quiets++
		logf("quiet")
	}

	for range 25 {
		switch k := rng.IntN(10); {
		case k < 4:
			publish(rng.IntN(40), rng.IntN(15))
		case k < 7:
			c := clients[rng.IntN(len(clients))]
			subs, unsubs := subChange(c)
			c.dc.send(&discovery.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: subs, ResourceNamesUnsubscribe: unsubs})
			logf("c%d subscribes %v, unsubscribes %v", c.id, subs, unsubs)
		case k < 8:
			c := clients[rng.IntN(len(clients))]
			c.dc.cancel()
			<-c.dc.ended
			// What it was sent but did not read is lost with the stream.
			for len(c.dc.resp) > 0 {
				<-c.dc.resp
			}
			connect(c)
		default:
			quiet()
		}
		pump(time.Duration(rng.IntN(3)) * time.Millisecond)
	}
	quiet()
}

// applySub applies a request's subscriptions then unsubscriptions, in
// order, to the model, as the server does; the client drops an assignment
// it unsubscribes by name, or that is no longer of interest.
func (c *ssClient) applySub(subs, unsubs []string) {
	for _, n := range subs {
		if n == "*" {
			c.wild, c.windowWild = true, true
			continue
		}
		c.named[n], c.window[n] = true, true
	}
	for _, n := range unsubs {
		if n == "*" {
			c.wild = false
			continue
		}
		if c.named[n] {
			// Dropped; under the wildcard, the server answers it again.
			delete(c.held[eds], n)
			delete(c.vers[eds], n)
		}
		delete(c.named, n)
		c.unsubbed[n] = true
	}
	for n := range c.held[eds] {
		if !c.interest(n) {
			delete(c.held[eds], n)
			delete(c.vers[eds], n)
		}
	}
}

// diff describes how c's state differs from what is served within its
// interest ("" if it does not).
func (c *ssClient) diff(w *ssWorld) string {
	want := map[string]map[string]int{cds: maps.Clone(w.clusters), eds: {}}
	for n, v := range w.clas {
		if c.interest(n) {
			want[eds][n] = v
		}
	}
	for _, typ := range []string{cds, eds} {
		for n, v := range want[typ] {
			if h, ok := c.held[typ][n]; !ok || h != v {
				return fmt.Sprintf("c%d %s %s: holds variant %d (%v), served %d", c.id, typ, n, h, ok, v)
			}
		}
		for n, h := range c.held[typ] {
			if _, ok := want[typ][n]; !ok {
				return fmt.Sprintf("c%d %s %s: holds variant %d, not served or not of interest", c.id, typ, n, h)
			}
		}
	}
	return ""
}

func ssVersions(vers map[string]string) map[string]string {
	if len(vers) == 0 {
		return nil
	}
	return maps.Clone(vers)
}
