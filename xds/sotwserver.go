package xds

// The state-of-the-world (sotw) xDS stream handler, for ADS and the
// per-type services alike: adapted from go-control-plane v0.14.0's
// pkg/server/sotw/v3 (server.go, ads.go, xds.go) and the sotw part of
// pkg/server/stream/v3/subscription.go (Copyright Envoyproxy Authors,
// Apache License 2.0), with ordered ADS and legacy wildcards for every
// type, as the project served them. The stream's life is go-control-plane's,
// call for call: OnStreamOpen, then per request OnStreamRequest and, unless
// the request is skipped, the type's watch replaced by a new one (the
// previous one cancelled first, then the responses queued for the stream
// sent, except those of the request's type, which are dropped),
// OnStreamResponse before each response is sent, and OnStreamClosed after
// the watches are cancelled.
//
// The rules the cache relies on (sotw.go), which this file keeps:
//   - The state the cache hands with a response (sotwHeld) becomes the
//     type's once the response is sent, and is handed back with the next
//     watch. For a request that lists names and not "*", every name's
//     entry not among them is deleted; a request that asks for anything
//     new (a name, or the wildcard dropped or taken) makes the state
//     incomplete (sotwSub.set); the state that must survive (what to roll
//     back on a NACK) is kept per name.
//   - A request whose nonce is not the latest response's is skipped while
//     that response is unanswered (once a request is taken, the next is
//     taken whatever its nonce): a NACK the cache sees is of the latest
//     response, or a late duplicate, which then costs a resend, never a
//     lost update.
//   - A watch is cancelled before the next watch of its stream and type is
//     created, and a watch is answered at most once; a queued response of
//     the type a new request is for is dropped (the next watch's state is
//     the right one). The channel holds one response per type, so the
//     cache sends under its lock without blocking.
//   - A request is handled in the goroutine that reads it, under the
//     stream's lock (streamLoop.mu, streamloop.go): the watch cancelled,
//     the queued responses dropped or sent, and the next watch created in
//     one hold of it. A response is taken off the channel under the lock
//     only, and sent before the lock is let go, so the responses leave in
//     the order they were queued and a request's watch is answered after
//     those queued before it.

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync/atomic"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/sotw/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/stream/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
)

// sotwSub is a sotw stream's subscription to one type, and what its
// client holds. The server keeps one per type and hands the cache a copy
// with each watch; held is shared by the copies.
type sotwSub struct {
	// wildcard: the subscription holds the wildcard; allowLegacyWildcard:
	// no name was ever requested, so an empty request is a wildcard.
	wildcard, allowLegacyWildcard bool
	// names: shared by the streams that subscribe to the same names
	// (nameset.go), as sotwNames derived it.
	names *nameSet
	// listed: the names of the request that set names, as it listed them
	// (but "*"): a copy shared by the streams that list the same names in
	// the same order (sharedSet.deriveListed), never written;
	// listedBytes, their size in the request (sotwPartBytes).
	listed      []string
	listedBytes int
	// held: the client's state as its type's last response installed it,
	// less the names a request since no longer lists (unless it lists "*"),
	// and with those a skipped request did not list at no version ("").
	held *sotwHeld
	// skipping: a request was skipped for its stale nonce since the last
	// request taken; kept: the names of the subscription every such
	// request listed (skipped). The next request taken holds the others
	// at no version (set). Kept as the names listed, not those unlisted,
	// so that a skipped request costs what it lists, not the
	// subscription.
	skipping bool
	kept     map[string]struct{}
	// wildDropped: such a request dropped the wildcard the subscription
	// held: every name held may have been dropped, not only those of names.
	wildDropped bool
}

func newSotwSub(names []string) sotwSub {
	s := sotwSub{wildcard: len(names) == 0, allowLegacyWildcard: true,
		names: sotwNames, held: &sotwHeld{}}
	s.set(names)
	return s
}

// set applies the names of a request (go-control-plane's
// SetResourceSubscription): they replace the subscription, and the state
// keeps only their entries, unless the request lists the wildcard. The
// state stays complete only if the request asks for nothing it did not
// (the same wildcard, no name added): a sotw client's ACK lists its names
// again, and the cache then looks only at what changed since the state's
// generation (readSotwState).
func (s *sotwSub) set(names []string) {
	if s.skipping {
		// The client may have dropped the names a skipped request did not
		// list (grpc-go forgets a resource it stops watching, and ignores
		// one a response carries that it does not watch): one listed
		// again is sent again.
		h := s.held
		drop := func(n string) {
			if _, ok := s.kept[n]; ok {
				return
			}
			if _, ok := h.versions.get(n); ok {
				// Held at no version: sent again if it exists, and
				// removed by a full-state response (CDS, LDS) if it
				// does not, as the client may hold it still (it
				// listed it again before the response came).
				h.versions.put(n, "")
				delete(h.marks, n)
				h.complete = false
			}
		}
		switch {
		case s.wildDropped:
			// What the client held through the wildcard, it may have
			// dropped with it: every name held but those kept.
			var held []string
			for n := range h.versions.all() {
				held = append(held, n)
			}
			for _, n := range held {
				drop(n)
			}
		case len(s.kept) < s.names.len():
			for n := range s.names.m {
				drop(n)
			}
		}
		s.skipping, s.kept, s.wildDropped = false, nil, false
	}
	if s.allowLegacyWildcard {
		// Only a request that lists names ends the legacy wildcard.
		if len(names) == 0 {
			return
		}
		s.allowLegacyWildcard = false
	} else if !s.wildcard && slices.Equal(names, s.listed) {
		// An ACK listing the names again, in the same order: the
		// subscription and the state stay as they are. (listed leaves "*"
		// out: a request of the wildcard takes the way below.)
		return
	}
	listing, wildcard := names, slices.Contains(names, explicitWildcard)
	if wildcard {
		listing = slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n == explicitWildcard })
	}
	set, listed := sotwNames.deriveListed(listing)
	subscribed := set.m
	h := s.held
	if wildcard != s.wildcard || !subset(subscribed, s.names.m) {
		h.complete = false
	}
	if !wildcard {
		var gone []string
		for n := range h.versions.all() {
			if _, ok := subscribed[n]; !ok {
				gone = append(gone, n)
			}
		}
		for _, n := range gone {
			h.versions.del(n)
			delete(h.marks, n)
		}
	}
	s.wildcard, s.names, s.listed = wildcard, set, listed
	s.listedBytes = 0
	for _, n := range names {
		s.listedBytes += protowire.SizeTag(sotwResourceNames) + protowire.SizeBytes(len(n))
	}
}

// skipped notes the names of a request skipped for its stale nonce: the
// server does not answer it (the client has not seen the type's last
// response yet, and answers that next), but a name it no longer lists,
// the client may have dropped, so the next request taken holds it at no
// version (set): one listed again is sent again, and a full-state
// response removes one deleted meanwhile.
//
// A request that drops the wildcard (it lists names and no "*") may have
// dropped with it whatever the client held through it: the next request
// taken holds at no version every name held but those every skipped
// request listed (wildDropped).
func (s *sotwSub) skipped(names []string) {
	if (s.allowLegacyWildcard && len(names) == 0) || slices.Contains(names, explicitWildcard) {
		return
	}
	dropsWild := s.wildcard
	if s.names.len() == 0 && !dropsWild {
		return
	}
	kept := make(map[string]struct{}, min(len(names), max(s.names.len(), s.held.versions.len())))
	for _, n := range names {
		if !dropsWild && !s.names.has(n) {
			continue
		}
		if _, ok := s.kept[n]; s.skipping && !ok {
			continue
		}
		kept[n] = struct{}{}
	}
	s.skipping, s.kept = true, kept
	s.wildDropped = s.wildDropped || dropsWild
}

// subset reports whether every name of a is in b.
func subset(a, b map[string]struct{}) bool {
	if len(a) > len(b) {
		return false
	}
	for n := range a {
		if _, ok := b[n]; !ok {
			return false
		}
	}
	return true
}

func (s sotwSub) SubscribedResources() map[string]struct{} { return s.names.m }
func (s sotwSub) IsWildcard() bool                         { return s.wildcard }

// sotwServer serves sotw streams (sotw.Server).
type sotwServer struct {
	cache       sotwWatcher
	callbacks   sotw.Callbacks
	streamCount int64
	ctx         context.Context
}

var _ sotw.Server = (*sotwServer)(nil)

// sotwWatcher is the cache as the sotw stream handler reaches it.
type sotwWatcher interface {
	watchSotw(req *discovery.DiscoveryRequest, sub sotwSub, q sotwQueue) (func(), error)
}

func newSotwServer(ctx context.Context, c sotwWatcher, cb sotw.Callbacks) *sotwServer {
	return &sotwServer{cache: c, callbacks: cb, ctx: ctx}
}

// sotwWatch is a type's watch on a sotw stream: the nonce of its
// response once sent, and its subscription.
type sotwWatch struct {
	cancel func()
	nonce  string
	sub    sotwSub
}

// sotwStream is one sotw stream's state in the server: its watches (one
// per type), the responses the cache queued for it, and the nonce of its
// last response. Its two goroutines (StreamHandler's and its receive
// goroutine, streamloop.go) touch the state, send, and take responses off
// the channel under mu (streamLoop) only; the cache puts responses on it,
// from any goroutine, through queue.
type sotwStream struct {
	streamLoop
	queue          sotwQueue
	s              *sotwServer
	str            stream.Stream
	id             int64
	defaultTypeURL string
	nonce          int64
	watches        map[string]*sotwWatch
	// responses is shared by the stream's types; it holds one response
	// per type (a type's watch is answered at most once, and its queued
	// response is dropped before the next watch), so the cache never
	// blocks on it.
	responses chan *sotwResponse
	node      *core.Node
}

// StreamHandler serves one sotw stream of type typeURL (resource.AnyType
// for ADS), in two goroutines (streamloop.go): its requests are read and
// handled in one (receiveRequests), so an ACK wakes that goroutine alone,
// and the responses the cache queues for it otherwise are sent in this
// one (streamLoop.serve), when the queue wakes it. This one alone returns,
// which ends the stream: when the stream's or the server's context is
// done, when reading a request fails, or when handling one or sending a
// response does (that error).
func (s *sotwServer) StreamHandler(str stream.Stream, typeURL string) error {
	ctx, cancel := streamContext(s.ctx, str.Context())
	defer cancel()
	ss := &sotwStream{
		s:              s,
		str:            str,
		id:             atomic.AddInt64(&s.streamCount, 1),
		defaultTypeURL: typeURL,
		watches:        make(map[string]*sotwWatch, int(types.UnknownType)),
		responses:      make(chan *sotwResponse, int(types.UnknownType)),
		node:           &core.Node{},
	}
	ss.queue = queueOf(&ss.streamLoop, ss.responses)
	defer ss.shutdown()
	if s.callbacks != nil {
		if err := s.callbacks.OnStreamOpen(str.Context(), ss.id, typeURL); err != nil {
			return err
		}
	}
	ended := make(chan error, 1)
	go receiveRequests(&ss.streamLoop, str.Recv, ss.handle, ss.sendAll, ended)
	return ss.serve(ctx.Done(), ended, ss.sendAll)
}

// shutdown closes the stream: from here the receive goroutine handles no
// request, so the state is this goroutine's; the watches are cancelled,
// so nothing more is queued or sent.
func (ss *sotwStream) shutdown() {
	ss.close()
	for _, w := range ss.watches {
		if w.cancel != nil {
			w.cancel()
		}
	}
	close(ss.responses)
	if cb := ss.s.callbacks; cb != nil {
		cb.OnStreamClosed(ss.id, ss.node)
	}
}

// handle handles a request the receive goroutine read (receiveRequests),
// before the responses queued meanwhile are sent (sendAll, through
// streamLoop.sendQueued). Under ss.mu.
func (ss *sotwStream) handle(req *discovery.DiscoveryRequest) error {
	if req == nil {
		return status.Errorf(codes.Unavailable, "empty request")
	}
	return ss.request(req)
}

// sendAll sends the responses queued, after a request is handled and when
// the queue wakes the handler; a send that fails ends the stream
// (Unavailable). Under ss.mu.
func (ss *sotwStream) sendAll() error {
	for {
		select {
		case resp := <-ss.responses:
			if err := ss.send(resp); err != nil {
				return status.Errorf(codes.Unavailable, "%s", err.Error())
			}
		default:
			return nil
		}
	}
}

// request handles one request. A request whose nonce is not that of its
// type's last response is skipped (the client has not seen that response
// yet; its answer follows), but for the names it no longer lists, which
// the next request taken holds at no version (sotwSub.skipped). Otherwise
// the type's watch is cancelled, the responses queued are sent but those
// of its type, which the new watch supersedes, and a new watch is
// created.
func (ss *sotwStream) request(req *discovery.DiscoveryRequest) error {
	// The node may come with the first request only.
	if req.GetNode() != nil {
		ss.node = req.GetNode()
	} else {
		req.Node = ss.node
	}
	switch {
	case ss.defaultTypeURL == resource.AnyType && req.GetTypeUrl() == "":
		return status.Errorf(codes.InvalidArgument, "type URL is required for ADS")
	case req.GetTypeUrl() == "":
		req.TypeUrl = ss.defaultTypeURL
	}
	if cb := ss.s.callbacks; cb != nil {
		if err := cb.OnStreamRequest(ss.id, req); err != nil {
			return err
		}
	}
	typeURL := req.GetTypeUrl()
	w, ok := ss.watches[typeURL]
	if ok {
		if w.nonce != "" && req.GetResponseNonce() != w.nonce {
			w.sub.skipped(req.GetResourceNames())
			return nil
		}
		if w.cancel != nil {
			w.cancel()
		}
		if err := ss.sendAllExcept(typeURL); err != nil {
			return err
		}
		// Until the new watch's response is sent, any request is taken.
		w.nonce = ""
		w.sub.set(req.GetResourceNames())
	} else {
		w = &sotwWatch{sub: newSotwSub(req.GetResourceNames())}
		ss.watches[typeURL] = w
	}
	cancel, err := ss.s.cache.watchSotw(req, w.sub, ss.queue)
	if err != nil {
		return err
	}
	w.cancel = cancel
	return nil
}

// sendAllExcept sends the responses queued, dropping those of typeURL.
// Under ss.mu.
func (ss *sotwStream) sendAllExcept(typeURL string) error {
	for {
		select {
		case resp := <-ss.responses:
			if resp.req.GetTypeUrl() == typeURL {
				continue
			}
			if err := ss.send(resp); err != nil {
				return err
			}
		default:
			return nil
		}
	}
}

// send gives resp the stream's next nonce, installs the state it carries
// as its type's, and sends it.
func (ss *sotwStream) send(resp *sotwResponse) error {
	if resp == nil {
		return errors.New("missing response")
	}
	out := resp.resp
	ss.nonce++
	out.Nonce = strconv.FormatInt(ss.nonce, 10)
	typeURL := resp.req.GetTypeUrl()
	w, ok := ss.watches[typeURL]
	if !ok {
		return errors.New("no current watch for " + typeURL)
	}
	w.sub.held = resp.next
	w.nonce = out.GetNonce()
	if cb := ss.s.callbacks; cb != nil {
		cb.OnStreamResponse(ss.str.Context(), ss.id, resp.req, out)
	}
	return ss.str.Send(out)
}
