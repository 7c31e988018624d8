package xds

import (
	"context"
	"fmt"
	"hash/maphash"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
)

// guard enforces Limits on the gRPC server, in front of go-control-plane
// and the cache: a stats.Handler gives each connection its accounting
// (TagConn), and a stream interceptor counts the streams per connection and
// in total and wraps each stream so that every request is paced, then
// checked, encoded, by the codec (guardedMsg, checkWire): its node's size,
// and its subscribed names. A request over a limit is never decoded nor
// handed on: the stream ends with the limit's error, which names the
// config field.
//
// The names are accounted exactly, per stream and type, as a set of 64-bit
// hashes (hash/maphash, random seed) of the names' encoded bytes with each
// name's length, not a second copy of the strings:
//
//   - delta: resource_names_subscribe adds, then resource_names_unsubscribe
//     removes ("*" is a name like any other); initial_resource_versions
//     are not names (see apply): a reconnecting client is counted as a
//     fresh one.
//   - sotw: a request's resource_names replace its type's set.
//
// The rest of each type's last request (nonce, error detail, node...) is
// held by the server until the type's next, and counts in the name bytes.
// Each type a stream names counts as one name, so a client cannot grow the
// per-type maps without bound either.
type guard struct {
	lim  Limits
	m    *guardMetrics
	seed maphash.Seed
	// open counts the streams open over every connection; live holds
	// them.
	open atomic.Int64
	// bytes counts the name bytes of every stream (max_name_bytes_total).
	bytes   atomic.Int64
	mu      sync.Mutex
	live    map[*streamAcct]struct{}
	waiting atomic.Bool // a stream waits for one to end (reserve)
	// resumes: the resume gate (resumegate.go).
	resumes *resumeGate
}

type guardMetrics struct {
	refusals      *prometheus.CounterVec
	delayed       prometheus.Counter
	resumesWaited *prometheus.CounterVec
}

func newGuardMetrics() *guardMetrics {
	m := &guardMetrics{
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "xdsbridge_xds_limit_refusals_total",
			Help: "Streams refused or ended, and requests refused, for going over a limit of xds.limits, by the limit's field name.",
		}, []string{"limit"}),
		delayed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "xdsbridge_xds_requests_delayed_total",
			Help: "xDS requests read late because their stream sent faster than xds.limits.requests_per_second (burst request_burst).",
		}),
		resumesWaited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "xdsbridge_xds_resumes_waited_total",
			Help: "Delta requests with initial_resource_versions that waited to be decoded (xds.limits.resumes_decoding), by outcome: place (decoded in turn) or none (decoded without a place after a second in which the cache took no other).",
		}, []string{"outcome"}),
	}
	m.resumesWaited.WithLabelValues("place")
	m.resumesWaited.WithLabelValues("none")
	for _, l := range []string{"max_streams", "max_streams_per_connection", "max_names_per_stream",
		"max_name_bytes_per_stream", "max_names_per_connection", "max_name_bytes_per_connection",
		"max_name_bytes_total", "max_initial_version_bytes_per_connection", "max_node_bytes", "max_recv_message_bytes"} {
		m.refusals.WithLabelValues(l)
	}
	return m
}

func newGuard(lim Limits, m *guardMetrics) *guard {
	return &guard{lim: lim, m: m, seed: maphash.MakeSeed(), live: map[*streamAcct]struct{}{},
		resumes: newResumeGate(lim.ResumesDecoding, resumeWait)}
}

// limitError is the error of a limit reached: ResourceExhausted (or
// another code) with a message naming the config field, counted under the
// field's name.
func (g *guard) limitError(c codes.Code, field string, limit int, format string, args ...any) error {
	g.m.refusals.WithLabelValues(field).Inc()
	return status.Errorf(c, "xds.limits.%s (%d) reached: %s", field, limit, fmt.Sprintf(format, args...))
}

// connAcct is one connection's accounting.
type connAcct struct {
	streams atomic.Int64
	mu      sync.Mutex
	names   int
	bytes   int
	ivBytes int                      // initial_resource_versions held
	live    map[*streamAcct]struct{} // the streams counted in streams
	waiting atomic.Bool              // a stream waits for one to end (reserve)
	// conn is the connection itself (connStats.TagConn; nil if unknown),
	// closed once its client certificate no longer holds (conns.go);
	// closing is set when that is decided.
	conn    net.Conn
	closing atomic.Bool
}

type connKey struct{}

// TagConn gives the connection its accounting, which every stream of it
// finds in its context.
func (g *guard) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return context.WithValue(ctx, connKey{}, &connAcct{live: map[*streamAcct]struct{}{}})
}

func (g *guard) HandleConn(context.Context, stats.ConnStats)                     {}
func (g *guard) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (g *guard) HandleRPC(context.Context, stats.RPCStats)                       {}

// intercept admits a stream if its connection and the server are under
// their stream limits, and serves it through a guardedStream.
func (g *guard) intercept(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ca, _ := ss.Context().Value(connKey{}).(*connAcct)
	if ca == nil { // not through Run's server: a connection of its own
		ca = &connAcct{live: map[*streamAcct]struct{}{}}
	}
	// A stream whose context ended is released by its AfterFunc, in a
	// goroutine of its own; one at the limit releases them itself, and
	// waits a little for one to end (reserve), so that a client closing a
	// stream and opening another is served.
	if n, ok := reserve(ss.Context(), &ca.streams, g.lim.MaxStreamsPerConnection, ca.sweep, &ca.waiting); !ok {
		return g.limitError(codes.ResourceExhausted, "max_streams_per_connection", g.lim.MaxStreamsPerConnection,
			"this connection has %d xDS streams open; open fewer, or more connections", n)
	}
	if n, ok := reserve(ss.Context(), &g.open, g.lim.MaxStreams, g.sweep, &g.waiting); !ok {
		ca.streams.Add(-1)
		return g.limitError(codes.ResourceExhausted, "max_streams", g.lim.MaxStreams,
			"the server has %d xDS streams open", n)
	}

	a := &streamAcct{g: g, conn: ca, ctx: ss.Context(), types: map[string]*typeNames{}, tokens: float64(g.lim.RequestBurst), last: time.Now()}
	if info != nil {
		a.defType = streamTypeURL(info.FullMethod)
	}
	// The stream's slots and names are released when its context ends (the
	// client closed or reset it, or the handler returned), exactly once:
	// go-control-plane's handler can return later than that, and a client
	// at max_streams_per_connection that closes a stream and opens another
	// must not be refused meanwhile.
	var once sync.Once
	a.end = func() {
		once.Do(func() {
			g.mu.Lock()
			delete(g.live, a)
			g.mu.Unlock()
			ca.mu.Lock()
			delete(ca.live, a)
			ca.mu.Unlock()
			a.release()
			g.open.Add(-1)
			ca.streams.Add(-1)
		})
	}
	g.mu.Lock()
	g.live[a] = struct{}{}
	g.mu.Unlock()
	ca.mu.Lock()
	ca.live[a] = struct{}{}
	ca.mu.Unlock()
	stop := context.AfterFunc(ss.Context(), a.end)
	defer func() {
		stop()
		a.end()
	}()
	gs := &guardedStream{ServerStream: ss, a: a, ctx: context.WithValue(ss.Context(), streamAcctKey{}, a)}
	err := handler(srv, gs)
	if lerr := a.limitErr(); lerr != nil {
		// go-control-plane ends a stream whose Recv fails, without its error.
		return lerr
	}
	return err
}

// reserve takes one of c's max slots. When there is none and no other
// stream is waiting (waiting), it releases the streams whose context ended
// (sweep), and tries again, for up to reserveGrace: a client that resets
// a stream and opens another can have the new stream's headers sent
// before the reset (grpc-go's client does, from another goroutine), and
// must not be refused for it. A client opening many streams over the
// limit has one at a time wait (and sweep); the others are refused at
// once. It returns the count and whether it took a slot.
func reserve(ctx context.Context, c *atomic.Int64, max int, sweep func(), waiting *atomic.Bool) (int64, bool) {
	n := c.Add(1)
	if n <= int64(max) {
		return n, true
	}
	c.Add(-1)
	if !waiting.CompareAndSwap(false, true) {
		return n - 1, false
	}
	defer waiting.Store(false)
	deadline := time.Now().Add(reserveGrace)
	for {
		sweep()
		n := c.Add(1)
		if n <= int64(max) {
			return n, true
		}
		c.Add(-1)
		if time.Now().After(deadline) || ctx.Err() != nil {
			return n - 1, false
		}
		time.Sleep(reserveGrace / 20)
	}
}

// reserveGrace is how long a stream over a stream limit waits for one to
// end before it is refused.
const reserveGrace = 100 * time.Millisecond

// sweepEnded releases the streams of live whose context has ended.
func sweepEnded(mu *sync.Mutex, live map[*streamAcct]struct{}) {
	mu.Lock()
	var ended []*streamAcct
	for a := range live {
		if a.ctx.Err() != nil {
			ended = append(ended, a)
		}
	}
	mu.Unlock()
	for _, a := range ended {
		a.end()
	}
}

func (ca *connAcct) sweep() { sweepEnded(&ca.mu, ca.live) }
func (g *guard) sweep()     { sweepEnded(&g.mu, g.live) }

type streamAcctKey struct{}

// streamAcctOf returns the accounting of the stream whose context ctx is,
// nil if it has none.
func streamAcctOf(ctx context.Context) *streamAcct {
	a, _ := ctx.Value(streamAcctKey{}).(*streamAcct)
	return a
}

// guardedStream is a stream whose requests go through its accounting.
type guardedStream struct {
	grpc.ServerStream
	a   *streamAcct
	ctx context.Context
}

func (s *guardedStream) Context() context.Context { return s.ctx }

func (s *guardedStream) RecvMsg(m any) error {
	a := s.a
	if err := a.pace(s.ctx); err != nil {
		return err
	}
	// The codec hands the encoded request to checkWire before decoding it
	// (guardedMsg).
	gm := &guardedMsg{m: m, a: a}
	if err := s.ServerStream.RecvMsg(gm); err != nil {
		if status.Code(err) == codes.ResourceExhausted {
			// gRPC refused a message over MaxRecvMsgSize, and has already
			// ended the stream with its own message ("grpc: received
			// message larger than max (N vs. M)"): only counted here.
			a.g.m.refusals.WithLabelValues("max_recv_message_bytes").Inc()
		}
		return err
	}
	if !gm.checked {
		return status.Errorf(codes.Internal, "xds: request of type %T not checked", m)
	}
	// A request over a limit is left undecoded; the error ends the stream.
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

// guardedMsg is what a guarded stream asks gRPC to decode into: the codec
// has the stream's accounting check the encoded request before decoding it
// into m (and does not decode it if a limit is reached: an error from the
// codec would reach the client as gRPC's own Internal error).
type guardedMsg struct {
	m       any
	a       *streamAcct
	checked bool
}

// streamAcct is one stream's accounting. pace is called only from the
// stream's receiving goroutine; check too, but it can run after the
// handler returned (go-control-plane's receiving goroutine outlives it),
// so check and release hold mu.
type streamAcct struct {
	g    *guard
	conn *connAcct
	ctx  context.Context // the stream's
	end  func()          // releases the stream, once

	// defType: the type of a stream of one type (DeltaEndpoints, ...),
	// which the server gives a request without a type URL; nil for ADS.
	defType []byte

	mu       sync.Mutex
	types    map[string]*typeNames
	released bool
	err      error // the limit the stream went over
	// resumeHeld: places the stream holds in the resume gate
	// (resumegate.go), given back when it ends.
	resumeHeld int

	// names and bytes are the stream's totals, also in conn's; read by
	// Server.Clients.
	names, bytes atomic.Int64
	// ivBytes are the bytes of the initial_resource_versions held (see
	// apply), in their own per-connection budget, max_name_bytes_total
	// and the memory estimate.
	ivBytes atomic.Int64

	// The token bucket pacing requests.
	tokens float64
	last   time.Time
}

// typeNames is one type's subscribed names (their hashes), their bytes,
// and the bytes of the type's last request that are not names.
type typeNames struct {
	// set: the hashes of the names subscribed (a name's size is its
	// length, read again from an unsubscription); shared between the
	// streams subscribed to the same names (nameset.go).
	set   *hashSet
	bytes int
	other int
	// The bytes of the initial_resource_versions of the type's first
	// request (held for the stream's life: the cache may keep what it
	// answered them with, a removal per name it does not serve, until the
	// client ACKs) and of its last request (held until the next).
	ivFirst, ivLast int
	requests        int
}

// pace takes a token from the stream's bucket, waiting for it if there is
// none: a stream sending faster than RequestsPerSecond is read that fast.
func (a *streamAcct) pace(ctx context.Context) error {
	rps := a.g.lim.RequestsPerSecond
	now := time.Now()
	a.tokens = min(float64(a.g.lim.RequestBurst), a.tokens+now.Sub(a.last).Seconds()*rps)
	a.last = now
	a.tokens--
	if a.tokens >= 0 {
		return nil
	}
	a.g.m.delayed.Inc()
	t := time.NewTimer(time.Duration(-a.tokens / rps * float64(time.Second)))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
}

// checkWire applies one encoded request (b, about to be decoded into m) to
// the accounting, and returns the error of the first limit it goes over,
// which is also the stream's error. It reads the wire format itself, so
// that a request over a limit is never decoded, and allocates nothing but
// map entries.
func (a *streamAcct) checkWire(m any, b []byte) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err != nil {
		return a.err
	}
	if a.released {
		return status.Error(codes.Canceled, "stream ended")
	}
	var delta bool
	switch m.(type) {
	case *discovery.DeltaDiscoveryRequest:
		delta = true
	case *discovery.DiscoveryRequest:
	default:
		return nil
	}
	a.err = a.apply(delta, b)
	return a.err
}

// Field numbers of DeltaDiscoveryRequest and DiscoveryRequest.
const (
	deltaNode, deltaTypeURL, deltaSubscribe, deltaUnsubscribe, deltaInitialVersions protowire.Number = 1, 2, 3, 4, 5
	sotwNode, sotwResourceNames, sotwTypeURL                                        protowire.Number = 2, 3, 4
)

// fields calls fn with each length-delimited field of b, and the bytes it
// takes (tag and length included); false if b is not well formed (the
// decoder then refuses it).
func fields(b []byte, fn func(num protowire.Number, v []byte, size int)) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		if typ != protowire.BytesType {
			m := protowire.ConsumeFieldValue(num, typ, b[n:])
			if m < 0 {
				return false
			}
			b = b[n+m:]
			continue
		}
		v, m := protowire.ConsumeBytes(b[n:])
		if m < 0 {
			return false
		}
		fn(num, v, n+m)
		b = b[n+m:]
	}
	return true
}

func (a *streamAcct) apply(delta bool, b []byte) error {
	lim := a.g.lim
	nodeField, typeField, namesField := sotwNode, sotwTypeURL, sotwResourceNames
	if delta {
		nodeField, typeField, namesField = deltaNode, deltaTypeURL, deltaSubscribe
	}
	// First pass: the type, the node's size, and the bytes that are not
	// names (the server holds a type's last request until its next).
	var typeURL []byte
	nodeBytes, namesBytes, ivBytes := 0, 0, 0
	if !fields(b, func(num protowire.Number, v []byte, size int) {
		switch {
		case num == nodeField:
			nodeBytes += len(v)
		case num == typeField:
			typeURL = v // the last one counts
		case num == namesField || delta && num == deltaUnsubscribe:
			namesBytes += size
		case delta && num == deltaInitialVersions:
			ivBytes += size
		}
	}) {
		return nil
	}
	if len(typeURL) == 0 {
		// The server serves it as the stream's type: its names are that
		// type's, not another type's.
		typeURL = a.defType
	}
	// initial_resource_versions (a reconnecting client's state) are not
	// subscribed names: go-control-plane uses them for the type's first
	// response only. But the cache may keep what it answered them with (a
	// removal for each name it does not serve) until the client ACKs, and
	// a later request's are held with it until the next. So, of a type
	// served, they are held apart (ivBytes): the first request's for the
	// stream's life, the last request's until the next, counted in their
	// own per-connection budget (max_initial_version_bytes_per_connection)
	// and in max_name_bytes_total. A client reconnecting with its state
	// passes the names limits exactly where a fresh one does. Of a type
	// not served, they count as the request's other bytes.
	if servedType(string(typeURL)) == "other" {
		ivBytes = 0
	}
	if nodeBytes > lim.MaxNodeBytes {
		return a.g.limitError(codes.InvalidArgument, "max_node_bytes", lim.MaxNodeBytes, "the request's node is %d bytes encoded", nodeBytes)
	}
	tn := a.types[string(typeURL)] // no allocation
	dn, db := 0, 0
	if tn == nil {
		tn = &typeNames{set: hashSets.empty}
		a.types[string(typeURL)] = tn
		dn = 1
	}
	other := len(b) - namesBytes - ivBytes
	db += other - tn.other
	tn.other = other
	tn.requests++
	var div int
	if tn.requests == 1 {
		div, tn.ivFirst = ivBytes, ivBytes
	} else {
		div, tn.ivLast = ivBytes-tn.ivLast, ivBytes
	}

	if delta {
		// Subscriptions, then unsubscriptions, as go-control-plane applies
		// them; the set is derived once (none for a request without names,
		// the common ACK).
		var adds, rems []uint64
		var added, removed map[uint64]struct{}
		fields(b, func(num protowire.Number, v []byte, _ int) {
			if num != deltaSubscribe {
				return
			}
			h := maphash.Bytes(a.g.seed, v)
			if tn.set.has(h) {
				return
			}
			if added == nil {
				added = map[uint64]struct{}{}
			}
			if _, ok := added[h]; ok {
				return
			}
			added[h] = struct{}{}
			adds = append(adds, h)
			tn.bytes += len(v)
			dn++
			db += len(v)
		})
		fields(b, func(num protowire.Number, v []byte, _ int) {
			if num != deltaUnsubscribe {
				return
			}
			h := maphash.Bytes(a.g.seed, v)
			if _, ok := removed[h]; ok {
				return
			}
			if _, ok := added[h]; !ok && !tn.set.has(h) {
				return
			}
			if removed == nil {
				removed = map[uint64]struct{}{}
			}
			removed[h] = struct{}{}
			rems = append(rems, h)
			tn.bytes -= len(v)
			dn--
			db -= len(v)
		})
		if len(adds)+len(rems) > 0 {
			tn.set = tn.set.derive(adds, rems)
		}
	} else {
		// The list replaces the type's set; unchanged (the common ACK),
		// nothing is rebuilt.
		n, same := 0, true
		fields(b, func(num protowire.Number, v []byte, _ int) {
			if num == sotwResourceNames {
				n++
				if same {
					same = tn.set.has(maphash.Bytes(a.g.seed, v))
				}
			}
		})
		if !same || n != tn.set.len() {
			dn -= tn.set.len()
			db -= tn.bytes
			tn.bytes = 0
			var hs []uint64
			seen := make(map[uint64]struct{}, min(n, lim.MaxNamesPerStream+1))
			fields(b, func(num protowire.Number, v []byte, _ int) {
				if num != sotwResourceNames {
					return
				}
				h := maphash.Bytes(a.g.seed, v)
				if _, ok := seen[h]; ok {
					return
				}
				seen[h] = struct{}{}
				hs = append(hs, h)
				tn.bytes += len(v)
				dn++
				db += len(v)
			})
			tn.set = hashSets.empty.derive(hs, nil)
		}
	}
	if dn == 0 && db == 0 && div == 0 {
		return nil
	}
	a.ivBytes.Add(int64(div))
	names := a.names.Add(int64(dn))
	bytes := a.bytes.Add(int64(db))
	a.conn.mu.Lock()
	a.conn.names += dn
	a.conn.bytes += db
	a.conn.ivBytes += div
	cn, cb, civ := a.conn.names, a.conn.bytes, a.conn.ivBytes
	a.conn.mu.Unlock()
	total := a.g.bytes.Add(int64(db + div))
	if tn.set.len() > lim.MaxNamesPerStream {
		t, _ := bound(string(typeURL), "", MaxClientStringBytes)
		return a.g.limitError(codes.ResourceExhausted, "max_names_per_stream", lim.MaxNamesPerStream,
			"the stream subscribed to %d names of %s", tn.set.len(), t)
	}
	switch {
	case bytes > int64(lim.MaxNameBytesPerStream):
		return a.g.limitError(codes.ResourceExhausted, "max_name_bytes_per_stream", lim.MaxNameBytesPerStream,
			"the stream subscribed to %d bytes of names and requests held", bytes)
	case cn > lim.MaxNamesPerConnection:
		return a.g.limitError(codes.ResourceExhausted, "max_names_per_connection", lim.MaxNamesPerConnection,
			"the connection's streams subscribed to %d names (this stream %d)", cn, names)
	case cb > lim.MaxNameBytesPerConnection:
		return a.g.limitError(codes.ResourceExhausted, "max_name_bytes_per_connection", lim.MaxNameBytesPerConnection,
			"the connection's streams subscribed to %d bytes of names and requests held (this stream %d)", cb, bytes)
	case civ > lim.MaxInitialVersionBytesPerConnection:
		return a.g.limitError(codes.ResourceExhausted, "max_initial_version_bytes_per_connection", lim.MaxInitialVersionBytesPerConnection,
			"the connection's streams sent %d bytes of initial_resource_versions", civ)
	case total > int64(lim.MaxNameBytesTotal):
		return a.g.limitError(codes.ResourceExhausted, "max_name_bytes_total", lim.MaxNameBytesTotal,
			"the server's streams subscribed to %d bytes of names and requests held (this stream %d)", total, bytes)
	}
	return nil
}

// limitErr is the limit the stream went over, if any.
func (a *streamAcct) limitErr() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

// release takes the stream's names off its connection's accounting (once:
// later calls find nothing to take off), and returns the limit the stream
// went over, if any.
func (a *streamAcct) release() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.released = true
	for ; a.resumeHeld > 0; a.resumeHeld-- {
		a.g.resumes.leave()
	}
	n, b, iv := a.names.Swap(0), a.bytes.Swap(0), a.ivBytes.Swap(0)
	a.conn.mu.Lock()
	a.conn.names -= int(n)
	a.conn.bytes -= int(b)
	a.conn.ivBytes -= int(iv)
	a.conn.mu.Unlock()
	a.g.bytes.Add(-b - iv)
	a.types = nil
	return a.err
}

// The per-client memory estimate (memory_estimate_bytes in /debug/clients)
// of a stream is
//
//	PerStreamOverheadBytes + NameBytesFactor × name bytes + PerNameOverheadBytes × names
//
// with the names and their bytes as the limits count them. The constants
// are measured by TestMeasurePerNameOverhead (XDSBRIDGE_ABUSE_MEASURE=1, a
// server in a child process): its live heap plus goroutine stacks after
// two GCs, with 16 delta streams each subscribed to 20,000 made-up 16-byte
// names, then to 1,900 made-up 1,000-byte names, minus the same before;
// and with 1,000 streams subscribed to nothing. Measured (go 1.26,
// go-control-plane 0.14): 106 bytes per 16-byte name, 2,121 per 1,000-byte
// name, i.e. 2.05 × the name's bytes + 74; 23,150 bytes per stream (22,500
// before the guard tracked live streams for max_streams, on the same machine).
//
// The names are held twice: the request's strings (the delta server's
// subscription set and the cache's noted request share them) and the
// cache's record of the response that answered them. The rest per name is
// the subscription set's map entry, the request's string header and the
// guard's hash set entry. (Made-up names are the stream's own: the shared
// sets of nameset.go save nothing on them, and the estimate counts no
// sharing.)
const (
	PerStreamOverheadBytes = 23 << 10
	NameBytesFactor        = 2
	PerNameOverheadBytes   = 75
)

// memoryEstimate is the stream's estimated cost in bytes.
func (a *streamAcct) memoryEstimate() int64 {
	return PerStreamOverheadBytes + NameBytesFactor*(a.bytes.Load()+a.ivBytes.Load()) + a.names.Load()*PerNameOverheadBytes
}

// streamTypeURL is the type the server gives the requests without a type
// URL of a stream of one type (go-control-plane's handlers of
// DeltaEndpoints, StreamClusters, ...), by its gRPC method; nil for ADS.
func streamTypeURL(method string) []byte {
	svc, _, _ := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	switch svc {
	case "envoy.service.cluster.v3.ClusterDiscoveryService":
		return []byte(ClusterType)
	case "envoy.service.endpoint.v3.EndpointDiscoveryService":
		return []byte(EndpointType)
	case "envoy.service.listener.v3.ListenerDiscoveryService":
		return []byte(ListenerType)
	case "envoy.service.route.v3.RouteDiscoveryService":
		return []byte(RouteType)
	}
	return nil
}
