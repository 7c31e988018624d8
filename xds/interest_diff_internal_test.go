package xds

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/xdsbridge/xdsbridge/xds/store"
)

// diffSotwStream drives one sotw ADS stream (CDS and EDS) through a cache
// as sotwserver.go and the server's callbacks do: each request noted,
// its type's watch cancelled, the queued responses of its type dropped,
// the subscription set, a new watch; a response taken gets the stream's
// next nonce, installs its state, and is told to the cache (sotwSent).
type diffSotwStream struct {
	c       *Cache
	key     streamKey
	ch      chan *sotwResponse
	subs    map[string]*sotwSub
	cancels map[string]func()
	wnonce  map[string]string // server side: nonce of the type's last response sent
	nonce   int
	// client side: the last response of each type, and its version
	// accepted.
	lastNonce, lastVersion map[string]string
	sent                   []*discovery.DiscoveryResponse
	// everyName: every request that lists names makes the state
	// incomplete, so the watch looks at every name of interest, not only
	// at those changed since the state (the reference a kept complete
	// state is checked against).
	everyName bool
	// everyRequest: every request makes the state incomplete (a full
	// check on every request, the reference a state's rest is checked
	// against).
	everyRequest bool
}

func newDiffSotwStream(c *Cache, id int64) *diffSotwStream {
	return &diffSotwStream{c: c, key: streamKey{false, id}, ch: make(chan *sotwResponse, 8),
		subs: map[string]*sotwSub{}, cancels: map[string]func(){}, wnonce: map[string]string{},
		lastNonce: map[string]string{}, lastVersion: map[string]string{}}
}

func (s *diffSotwStream) request(t *testing.T, req *discovery.DiscoveryRequest) {
	s.c.noteRequest(req, s.key, req.GetTypeUrl())
	typ := req.GetTypeUrl()
	sub, ok := s.subs[typ]
	if ok {
		if wn := s.wnonce[typ]; wn != "" && req.GetResponseNonce() != wn {
			sub.skipped(req.GetResourceNames())
			return
		}
		if cancel := s.cancels[typ]; cancel != nil {
			cancel()
		}
		// The responses queued are sent, but those of typ (dropped).
		var keep []*sotwResponse
		for len(s.ch) > 0 {
			r := <-s.ch
			if r.req.GetTypeUrl() == typ {
				continue
			}
			keep = append(keep, r)
		}
		for _, r := range keep {
			s.sent = append(s.sent, s.send(r))
		}
		s.wnonce[typ] = ""
		sub.set(req.GetResourceNames())
		if s.everyRequest || (s.everyName && len(req.GetResourceNames()) > 0) {
			sub.held.complete = false
		}
	} else {
		ns := newSotwSub(req.GetResourceNames())
		sub = &ns
		s.subs[typ] = sub
	}
	cancel, err := s.c.watchSotw(req, *sub, sotwQueue{ch: s.ch})
	if err != nil {
		t.Fatal(err)
	}
	s.cancels[typ] = cancel
}

func (s *diffSotwStream) send(r *sotwResponse) *discovery.DiscoveryResponse {
	s.nonce++
	out := r.resp
	out.Nonce = fmt.Sprint(s.nonce)
	typ := r.req.GetTypeUrl()
	s.subs[typ].held = r.next
	s.wnonce[typ] = out.Nonce
	s.c.sotwSent(s.key, out)
	s.c.responseSent(s.key, typ, out, out.Nonce)
	s.lastNonce[typ] = out.Nonce
	return out
}

func (s *diffSotwStream) takeAll() []*discovery.DiscoveryResponse {
	for len(s.ch) > 0 {
		s.sent = append(s.sent, s.send(<-s.ch))
	}
	out := s.sent
	s.sent = nil
	return out
}

// TestSotwNarrowDifferentialWithStreams: sotw ADS streams of clusters and
// assignments (assignments held back until their clusters are sent, NACKs,
// small responses, names listed again, fewer or more), served by a cache
// that wakes assignment watches by name and keeps a state complete across
// requests that ask for nothing new, and by one that offers every commit
// to every watch and looks at every name of interest on every request
// that lists names, send the same.
func TestSotwNarrowDifferentialWithStreams(t *testing.T) {
	for seed := range diffSeeds() {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { sotwNarrowDiffStreams(t, seed) })
	}
}

func sotwNarrowDiffStreams(t *testing.T, seed uint64) {
	const services, clients, steps = 12, 6, 400
	rng := rand.New(rand.NewPCG(seed, 4747))
	name := func(i int) string { return fmt.Sprintf("svc-%02d", i) }
	maxBytes := 0
	if seed%2 == 1 {
		maxBytes = 200 + rng.IntN(400)
	}
	caches := [2]*Cache{
		NewCache(WithTypes(ClusterType, EndpointType), WithMaxResponseBytes(maxBytes)),
		NewCache(WithTypes(ClusterType, EndpointType), WithMaxResponseBytes(maxBytes)),
	}
	caches[1].maxNarrow = -1
	ver := 0
	clusterOf := func(n string) store.Resource {
		ver++
		return store.Resource{Name: n, Msg: &cluster.Cluster{Name: n, AltStatName: fmt.Sprint(ver)}}
	}
	assignmentOf := func(n string) store.Resource {
		ver++
		la := &endpoint.ClusterLoadAssignment{ClusterName: n}
		for i := range 1 + rng.IntN(6) {
			la.Endpoints = append(la.Endpoints, &endpoint.LocalityLbEndpoints{Priority: uint32(i + ver%3)})
		}
		return store.Resource{Name: n, Msg: la, DependsOn: &store.Dep{TypeURL: ClusterType, Name: n}}
	}
	apply := func(chs ...store.Change) { applyCopies(t, caches, chs...) }
	var cls, eps []store.Resource
	for i := range services {
		cls = append(cls, clusterOf(name(i)))
		eps = append(eps, assignmentOf(name(i)))
	}
	apply(store.Change{TypeURL: ClusterType, Upserts: cls}, store.Change{TypeURL: EndpointType, Upserts: eps})
	for _, c := range caches {
		c.MarkReady()
	}
	pick := func() []string {
		var names []string
		for range 1 + rng.IntN(5) {
			names = append(names, name(rng.IntN(services)))
		}
		switch rng.IntN(10) {
		case 0:
			names = append(names, "*")
		case 1:
			return nil // legacy wildcard (first request), else nothing
		}
		return names
	}
	type client struct {
		s     [2]*diffSotwStream
		names map[string][]string
	}
	var cl []*client
	for i := range clients {
		c := &client{names: map[string][]string{ClusterType: nil, EndpointType: pick()}}
		if rng.IntN(2) == 0 {
			c.names[ClusterType] = pick()
		}
		for k := range caches {
			c.s[k] = newDiffSotwStream(caches[k], int64(i+1))
			c.s[k].everyName = k == 1
			if seed%4 >= 2 {
				var vis *visibility
				if i%2 == 0 {
					vis = &visibility{patterns: []string{"*[0-4]"}}
				}
				caches[k].openStream(c.s[k].key, vis)
			}
		}
		cl = append(cl, c)
	}
	request := func(c *client, typ string, nack bool) { requestPair(t, c.s, typ, c.names[typ], nack, false) }
	for _, c := range cl {
		request(c, ClusterType, false)
		request(c, EndpointType, false)
	}
	compare := func(step int, c *client) {
		checkInterest(t, caches[0])
		comparePair(t, c.s, fmt.Sprintf("seed %d step %d", seed, step), "by name", "every commit")
	}
	for step := range steps {
		switch r := rng.IntN(12); {
		case r < 4:
			i := rng.IntN(services)
			var chs []store.Change
			switch rng.IntN(5) {
			case 0:
				chs = append(chs, store.Change{TypeURL: ClusterType, Upserts: []store.Resource{clusterOf(name(i))}})
			case 1:
				chs = append(chs, store.Change{TypeURL: ClusterType, Upserts: []store.Resource{clusterOf(name(i))}},
					store.Change{TypeURL: EndpointType, Upserts: []store.Resource{assignmentOf(name(i))}})
			case 2:
				if rng.IntN(3) == 0 {
					chs = append(chs, store.Change{TypeURL: EndpointType, Deletes: []string{name(i)}})
				} else {
					chs = append(chs, store.Change{TypeURL: EndpointType, Upserts: []store.Resource{assignmentOf(name(i))}})
				}
			default:
				ups := someOf(rng, services, 4, func(j int) store.Resource { return assignmentOf(name(j)) })
				chs = append(chs, store.Change{TypeURL: EndpointType, Upserts: ups})
			}
			apply(chs...)
		default:
			c := cl[rng.IntN(clients)]
			compare(step, c)
			typ := EndpointType
			if rng.IntN(3) == 0 {
				typ = ClusterType
			}
			switch ns := c.names[typ]; {
			case rng.IntN(5) == 0:
				c.names[typ] = pick()
				if typ == ClusterType && rng.IntN(2) == 0 {
					c.names[typ] = nil
				}
			case len(ns) > 0 && rng.IntN(8) == 0:
				// one name fewer
				j := rng.IntN(len(ns))
				c.names[typ] = slices.Delete(slices.Clone(ns), j, j+1)
			}
			// Version of a NACK: the last accepted; here the client
			// accepted everything it took unless it NACKs now.
			nack := rng.IntN(4) == 0
			request(c, typ, nack)
		}
	}
	for _, c := range cl {
		compare(steps, c)
	}
}

// applyCopies applies chs to each cache, each with its own copies (the
// store owns what it is given).
func applyCopies(t *testing.T, caches [2]*Cache, chs ...store.Change) {
	t.Helper()
	for _, c := range caches {
		var cp []store.Change
		for _, ch := range chs {
			n := store.Change{TypeURL: ch.TypeURL, Deletes: slices.Clone(ch.Deletes)}
			for _, u := range ch.Upserts {
				u.Msg = proto.Clone(u.Msg)
				n.Upserts = append(n.Upserts, u)
			}
			cp = append(cp, n)
		}
		if err := c.Apply(cp...); err != nil {
			t.Fatal(err)
		}
	}
}

// requestPair sends one client's request to both of its streams: names,
// the version it accepted last, the nonce of its last response ("0" if
// stale), and a NACK of that response if nack.
func requestPair(t *testing.T, s [2]*diffSotwStream, typ string, names []string, nack, stale bool) {
	t.Helper()
	for _, st := range s {
		nonce := st.lastNonce[typ]
		if stale && nonce != "" {
			nonce = "0"
		}
		req := &discovery.DiscoveryRequest{TypeUrl: typ, ResourceNames: slices.Clone(names),
			VersionInfo: st.lastVersion[typ], ResponseNonce: nonce}
		if nack && st.lastNonce[typ] != "" {
			req.ErrorDetail = &status.Status{Message: "no"}
		}
		st.request(t, req)
	}
}

// comparePair fails t unless both streams of a client sent the same
// responses since the last call (a and b name them), and notes each
// response's version as accepted (the client accepts unless it NACKs
// next).
func comparePair(t *testing.T, s [2]*diffSotwStream, at, a, b string) {
	t.Helper()
	ra, rb := s[0].takeAll(), s[1].takeAll()
	if len(ra) != len(rb) {
		t.Fatalf("%s: %s sent %d responses %v, %s %d %v", at, a, len(ra), ra, b, len(rb), rb)
	}
	for i := range ra {
		if !proto.Equal(ra[i], rb[i]) {
			t.Fatalf("%s: response %d: %s\n%v\n%s\n%v", at, i, a, ra[i], b, rb[i])
		}
		typ := ra[i].GetTypeUrl()
		for _, st := range s {
			st.lastVersion[typ] = ra[i].GetVersionInfo()
		}
	}
}

// someOf returns of(j) for 1 to most random j among services, each once
// (the rng drawn as many times as most allows).
func someOf(rng *rand.Rand, services, most int, of func(j int) store.Resource) []store.Resource {
	var out []store.Resource
	seen := map[int]bool{}
	for range 1 + rng.IntN(most) {
		j := rng.IntN(services)
		if !seen[j] {
			seen[j] = true
			out = append(out, of(j))
		}
	}
	return out
}

func diffSeeds() uint64 {
	if s := os.Getenv("XDSBRIDGE_DIFF_SEEDS"); s != "" {
		if n, err := strconv.ParseUint(s, 10, 64); err == nil {
			return n
		}
	}
	if testing.Short() {
		return 50
	}
	return 300
}

// checkInterest fails t unless every type's index holds its open watches,
// each once, a narrow one under exactly the names it lists.
func checkInterest(t *testing.T, c *Cache) {
	t.Helper()
	c.lock()
	defer c.unlock()
	for _, ts := range c.types {
		in := map[*watch]int{}
		for w := range ts.interest.broad {
			if w.narrow {
				t.Fatalf("%s: narrow watch %d among the broad", ts.URL, w.id)
			}
			in[w]++
		}
		for n, ws := range ts.interest.byName {
			if len(ws) == 0 {
				t.Fatalf("%s: empty entry for %q", ts.URL, n)
			}
			for w := range ws {
				if _, ok := w.sub.SubscribedResources()[n]; !ok || !w.narrow {
					t.Fatalf("%s: watch %d under %q it does not list", ts.URL, w.id, n)
				}
				if _, broad := ts.interest.broad[w]; broad {
					t.Fatalf("%s: watch %d both broad and narrow", ts.URL, w.id)
				}
				in[w] = 1
			}
		}
		for w := range ts.watches {
			if w.narrow && len(w.narrowNames) == 0 {
				in[w] = 1 // lists nothing: nothing wakes it
			}
			if in[w] != 1 {
				t.Fatalf("%s: open watch %d in the index %d times", ts.URL, w.id, in[w])
			}
			if w.narrow && len(w.narrowNames) != len(w.sub.SubscribedResources()) {
				t.Fatalf("%s: narrow watch %d indexed under %d names, lists %d", ts.URL, w.id, len(w.narrowNames), len(w.sub.SubscribedResources()))
			}
			delete(in, w)
		}
		if len(in) > 0 {
			t.Fatalf("%s: %d watches in the index not open", ts.URL, len(in))
		}
	}
}
