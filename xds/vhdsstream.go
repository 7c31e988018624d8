package xds

import (
	"context"
	"slices"
	"strings"
	"sync"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
)

// vhdsStream is what one delta stream subscribed to over VHDS and holds.
// The stream calls request, sending and next under its lock
// (deltaStream.mu); the publisher calls tableChanged.
type vhdsStream struct {
	t    *vhdsTable
	wake chan struct{} // a table change the stream may need (cap 1)
	done chan struct{}
	wg   sync.WaitGroup

	mu sync.Mutex
	// routeSent: the stream was sent the stub, or resumed holding it (the rule of updateOrder:
	// no virtual host before its route configuration).
	routeSent bool
	// aliases: subscribed aliases (full names, "<table>/<Host>") →
	// unanswered (true until the next response answers them).
	aliases map[string]bool
	// held: resource name → version the stream was sent.
	held map[string]string
	// answer: the next response goes out even if empty (a subscription
	// that names no alias, such as Envoy's first request for the table).
	answer bool
	// vis: what the client may read (xds.authorization): a virtual host
	// whose service it may not read is answered as no virtual host.
	vis *visibility
}

// vhdsOpen registers a delta stream; its pump hands table changes to
// the stream through its queue (as vhdsWakeResponse). Nil when the cache
// serves no VHDS.
func (c *Cache) vhdsOpen(ctx context.Context, q deltaQueue) *vhdsStream {
	t := c.vhds.Load()
	if t == nil {
		return nil
	}
	s := &vhdsStream{t: t, wake: make(chan struct{}, 1), done: make(chan struct{}), aliases: map[string]bool{}, held: map[string]string{}}
	t.mu.Lock()
	t.streams[s] = struct{}{}
	t.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			select {
			case <-s.wake:
				select {
				case q.ch <- vhdsWakeResponse:
					q.queued()
				case <-s.done:
					return
				case <-ctx.Done():
					return
				}
			case <-s.done:
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	return s
}

// close unregisters the stream and stops its pump (before the stream's
// response channel is closed).
func (s *vhdsStream) close() {
	if s == nil {
		return
	}
	s.t.mu.Lock()
	delete(s.t.streams, s)
	s.t.mu.Unlock()
	close(s.done)
	s.wg.Wait()
}

func (s *vhdsStream) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// tableChanged wakes the stream if it holds one of the names changed or,
// when domains changed, has an alias: one that resolved to nothing may
// resolve now, and one that resolved may resolve to another host (a more
// specific domain added, or its host gone).
func (s *vhdsStream) tableChanged(changed []string, domainsChanged bool) {
	s.mu.Lock()
	need := domainsChanged && len(s.aliases) > 0
	for _, n := range changed {
		if need {
			break
		}
		_, need = s.held[n]
	}
	s.mu.Unlock()
	if need {
		s.signal()
	}
}

// request applies a VirtualHost request: its subscriptions and
// unsubscriptions, and, on a first request, the versions the client
// holds. Names outside the table ("<table>" itself, Envoy's first
// subscription, or another table's) are answered with nothing.
func (s *vhdsStream) request(req *discovery.DeltaDiscoveryRequest, first bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if first {
		s.answer = true
		for n, v := range req.GetInitialResourceVersions() {
			if strings.HasPrefix(n, s.t.prefix) {
				s.held[n] = v
			}
		}
	}
	for _, n := range req.GetResourceNamesUnsubscribe() {
		delete(s.aliases, n)
		delete(s.held, n)
	}
	for _, n := range req.GetResourceNamesSubscribe() {
		if !strings.HasPrefix(n, s.t.prefix) {
			s.answer = true
			continue
		}
		s.aliases[n] = true
	}
}

func (s *vhdsStream) setVisibility(v *visibility) {
	s.mu.Lock()
	s.vis = v
	s.mu.Unlock()
}

// sending renames the stub in a route response to the table's name (the
// stub's Resource is the store's, shared: replaced by a copy) and notes
// that the stream was sent it.
func (s *vhdsStream) sending(resp *discovery.DeltaDiscoveryResponse) {
	if s == nil || resp.GetTypeUrl() != RouteType {
		return
	}
	// The whole table is never sent to a delta stream under its name
	// (only a wildcard subscription would be sent it): the stub is.
	if slices.ContainsFunc(resp.GetResources(), func(r *discovery.Resource) bool { return r.GetName() == s.t.name }) {
		resp.Resources = slices.DeleteFunc(slices.Clone(resp.Resources), func(r *discovery.Resource) bool { return r.GetName() == s.t.name })
	}
	if slices.Contains(resp.GetRemovedResources(), s.t.name) {
		resp.RemovedResources = slices.DeleteFunc(slices.Clone(resp.RemovedResources), func(n string) bool { return n == s.t.name })
	}
	sent := false
	for i, r := range resp.GetResources() {
		if r.GetName() == s.t.stubName {
			if !sent {
				resp.Resources = slices.Clone(resp.Resources)
			}
			c := proto.Clone(r).(*discovery.Resource)
			c.Name = s.t.name
			resp.Resources[i], sent = c, true
		}
	}
	for i, n := range resp.GetRemovedResources() {
		if n == s.t.stubName {
			resp.RemovedResources = slices.Clone(resp.RemovedResources)
			resp.RemovedResources[i] = s.t.name
		}
	}
	if sent {
		s.mu.Lock()
		s.routeSent = true
		wake := len(s.aliases) > 0 || s.answer
		s.mu.Unlock()
		if wake {
			s.signal()
		}
	}
}

// toStub reads a route request's names of the table as the stub's.
func (s *vhdsStream) toStub(req *discovery.DeltaDiscoveryRequest) {
	if s == nil {
		return
	}
	rename := func(l []string) []string {
		if i := slices.Index(l, s.t.name); i >= 0 {
			l = slices.Clone(l)
			l[i] = s.t.stubName
		}
		return l
	}
	req.ResourceNamesSubscribe = rename(req.ResourceNamesSubscribe)
	req.ResourceNamesUnsubscribe = rename(req.ResourceNamesUnsubscribe)
	if v, ok := req.InitialResourceVersions[s.t.name]; ok {
		delete(req.InitialResourceVersions, s.t.name)
		req.InitialResourceVersions[s.t.stubName] = v
		// A resuming client holds the route configuration, and is sent
		// it again only if it changed: its virtual hosts need not wait.
		s.mu.Lock()
		s.routeSent = true
		s.mu.Unlock()
	}
}

// next is the stream's next VHDS response, nil when it has nothing to
// send: the virtual hosts its aliases resolve to that it does not hold at
// their version or that an alias just asked for, the unresolved aliases
// just asked for (without a resource), and the names it holds that are
// gone. Nothing before the stream was sent the stub.
func (s *vhdsStream) next() *discovery.DeltaDiscoveryResponse {
	t := s.t
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.routeSent {
		return nil
	}
	resp := &discovery.DeltaDiscoveryResponse{TypeUrl: VirtualHostType}
	t.mu.Lock()
	byName := map[string][]string{} // resource → aliases resolving to it
	asked := map[string]bool{}      // resource → an alias just asked for it
	var unresolved []string
	for a, fresh := range s.aliases {
		n := t.resolve(a[len(t.prefix):])
		if n != "" && !s.vis.sees(n[len(t.prefix):]) {
			n = ""
		}
		if n == "" {
			if fresh {
				unresolved = append(unresolved, a)
			}
			continue
		}
		byName[n] = append(byName[n], a)
		asked[n] = asked[n] || fresh
	}
	var hosts, removed int
	for n, v := range s.held {
		// A host the client may not read is not held either, whatever
		// its first request claimed (initial_resource_versions).
		if t.hosts[n] == nil || !s.vis.sees(n[len(t.prefix):]) {
			resp.RemovedResources = append(resp.RemovedResources, n)
			delete(s.held, n)
			removed++
		} else if _, ok := byName[n]; !ok && t.hosts[n].version != v {
			// Held through an alias no longer subscribed or moved
			// elsewhere: kept current while held.
			byName[n] = nil
		}
	}
	for n, aliases := range byName {
		h := t.hosts[n]
		if v, ok := s.held[n]; ok && v == h.version && !asked[n] {
			continue
		}
		slices.Sort(aliases)
		resp.Resources = append(resp.Resources, &discovery.Resource{Name: n, Version: h.version, Resource: h.any, Aliases: aliases})
		s.held[n] = h.version
		hosts++
	}
	t.mu.Unlock()
	for _, a := range unresolved {
		resp.Resources = append(resp.Resources, &discovery.Resource{Name: a, Aliases: []string{a}})
	}
	for a := range s.aliases {
		s.aliases[a] = false
	}
	if len(resp.Resources) == 0 && len(resp.RemovedResources) == 0 {
		if !s.answer {
			return nil
		}
		// Envoy's VHDS watch (namespace "<table>") is told of a response
		// only through a name in it: an empty one would leave it waiting
		// for its first update (initial_fetch_timeout, 15 s by default,
		// during which the listener is not ready). "<table>/" (the empty
		// host), which no virtual host is named, is reported removed.
		resp.RemovedResources = []string{t.prefix}
	}
	s.answer = false
	slices.SortFunc(resp.Resources, func(a, b *discovery.Resource) int { return strings.Compare(a.Name, b.Name) })
	slices.Sort(resp.RemovedResources)
	t.sent.WithLabelValues("host").Add(float64(hosts))
	t.sent.WithLabelValues("unresolved").Add(float64(len(unresolved)))
	t.sent.WithLabelValues("removed").Add(float64(removed))
	return resp
}

// vhdsWakeResponse is put in a stream's responses by its pump: the table
// changed in a way the stream may need (process calls vhdsWoken). It is
// never sent.
var vhdsWakeResponse = &deltaResponse{req: &discovery.DeltaDiscoveryRequest{TypeUrl: VirtualHostType}}

// vhdsRequest answers a VirtualHost request on a stream that serves VHDS.
func (ds *deltaStream) vhdsRequest(req *discovery.DeltaDiscoveryRequest) error {
	w, seen := ds.watches.get(VirtualHostType)
	if !seen {
		if c, ok := ds.s.cache.(*Cache); ok {
			c.lock()
			if st := c.streams[streamKey{true, ds.id}]; st != nil {
				ds.vhds.setVisibility(st.vis)
			}
			c.unlock()
		}
	}
	ds.vhds.request(req, !seen)
	ds.watches.set(VirtualHostType, w)
	return ds.vhdsSend()
}

// vhdsWoken sends what a table change brings the stream, if anything.
func (ds *deltaStream) vhdsWoken() error {
	if ds.vhds == nil {
		return nil
	}
	return ds.vhdsSend()
}

func (ds *deltaStream) vhdsSend() error {
	resp := ds.vhds.next()
	if resp == nil {
		return nil
	}
	nonce, err := ds.send(&deltaResponse{req: vhdsWakeResponse.req, resp: resp})
	if err != nil {
		return err
	}
	w := ds.watches.at(VirtualHostType)
	w.nonce = nonce
	ds.watches.set(VirtualHostType, w)
	return nil
}
