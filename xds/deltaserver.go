package xds

// The delta (incremental) xDS stream handler: adapted from go-control-plane
// v0.14.0's pkg/server/delta/v3/server.go, watches.go and
// pkg/server/stream/v3/subscription.go (Copyright Envoyproxy Authors,
// Apache License 2.0). What differs is the subscription state: the names
// a stream subscribes to are a shared, immutable nameSet (nameset.go)
// instead of a map per stream and type, so a fleet of Envoys subscribed
// to the same assignments holds one set, and the names' strings once. The
// stream's life is go-control-plane's, call for call: OnDeltaStreamOpen,
// then per request OnStreamDeltaRequest (after the responses already
// queued are sent) and a new watch (the previous one cancelled first),
// OnStreamDeltaResponse before each response is sent, and
// OnDeltaStreamClosed after the watches are cancelled; the returned
// resources map the cache hands with each response becomes the stream's
// state once the response is sent, and an unsubscription marks it in
// place as go-control-plane does (delta.go relies on both).

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/delta/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/stream/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const explicitWildcard = "*"

// deltaSub is a delta stream's subscription to one type: the cache reads
// it through cache.Subscription. A copy is handed to each watch (as
// go-control-plane hands a copy of its struct), so a watch sees the names
// as of its request.
type deltaSub struct {
	// wildcard: the subscription holds the wildcard; allowLegacyWildcard:
	// no name was ever subscribed, so an empty request is a wildcard.
	wildcard, allowLegacyWildcard bool
	// names: subscribed by name (shared; never written). grewFrom: the
	// names before the last request, if it removed none of them (names
	// holds them all): an Envoy subscribes to its assignments a CDS part
	// at a time, and what was sent within the old names is within these
	// without looking (edssent.go).
	names, grewFrom *nameSet
	// returned: the client's state as the cache last set it (its map,
	// marked in place by unsubscriptions), or a first request's
	// initial_resource_versions.
	returned map[string]string
}

func newDeltaSub(subscribed, unsubscribed []string, initial map[string]string) deltaSub {
	// Legacy wildcard mode is active for every type (go-control-plane's
	// default, which the server used).
	s := deltaSub{wildcard: len(subscribed) == 0, allowLegacyWildcard: true, names: emptyNames, returned: initial}
	if s.returned == nil {
		s.returned = make(map[string]string)
	}
	s.update(subscribed, unsubscribed)
	return s
}

// update applies a request's subscriptions, then its unsubscriptions
// (go-control-plane's UpdateResourceSubscriptions).
func (s *deltaSub) update(subscribed, unsubscribed []string) {
	if s.allowLegacyWildcard {
		// Only a subscription ends the legacy wildcard.
		if len(subscribed) == 0 {
			return
		}
		s.allowLegacyWildcard = false
	}
	var add, remove []string
	for _, n := range subscribed {
		if n == explicitWildcard {
			s.wildcard = true
			continue
		}
		add = append(add, n)
	}
	// Whether a name is subscribed as go-control-plane applies the
	// request to its map, one name after the other: the subscriptions,
	// then each unsubscription.
	var added, removed map[string]struct{}
	if len(unsubscribed) > 0 && len(add) > 0 {
		added = make(map[string]struct{}, len(add))
		for _, n := range add {
			added[n] = struct{}{}
		}
	}
	subscribedNow := func(n string) bool {
		if _, ok := removed[n]; ok {
			return false
		}
		_, ok := added[n]
		return ok || s.names.has(n)
	}
	for _, n := range unsubscribed {
		if n == explicitWildcard {
			s.wildcard = false
			continue
		}
		// A name subscribed by name under a wildcard and unsubscribed is
		// answered again (sent, or reported removed): marked with an
		// empty version. Else it is forgotten, so that a subscription
		// again is answered even at the same version.
		if subscribedNow(n) && s.wildcard {
			s.returned[n] = ""
		} else {
			delete(s.returned, n)
		}
		if removed == nil {
			removed = map[string]struct{}{}
		}
		removed[n] = struct{}{}
		remove = append(remove, n)
	}
	old := s.names
	s.names = s.names.derive(add, remove)
	s.grewFrom = old
	for _, n := range remove {
		if old.has(n) {
			s.grewFrom = nil
			break
		}
	}
}

func (s deltaSub) SubscribedResources() map[string]struct{} { return s.names.m }
func (s deltaSub) IsWildcard() bool                         { return s.wildcard }
func (s deltaSub) ReturnedResources() map[string]string     { return s.returned }

// deltaServer serves delta streams (delta.Server).
type deltaServer struct {
	cache       cache.ConfigWatcher
	callbacks   delta.Callbacks
	streamCount int64
	ctx         context.Context
}

var _ delta.Server = (*deltaServer)(nil)

func newDeltaServer(ctx context.Context, c cache.ConfigWatcher, cb delta.Callbacks) *deltaServer {
	return &deltaServer{cache: c, callbacks: cb, ctx: ctx}
}

// deltaWatch is a type's watch on a stream.
type deltaWatch struct {
	cancel func()
	nonce  string
	sub    deltaSub
}

func (w *deltaWatch) Cancel() {
	if w.cancel != nil {
		w.cancel()
	}
}

func (s *deltaServer) processDelta(str stream.DeltaStream, reqCh <-chan *discovery.DeltaDiscoveryRequest, defaultTypeURL string) error {
	ds := &deltaStream{
		s:              s,
		str:            str,
		id:             atomic.AddInt64(&s.streamCount, 1),
		defaultTypeURL: defaultTypeURL,
		watches:        make(map[string]deltaWatch, int(types.UnknownType)),
		// The buffer releases the goroutines that fill it: a response can
		// come from a commit and one from a request, per type.
		responses: make(chan cache.DeltaResponse, int(types.UnknownType)*2),
		node:      &core.Node{},
	}
	if c, ok := s.cache.(*Cache); ok {
		ds.vhds = c.vhdsOpen(str.Context(), ds.responses)
	}

	defer func() {
		for _, w := range ds.watches {
			w.Cancel()
		}
		ds.vhds.close()
		close(ds.responses)
		if s.callbacks != nil {
			s.callbacks.OnDeltaStreamClosed(ds.id, ds.node)
		}
	}()

	if s.callbacks != nil {
		if err := s.callbacks.OnDeltaStreamOpen(str.Context(), ds.id, defaultTypeURL); err != nil {
			return err
		}
	}

	for {
		select {
		case <-s.ctx.Done():
			return nil
		case resp := <-ds.responses:
			if err := ds.process(resp); err != nil {
				return err
			}
		case req, more := <-reqCh:
			if !more {
				return nil
			}
			if req == nil {
				return status.Errorf(codes.Unavailable, "empty request")
			}
			if err := ds.request(req); err != nil {
				return err
			}
		}
	}
}

// deltaStream is one delta stream's state in the server: its watches (one
// per type), the responses the cache queued for it, and the nonce of its
// last response. It is owned by the stream's goroutine (processDelta);
// only the cache writes to responses, from any goroutine.
type deltaStream struct {
	s              *deltaServer
	str            stream.DeltaStream
	id             int64
	defaultTypeURL string
	nonce          int64
	watches        map[string]deltaWatch
	responses      chan cache.DeltaResponse
	node           *core.Node
	vhds           *vhdsStream // nil: the cache serves no VHDS (vhds.go)
}

// send gives resp the stream's next nonce and sends it.
func (ds *deltaStream) send(resp cache.DeltaResponse) (string, error) {
	if resp == nil {
		return "", errors.New("missing response")
	}
	response, err := resp.GetDeltaDiscoveryResponse()
	if err != nil {
		return "", err
	}
	ds.vhds.sending(response)
	ds.nonce++
	response.Nonce = strconv.FormatInt(ds.nonce, 10)
	if cb := ds.s.callbacks; cb != nil {
		cb.OnStreamDeltaResponse(ds.id, resp.GetDeltaRequest(), response)
	}
	return response.GetNonce(), ds.str.Send(response)
}

// process sends resp and installs the state it carries as its type's.
func (ds *deltaStream) process(resp cache.DeltaResponse) error {
	if _, ok := resp.(vhdsWake); ok {
		return ds.vhdsWoken()
	}
	typ := resp.GetDeltaRequest().GetTypeUrl()
	nonce, err := ds.send(resp)
	if err != nil {
		return err
	}
	w := ds.watches[typ]
	w.nonce = nonce
	w.sub.returned = resp.GetNextVersionMap()
	ds.watches[typ] = w
	return nil
}

// processAll sends the responses queued, before a request is handled.
func (ds *deltaStream) processAll() error {
	for {
		select {
		case resp := <-ds.responses:
			if err := ds.process(resp); err != nil {
				return err
			}
		default:
			return nil
		}
	}
}

// request handles one request: the responses queued first, then its
// type's watch replaced by one for the request's subscription.
func (ds *deltaStream) request(req *discovery.DeltaDiscoveryRequest) error {
	s := ds.s
	if err := ds.processAll(); err != nil {
		return err
	}
	if s.callbacks != nil {
		if err := s.callbacks.OnStreamDeltaRequest(ds.id, req); err != nil {
			return err
		}
	}
	// The node may come with the first request only.
	if req.GetNode() != nil {
		ds.node = req.GetNode()
	} else {
		req.Node = ds.node
	}
	if ds.defaultTypeURL == resource.AnyType {
		if req.GetTypeUrl() == "" {
			return status.Errorf(codes.InvalidArgument, "type URL is required for ADS")
		}
	} else if req.GetTypeUrl() == "" {
		req.TypeUrl = ds.defaultTypeURL
	}
	typeURL := req.GetTypeUrl()
	if ds.vhds != nil {
		switch typeURL {
		case VirtualHostType:
			streamAcctOf(ds.str.Context()).leaveResume()
			return ds.vhdsRequest(req)
		case RouteType:
			ds.vhds.toStub(req)
		}
	}

	w, ok := ds.watches[typeURL]
	if !ok {
		// The type's first request: its initial versions are the
		// state; an empty one is a (legacy) wildcard.
		w.sub = newDeltaSub(req.GetResourceNamesSubscribe(), req.GetResourceNamesUnsubscribe(), req.GetInitialResourceVersions())
	} else {
		w.Cancel()
		w.sub.update(req.GetResourceNamesSubscribe(), req.GetResourceNamesUnsubscribe())
	}
	var err error
	w.cancel, err = s.cache.CreateDeltaWatch(req, w.sub, ds.responses)
	// The cache took it: a place in the resume gate goes back
	// (resumegate.go).
	streamAcctOf(ds.str.Context()).leaveResume()
	if err != nil {
		return err
	}
	// The request stays with the watch (and its response) until the next
	// one of its type, and its names were read: an Envoy's first request
	// for 5,000 assignments holds 160 kB of them, and a fleet syncing at
	// once holds one per Envoy until its first part is acknowledged.
	req.ResourceNamesSubscribe, req.ResourceNamesUnsubscribe, req.InitialResourceVersions = nil, nil, nil
	ds.watches[typeURL] = w
	return nil
}

// DeltaStreamHandler serves one delta stream.
func (s *deltaServer) DeltaStreamHandler(str stream.DeltaStream, typeURL string) error {
	reqCh := make(chan *discovery.DeltaDiscoveryRequest)
	go func() {
		defer close(reqCh)
		for {
			req, err := str.Recv()
			if err != nil {
				return
			}
			select {
			case reqCh <- req:
			case <-str.Context().Done():
				return
			case <-s.ctx.Done():
				return
			}
		}
	}()
	return s.processDelta(str, reqCh, typeURL)
}
