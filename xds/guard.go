package xds

import (
	"context"
	"fmt"
	"hash/maphash"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// guard enforces Limits on the gRPC server, in front of the stream
// handlers and the cache: the listener gives each connection its accounting
// (acctListener, conns.go), and a stream interceptor counts the streams per connection and
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
	// unwritten: the unwritten budget of responses (unwritten.go).
	unwritten *unwrittenBudget
	// subsHashed: how many of a delta request's subscriptions the
	// accounting's first pass keeps hashed (guardsubs.go).
	subsHashed int
}

type guardMetrics struct {
	refusals      *prometheus.CounterVec
	delayed       prometheus.Counter
	resumesWaited *prometheus.CounterVec
	// unwrittenBytes and responsesWaited: the unwritten budget's bytes
	// in use and waits.
	unwrittenBytes  prometheus.Gauge
	responsesWaited *prometheus.CounterVec
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
	m.unwrittenBytes = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "xdsbridge_xds_unwritten_response_bytes",
		Help: "Bytes of xDS responses encoded and not yet written out to their connection (xds.limits.max_unwritten_response_bytes).",
	})
	m.responsesWaited = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "xdsbridge_xds_responses_waited_total",
		Help: "xDS responses that waited to be encoded for xds.limits.max_unwritten_response_bytes, by outcome: room (sent in turn), expired (in turn, once bytes held unwritten for a second stopped counting) or ended (the stream ended first).",
	}, []string{"outcome"})
	m.responsesWaited.WithLabelValues("room")
	m.responsesWaited.WithLabelValues("expired")
	m.responsesWaited.WithLabelValues("ended")
	for _, l := range []string{"max_streams", "max_streams_per_connection", "max_names_per_stream",
		"max_name_bytes_per_stream", "max_names_per_connection", "max_name_bytes_per_connection",
		"max_name_bytes_total", "max_initial_version_bytes_per_connection", "max_node_bytes", "max_recv_message_bytes",
		"max_unanswered_responses"} {
		m.refusals.WithLabelValues(l)
	}
	return m
}

func newGuard(lim Limits, m *guardMetrics) *guard {
	return &guard{lim: lim, m: m, seed: maphash.MakeSeed(), live: map[*streamAcct]struct{}{},
		resumes: newResumeGate(lim.ResumesDecoding, resumeWait), subsHashed: lim.MaxNamesPerStream + 1,
		unwritten: newUnwrittenBudget(int64(lim.MaxUnwrittenResponseBytes), unwrittenWait, m)}
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
	// conn is the connection itself (acctListener; nil if unknown),
	// closed once its client certificate no longer holds (conns.go);
	// closing is set when that is decided.
	conn    net.Conn
	closing atomic.Bool
}

func newConnAcct() *connAcct { return &connAcct{live: map[*streamAcct]struct{}{}} }

// intercept admits a stream if its connection and the server are under
// their stream limits, and serves it through a guardedStream.
func (g *guard) intercept(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ca := connAcctOf(ss.Context())
	if ca == nil { // not through Run's server: a connection of its own
		ca = newConnAcct()
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

	a := &streamAcct{g: g, conn: ca, ctx: ss.Context(), tokens: float64(g.lim.RequestBurst), last: time.Now()}
	if info != nil {
		a.defType = streamTypeURL(info.FullMethod)
	}
	// The stream's slots and names are released when its context ends (the
	// client closed or reset it, or the handler returned), exactly once:
	// the stream handler can return later than that, and a client
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
			a.charges.end()
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
		// The stream handlers end a stream whose Recv fails, without its error.
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
	// gm: what RecvMsg has gRPC decode into, made anew for each request
	// (one RecvMsg at a time; the codec keeps nothing of it).
	gm guardedMsg
}

func (s *guardedStream) Context() context.Context { return s.ctx }

func (s *guardedStream) RecvMsg(m any) error {
	a := s.a
	if err := a.pace(s.ctx); err != nil {
		return err
	}
	// The codec hands the encoded request to checkWire before decoding it
	// (guardedMsg).
	gm := &s.gm
	*gm = guardedMsg{m: m, a: a}
	defer func() { gm.m = nil }() // not kept until the next request
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
