package xds

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// guard enforces Limits on the gRPC server, in front of go-control-plane
// and the cache: a stats.Handler gives each connection its accounting
// (TagConn), and a stream interceptor counts the streams per connection and
// in total and wraps each stream so that every request is paced, its node
// size checked and its subscribed names accounted before go-control-plane
// sees it. A request over a limit is never handed on: the stream ends with
// the limit's error, which names the config field.
//
// The names are accounted exactly, per stream and type, as a set of 64-bit
// hashes (hash/maphash, random seed) with each name's length, not a second
// copy of the strings: ~20 bytes of map entry per name against the name's
// own bytes held twice (see PerNameOverheadBytes).
//
//   - delta: resource_names_subscribe adds, resource_names_unsubscribe
//     removes ("*" is a name like any other); initial_resource_versions adds
//     its names, each costing its name and version bytes.
//   - sotw: a request's resource_names replace its type's set.
//
// The type URL of each type a stream names counts as one name of its
// length, so a client cannot grow the per-type maps without bound either.
type guard struct {
	lim  Limits
	m    *guardMetrics
	seed maphash.Seed
	// open counts the streams open over every connection.
	open atomic.Int64
}

type guardMetrics struct {
	refusals *prometheus.CounterVec
	delayed  prometheus.Counter
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
	}
	for _, l := range []string{"max_streams", "max_streams_per_connection", "max_names_per_stream",
		"max_name_bytes_per_stream", "max_names_per_connection", "max_name_bytes_per_connection",
		"max_node_bytes", "max_recv_message_bytes"} {
		m.refusals.WithLabelValues(l)
	}
	return m
}

func newGuard(lim Limits, m *guardMetrics) *guard {
	return &guard{lim: lim, m: m, seed: maphash.MakeSeed()}
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
}

type connKey struct{}

// TagConn gives the connection its accounting, which every stream of it
// finds in its context.
func (g *guard) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return context.WithValue(ctx, connKey{}, &connAcct{})
}

func (g *guard) HandleConn(context.Context, stats.ConnStats)                     {}
func (g *guard) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (g *guard) HandleRPC(context.Context, stats.RPCStats)                       {}

// intercept admits a stream if its connection and the server are under
// their stream limits, and serves it through a guardedStream.
func (g *guard) intercept(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ca, _ := ss.Context().Value(connKey{}).(*connAcct)
	if ca == nil { // not through Run's server: a connection of its own
		ca = &connAcct{}
	}
	if n := ca.streams.Add(1); n > int64(g.lim.MaxStreamsPerConnection) {
		ca.streams.Add(-1)
		return g.limitError(codes.ResourceExhausted, "max_streams_per_connection", g.lim.MaxStreamsPerConnection,
			"this connection has %d xDS streams open; open fewer, or more connections", n-1)
	}
	defer ca.streams.Add(-1)
	if n := g.open.Add(1); n > int64(g.lim.MaxStreams) {
		g.open.Add(-1)
		return g.limitError(codes.ResourceExhausted, "max_streams", g.lim.MaxStreams,
			"the server has %d xDS streams open", n-1)
	}
	defer g.open.Add(-1)

	a := &streamAcct{g: g, conn: ca, types: map[string]*typeNames{}, tokens: float64(g.lim.RequestBurst), last: time.Now()}
	gs := &guardedStream{ServerStream: ss, a: a, ctx: context.WithValue(ss.Context(), streamAcctKey{}, a)}
	err := handler(srv, gs)
	if lerr := a.release(); lerr != nil {
		// go-control-plane ends a stream whose Recv fails, without its error.
		return lerr
	}
	return err
}

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
	if err := s.ServerStream.RecvMsg(m); err != nil {
		if status.Code(err) == codes.ResourceExhausted {
			// gRPC refused a message over MaxRecvMsgSize, and has already
			// ended the stream with its own message ("grpc: received
			// message larger than max (N vs. M)"): only counted here.
			a.g.m.refusals.WithLabelValues("max_recv_message_bytes").Inc()
		}
		return err
	}
	return a.check(m)
}

// streamAcct is one stream's accounting. pace is called only from the
// stream's receiving goroutine; check too, but it can run after the
// handler returned (go-control-plane's receiving goroutine outlives it),
// so check and release hold mu.
type streamAcct struct {
	g    *guard
	conn *connAcct

	mu       sync.Mutex
	types    map[string]*typeNames
	released bool
	err      error // the limit the stream went over

	// names and bytes are the stream's totals, also in conn's; read by
	// Server.Clients.
	names, bytes atomic.Int64

	// The token bucket pacing requests.
	tokens float64
	last   time.Time
}

// typeNames is one type's subscribed names: hash → bytes.
type typeNames struct {
	set   map[uint64]uint32
	bytes int
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

// check applies one request to the accounting, and returns the error of
// the first limit it goes over, which is also the stream's error.
func (a *streamAcct) check(m any) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err != nil {
		return a.err
	}
	if a.released {
		return status.Error(codes.Canceled, "stream ended")
	}
	a.err = a.apply(m)
	return a.err
}

func (a *streamAcct) apply(m any) error {
	lim := a.g.lim
	var node *core.Node
	var typeURL string
	switch r := m.(type) {
	case *discovery.DeltaDiscoveryRequest:
		node, typeURL = r.GetNode(), r.GetTypeUrl()
	case *discovery.DiscoveryRequest:
		node, typeURL = r.GetNode(), r.GetTypeUrl()
	default:
		return nil
	}
	if node != nil {
		if n := proto.Size(node); n > lim.MaxNodeBytes {
			return a.g.limitError(codes.InvalidArgument, "max_node_bytes", lim.MaxNodeBytes, "the request's node is %d bytes encoded", n)
		}
	}
	tn := a.types[typeURL]
	dn, db := 0, 0
	if tn == nil {
		tn = &typeNames{set: map[uint64]uint32{}}
		a.types[typeURL] = tn
		dn, db = 1, len(typeURL)
	}
	add := func(name string, size int) {
		h := maphash.String(a.g.seed, name)
		if _, ok := tn.set[h]; ok {
			return
		}
		tn.set[h] = uint32(size)
		tn.bytes += size
		dn++
		db += size
	}
	switch r := m.(type) {
	case *discovery.DeltaDiscoveryRequest:
		for n, v := range r.GetInitialResourceVersions() {
			add(n, len(n)+len(v))
		}
		for _, n := range r.GetResourceNamesSubscribe() {
			add(n, len(n))
		}
		for _, n := range r.GetResourceNamesUnsubscribe() {
			h := maphash.String(a.g.seed, n)
			if size, ok := tn.set[h]; ok {
				delete(tn.set, h)
				tn.bytes -= int(size)
				dn--
				db -= int(size)
			}
		}
	case *discovery.DiscoveryRequest:
		// The list replaces the type's set; unchanged (the common ACK),
		// nothing is rebuilt.
		names := r.GetResourceNames()
		same := len(names) == len(tn.set)
		for _, n := range names {
			if !same {
				break
			}
			_, same = tn.set[maphash.String(a.g.seed, n)]
		}
		if !same {
			dn -= len(tn.set)
			db -= tn.bytes
			tn.set = make(map[uint64]uint32, len(names))
			tn.bytes = 0
			for _, n := range names {
				add(n, len(n))
			}
		}
	}
	if dn == 0 && db == 0 {
		return nil
	}
	names := a.names.Add(int64(dn))
	bytes := a.bytes.Add(int64(db))
	a.conn.mu.Lock()
	a.conn.names += dn
	a.conn.bytes += db
	cn, cb := a.conn.names, a.conn.bytes
	a.conn.mu.Unlock()
	switch {
	case len(tn.set) > lim.MaxNamesPerStream:
		return a.g.limitError(codes.ResourceExhausted, "max_names_per_stream", lim.MaxNamesPerStream,
			"the stream subscribed to %d names of %s", len(tn.set), typeURL)
	case bytes > int64(lim.MaxNameBytesPerStream):
		return a.g.limitError(codes.ResourceExhausted, "max_name_bytes_per_stream", lim.MaxNameBytesPerStream,
			"the stream subscribed to %d bytes of names", bytes)
	case cn > lim.MaxNamesPerConnection:
		return a.g.limitError(codes.ResourceExhausted, "max_names_per_connection", lim.MaxNamesPerConnection,
			"the connection's streams subscribed to %d names (this stream %d)", cn, names)
	case cb > lim.MaxNameBytesPerConnection:
		return a.g.limitError(codes.ResourceExhausted, "max_name_bytes_per_connection", lim.MaxNameBytesPerConnection,
			"the connection's streams subscribed to %d bytes of names (this stream %d)", cb, bytes)
	}
	return nil
}

// release takes the stream's names off its connection's accounting, and
// returns the limit the stream went over, if any.
func (a *streamAcct) release() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.released = true
	n, b := a.names.Swap(0), a.bytes.Swap(0)
	a.conn.mu.Lock()
	a.conn.names -= int(n)
	a.conn.bytes -= int(b)
	a.conn.mu.Unlock()
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
// name, i.e. 2.05 × the name's bytes + 74; 21,262 bytes per stream.
//
// The names are held twice: the request's strings (go-control-plane's
// subscription and the cache's noted request share them) and the cache's
// record of the response that answered them. The rest per name is
// go-control-plane's subscription map entry, the request's string header
// and the guard's hash entry.
const (
	PerStreamOverheadBytes = 21 << 10
	NameBytesFactor        = 2
	PerNameOverheadBytes   = 75
)

// memoryEstimate is the stream's estimated cost in bytes.
func (a *streamAcct) memoryEstimate() int64 {
	return PerStreamOverheadBytes + NameBytesFactor*a.bytes.Load() + a.names.Load()*PerNameOverheadBytes
}
