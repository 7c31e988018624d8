package xds

// The delta (incremental) xDS stream handler: adapted from go-control-plane
// v0.14.0's pkg/server/delta/v3/server.go, watches.go and
// pkg/server/stream/v3/subscription.go (deltasub.go; Copyright Envoyproxy
// Authors, Apache License 2.0). What differs is the subscription state: the names
// a stream subscribes to are a shared, immutable nameSet (nameset.go)
// instead of a map per stream and type, so a fleet of Envoys subscribed
// to the same assignments holds one set, and the names' strings once. The
// stream's life is go-control-plane's, call for call: OnDeltaStreamOpen,
// then per request OnStreamDeltaRequest (after the responses already
// queued are sent) and a new watch (the previous one cancelled first; an
// ACK re-arms the previous one instead, Cache.rearmDelta, which is the
// same to the cache), OnStreamDeltaResponse before each response is sent
// (the stream counts it itself when the callbacks give it counters:
// streamResponses), and OnDeltaStreamClosed after the watches are cancelled. What differs too is
// the client's state: the cache hands each response with the typed state
// it installs (deltaHeld, delta.go), which becomes the stream's once the
// response is sent, and an unsubscription marks its versions in place as
// go-control-plane marks its returned-resources map. And a request is
// handled in the goroutine that reads it, not handed to the handler's
// (processDelta), so an ACK wakes one goroutine.
//
// The rules the cache relies on, which this file keeps:
//   - A response's nonce is set, and the response sent, before its state
//     is installed (deltaResponse.install), and only a response sent
//     installs its state: a state records the nonce of each response in
//     flight, and a NACK is told from the ACK of another response.
//   - Between responses, the state changes only on unsubscription: an
//     unsubscribed name is forgotten or, if it was subscribed by name
//     under a wildcard, marked "" (deltaSub.update).
//   - A watch is cancelled before the next watch of its stream and type is
//     created, and a watch is answered at most once. The response channel
//     holds two responses per type, so the cache sends under its lock
//     without blocking.
//   - The responses queued on a stream are installed before the watch a
//     new request replaces is cancelled, all in one hold of the stream's
//     lock (deltaStream.mu), as is the creation of the next watch; a
//     response queued after that is installed before any later one: a
//     response is taken off the channel under the lock only, and sent
//     before the lock is let go. A stream's response channel is shared by
//     its types and is its identity.

import (
	"cmp"
	"context"
	"errors"
	"strconv"
	"sync/atomic"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/delta/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/stream/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
)

// deltaWatcher is the cache as the delta stream handler reaches it.
type deltaWatcher interface {
	watchDelta(req *discovery.DeltaDiscoveryRequest, sub deltaSub, q deltaQueue) (func(), error)
}

// deltaServer serves delta streams (delta.Server).
type deltaServer struct {
	cache       deltaWatcher
	callbacks   delta.Callbacks
	streamCount int64
	ctx         context.Context
}

var _ delta.Server = (*deltaServer)(nil)

func newDeltaServer(ctx context.Context, c deltaWatcher, cb delta.Callbacks) *deltaServer {
	return &deltaServer{cache: c, callbacks: cb, ctx: ctx}
}

// deltaWatch is a type's watch on a stream.
type deltaWatch struct {
	cancel func()
	w      *watch // the cache's watch, when the stream is served by a *Cache
	nonce  string
	sub    deltaSub
}

func (w *deltaWatch) Cancel() {
	if w.cancel != nil {
		w.cancel()
	}
}

// processDelta serves a delta stream in two goroutines (streamloop.go):
// its requests are read and handled in one (receiveRequests), and the
// responses the cache and the VHDS pump queue for it are sent in the
// other, the handler's (streamLoop.serve), when the queue wakes it, or,
// a commit's, by the goroutine that committed it (handOff, sendInline). The
// handler's alone returns, which ends the stream: when done is closed,
// when reading a request fails, or when handling one or sending a
// response does (that error).
func (s *deltaServer) processDelta(str stream.DeltaStream, done <-chan struct{}, recv func() (*discovery.DeltaDiscoveryRequest, error), defaultTypeURL string) error {
	ds := &deltaStream{
		s:              s,
		str:            str,
		id:             atomic.AddInt64(&s.streamCount, 1),
		defaultTypeURL: defaultTypeURL,
		// The buffer releases the goroutines that fill it: a response can
		// come from a commit and one from a request, per type.
		responses: make(chan *deltaResponse, int(types.UnknownType)*2),
		node:      &core.Node{},
		acct:      streamAcctOf(str.Context()),
	}
	ds.queue = queueOf(&ds.streamLoop, ds.responses)
	if c, ok := s.cache.(*Cache); ok {
		ds.cache = c
		if sendUncompressed(str.Context()) {
			ds.inline = ds.sendInline
		}
		ds.vhds = c.vhdsOpen(str.Context(), ds.queue)
	}

	defer func() {
		// From here the receive goroutine handles no request: the
		// state is this goroutine's, and nothing is sent.
		ds.close()
		for _, w := range ds.watches.all() {
			w.Cancel()
		}
		ds.vhds.close()
		if ds.cache != nil {
			ds.cache.streamClosed(streamKey{true, ds.id})
		}
		close(ds.responses)
		if s.callbacks != nil {
			s.callbacks.OnDeltaStreamClosed(ds.id, ds.node)
		}
	}()

	if s.callbacks != nil {
		if err := s.callbacks.OnDeltaStreamOpen(str.Context(), ds.id, defaultTypeURL); err != nil {
			return err
		}
		if rc, ok := s.callbacks.(responseCounters); ok {
			rc.countResponses(true, ds.id, &ds.counter)
		}
	}

	ended := make(chan error, 1)
	go receiveRequests(&ds.streamLoop, recv, ds.handle, ds.processAll, ended)
	return ds.serve(done, ended, ds.processAll)
}

// handle handles a request the receive goroutine read (receiveRequests):
// the responses queued first, the request, then (sendQueued) the response
// its watch answered at once (an ACK of a response while changes came).
// Under ds.mu.
func (ds *deltaStream) handle(req *discovery.DeltaDiscoveryRequest) error {
	if req == nil {
		return status.Errorf(codes.Unavailable, "empty request")
	}
	return ds.request(req)
}

// deltaStream is one delta stream's state in the server: its watches (one
// per type), the responses the cache queued for it, and the nonce of its
// last response. Its two goroutines (processDelta's and its receive
// goroutine), and a committing goroutine handing it a response
// (handOff), touch the state, send, and take responses off the channel
// under mu (streamLoop) only; the cache and the VHDS pump put responses
// on it, from any goroutine, through queue.
type deltaStream struct {
	streamLoop
	// queue: responses, woken and drained by streamLoop, as the stream's
	// watches and its VHDS pump put responses.
	queue          deltaQueue
	s              *deltaServer
	str            stream.DeltaStream
	id             int64
	defaultTypeURL string
	nonce          int64
	watches        byType[deltaWatch] // by type URL (bytype.go: an ACK's is the cache's own string)
	responses      chan *deltaResponse
	// head: a response taken off the channel to be sent inline that
	// would have waited (sendInline), sent first by the next processAll.
	head  *deltaResponse
	node  *core.Node
	vhds  *vhdsStream // nil: the cache serves no VHDS (vhds.go)
	cache *Cache      // s.cache, when it is a *Cache (ACKs re-arm its watches)
	acct  *streamAcct // the guard's accounting of the stream (nil: not guarded)
	// counter counts the responses sent, if the callbacks registered it
	// (else they count them, if they do).
	counter streamResponses
	// written: the responses gRPC has not written out yet (encoded by the
	// server's codec; sendInline).
	written writtenPool
}

// send gives resp the stream's next nonce and sends it.
func (ds *deltaStream) send(resp *deltaResponse) (string, error) {
	if resp == nil {
		return "", errors.New("missing response")
	}
	built := resp.resp.Resources
	ds.vhds.sending(resp.resp)
	ds.nonce++
	resp.resp.Nonce = strconv.FormatInt(ds.nonce, 10)
	resp.sentOut.Store(true)
	ds.counter.responded(resp.req.GetTypeUrl())
	if cb := ds.s.callbacks; cb != nil {
		cb.OnStreamDeltaResponse(ds.id, resp.req, resp.resp)
	}
	// The resources' encodings are copied (wiredDelta) unless the
	// resources were replaced (vhdsStream.sending renames the stub in a
	// copy); the watch keeps its last response, not their list (but a
	// small response's encoding, in its room, which gRPC may read after
	// SendMsg returns: at most 1 KiB per stream and type, until the
	// client answers). Sent as a wiredDelta either way, under the
	// unwritten budget (unwritten.go).
	wire := resp.wire
	resp.wire = nil
	if now := resp.resp.Resources; len(now) != len(built) || (len(now) > 0 && &now[0] != &built[0]) {
		wire = nil
	}
	resp.out = wiredDelta{DeltaDiscoveryResponse: resp.resp, wire: wire, room: &resp.room, written: &ds.written}
	err := ds.str.SendMsg(&resp.out)
	resp.out, resp.wires = wiredDelta{}, [1][]byte{}
	return resp.resp.GetNonce(), err
}

// process sends resp and installs the state it carries as its type's;
// the stream ends if its client leaves too many of them unanswered
// (max_unanswered_responses).
func (ds *deltaStream) process(resp *deltaResponse) error {
	if resp == vhdsWakeResponse {
		return ds.vhdsWoken()
	}
	typ := resp.req.GetTypeUrl()
	nonce, err := ds.send(resp)
	if err != nil {
		return err
	}
	w := ds.watches.at(typ)
	w.nonce = nonce
	w.sub.held = resp.install(nonce)
	w.sub.held.dropAnswered(w.sub.answered)
	ds.watches.set(typ, w)
	return ds.acct.unanswered(typ, w.sub.held, w.sub.SubscribedResources())
}

// processAll sends the responses queued, before a request is handled and
// after, and when the queue wakes the handler. Under ds.mu.
func (ds *deltaStream) processAll() error {
	if resp := ds.head; resp != nil {
		ds.head = nil
		if err := ds.process(resp); err != nil {
			return err
		}
	}
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

// sendInline sends the response a commit queued from the committing
// goroutine (streamLoop.inline, handOff), if its send cannot wait, and
// reports whether the channel is left empty. gRPC's SendMsg waits for
// nothing but the stream's write quota (flow control: 64 KiB unwritten
// per stream), which is whole once gRPC has written out every response
// the stream sent (ds.written: its writer gives a response's quota back
// before it puts the response's buffer back; a client's ACK proves
// nothing, as it can name a nonce it never read), and the unwritten
// budget, which counts responses from gRPC's pooling threshold (1 KiB)
// up. So one response goes inline, below that size, to a stream whose
// responses are all written out; anything else is left to the handler
// goroutine. Under ds.mu.
func (ds *deltaStream) sendInline() (bool, error) {
	if ds.head != nil || !ds.written.writtenOut() {
		return false, nil
	}
	select {
	case resp := <-ds.responses:
		if resp == vhdsWakeResponse || !ds.small(resp) {
			ds.head = resp
			return false, nil
		}
		if err := ds.process(resp); err != nil {
			return false, err
		}
		return len(ds.responses) == 0, nil
	default:
		return true, nil
	}
}

// sendUncompressed has the stream's responses sent uncompressed, and
// reports whether they are: only then does gRPC write the codec's buffers
// themselves, and put the sentinel that ends each back once it wrote the
// message (writtenPool). A message gRPC compresses (for a client asking
// for a compressor registered in the process) goes from buffers of
// gRPC's own, and the codec's go back before it is written: such a
// stream would be found written out with its write quota spent. (The
// server sets no RPCCompressor, gRPC's deprecated option that would
// compress regardless.) A stream not served by gRPC (a test's) compresses
// nothing.
func sendUncompressed(ctx context.Context) bool {
	if grpc.ServerTransportStreamFromContext(ctx) == nil {
		return true
	}
	return grpc.SetSendCompressor(ctx, encoding.Identity) == nil
}

// maxNonceSize is the most a nonce adds to a response's encoding: a
// field tag, a length and 19 digits.
const maxNonceSize = 1 + 1 + 19

// small reports whether resp, as send sends it, is encoded within gRPC's
// pooling threshold, which the unwritten budget does not count.
func (ds *deltaStream) small(resp *deltaResponse) bool {
	if ds.vhds != nil && resp.resp.GetTypeUrl() == RouteType {
		return false // vhdsStream.sending may rewrite it
	}
	d := wiredDelta{DeltaDiscoveryResponse: resp.resp, wire: resp.wire}
	n, ok := d.size()
	return ok && mem.IsBelowBufferPoolingThreshold(n+maxNonceSize)
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
			ds.acct.leaveResume()
			return ds.vhdsRequest(req)
		case RouteType:
			ds.vhds.toStub(req)
		}
	}

	resumed := ds.acct.takeResumed(req)
	w, ok := ds.watches.get(typeURL)
	if n := req.GetResponseNonce(); ok && nonceBefore(cmp.Or(w.sub.answered, "0"), n) {
		w.sub.answered = n
	}
	var err error
	switch {
	case !ok:
		// The type's first request: its initial versions are the
		// state; an empty one is a (legacy) wildcard.
		w.sub = newDeltaSub(req.GetResourceNamesSubscribe(), req.GetResourceNamesUnsubscribe(), req.GetInitialResourceVersions(), resumed)
		w.w, w.cancel, err = ds.watch(req, w.sub)
	case w.w != nil && resumed == nil && isACK(req):
		// The watch of the previous request is cancelled and re-armed
		// for this one, in one hold of the cache's lock (Cache.rearmDelta).
		w.sub.update(nil, nil)
		w.w, w.cancel, err = ds.cache.rearmDelta(w.w, req, w.sub)
	default:
		w.Cancel()
		w.sub.update(req.GetResourceNamesSubscribe(), req.GetResourceNamesUnsubscribe())
		w.w, w.cancel, err = ds.watch(req, w.sub)
	}
	// The cache took it: a place in the resume gate goes back
	// (resumegate.go).
	ds.acct.leaveResume()
	if err != nil {
		return err
	}
	// The request stays with the watch (and its response) until the next
	// one of its type, and its names were read: an Envoy's first request
	// for 5,000 assignments holds 160 kB of them, and a fleet syncing at
	// once holds one per Envoy until its first part is acknowledged.
	req.ResourceNamesSubscribe, req.ResourceNamesUnsubscribe, req.InitialResourceVersions = nil, nil, nil
	ds.watches.set(typeURL, w)
	return nil
}

// watch creates the watch of req for sub.
func (ds *deltaStream) watch(req *discovery.DeltaDiscoveryRequest, sub deltaSub) (*watch, func(), error) {
	if ds.cache != nil {
		return ds.cache.newDeltaWatch(streamKey{true, ds.id}, req, sub, ds.queue)
	}
	cancel, err := ds.s.cache.watchDelta(req, sub, ds.queue)
	return nil, cancel, err
}

// isACK reports whether req only answers a response: it names one, and
// carries no error, no subscription or unsubscription and no versions.
// Its subscription is the stream's as it was.
func isACK(req *discovery.DeltaDiscoveryRequest) bool {
	return req.GetResponseNonce() != "" && req.GetErrorDetail() == nil &&
		len(req.GetResourceNamesSubscribe()) == 0 && len(req.GetResourceNamesUnsubscribe()) == 0 &&
		len(req.GetInitialResourceVersions()) == 0
}

// DeltaStreamHandler serves one delta stream.
func (s *deltaServer) DeltaStreamHandler(str stream.DeltaStream, typeURL string) error {
	ctx, cancel := streamContext(s.ctx, str.Context())
	defer cancel()
	return s.processDelta(str, ctx.Done(), str.Recv, typeURL)
}

// streamContext is a stream's context, done also when the server's is:
// the one channel the stream's goroutines wait on besides their own. (The
// server's is every stream's, and each wait on a channel takes its lock.)
func streamContext(server, stream context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(stream)
	stop := context.AfterFunc(server, cancel)
	return ctx, func() { stop(); cancel() }
}
