package xds

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	clusterservice "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	endpointservice "github.com/envoyproxy/go-control-plane/envoy/service/endpoint/v3"
	listenerservice "github.com/envoyproxy/go-control-plane/envoy/service/listener/v3"
	routeservice "github.com/envoyproxy/go-control-plane/envoy/service/route/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/rest/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"github.com/prometheus/client_golang/prometheus"
	promreg "github.com/xdsbridge/xdsbridge/internal/metrics"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/peer"
)

// Type URLs served.
const (
	ClusterType  = resource.ClusterType
	EndpointType = resource.EndpointType
	ListenerType = resource.ListenerType
	RouteType    = resource.RouteType
)

// Options configure a Server.
type Options struct {
	Logger *slog.Logger
	// Metrics is where the server registers its collectors; nil for none.
	Metrics prometheus.Registerer
	// Creds, when set, are the listener's transport credentials (TLS);
	// nil serves plaintext.
	Creds credentials.TransportCredentials
	// Limits bound what one client can make the server hold or do (zero
	// fields: their defaults; see guard.go for how they are enforced).
	Limits Limits
	// Keepalive is the server's HTTP/2 keepalive (zero fields: defaults).
	Keepalive Keepalive
	// Authorization, when set, allows a stream only if its connection's
	// verified client certificate matches a rule, and limits what it reads
	// (authorize.go); nil: every client is served everything.
	Authorization *Authorization
	// VerifyClient, when set, verifies a client's certificate chain (leaf
	// first, as presented) against the client CA pool current now; each
	// stream open calls it, so a connection whose client's CA was taken out
	// of the pool since its handshake opens no more streams, and is closed
	// (authorize.go, conns.go; certs.Watcher.VerifyClient).
	VerifyClient func(chain []*x509.Certificate) error
	// Services, when set, registers further gRPC services (the bridge's
	// HDS) on the server's gRPC server: the same listener, TLS, keepalive
	// and stream limits, and each call authorized as an xDS stream is
	// (services.go).
	Services func(grpc.ServiceRegistrar)
}

// Server is the xDS gRPC server. Create it with NewServer, start it with Run.
type Server struct {
	cache *Cache
	log   *slog.Logger
	m     *metrics
	creds credentials.TransportCredentials
	lim   Limits
	keep  Keepalive
	guard *guard
	// out is the pool responses are encoded into (nil: bufferPool).
	out mem.BufferPool

	authz   *Authorization
	denied  *prometheus.CounterVec
	denyLog denyLog
	// connsClosed counts, and closeLog rate-limits the lines of, the
	// connections closed after an expired or untrusted refusal (conns.go).
	connsClosed *prometheus.CounterVec
	closeLog    denyLog
	// verifyClient is Options.VerifyClient.
	verifyClient func([]*x509.Certificate) error
	// services is Options.Services.
	services func(grpc.ServiceRegistrar)

	// recentACK holds the change → ACK latencies since the last
	// DrainChangeACK (the status page's chart).
	recentACK recentLatencies

	mu      sync.Mutex
	clients map[streamKey]*clientInfo
	// pushes: the push counter of each mode (sotw, delta) and served
	// type (servedTypes, then "other"), resolved at its first response.
	pushes     [2][len(servedTypes) + 1]prometheus.Counter
	nackTotal  uint64
	nackLogAll logLimiter // every stream's NACK lines
}

type streamKey struct {
	delta bool
	id    int64
}

// clientInfo is what the server follows of one stream (shown as
// ClientStatus).
type clientInfo struct {
	Node     string
	Identity string // the certificate SAN xds.authorization matched
	Cluster  string
	Mode     string
	TypeURL  string
	Peer     string
	Opened   time.Time
	// responses: the count of the stream's responses sent, kept by the
	// server (responded) or, for a delta stream, in the stream handler's
	// state (streamResponses.n); the pointer is set under s.mu.
	responses *atomic.Uint64
	NACKs     uint64
	LastNACK  string

	acct *streamAcct // nil for a stream not opened through Run's server
	// The last NACKed nonce, by type: a NACK repeating it is counted and
	// logged once.
	nackNonces map[string]string
	nackLog    logLimiter
}

// NewServer returns a server for the cache. It starts nothing.
func NewServer(c *Cache, opts Options) *Server {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	s := &Server{cache: c, log: log, clients: map[streamKey]*clientInfo{}, creds: opts.Creds,
		lim: opts.Limits.WithDefaults(), keep: opts.Keepalive.WithDefaults()}
	s.m = newMetrics(c, opts.Metrics)
	s.nackLogAll.perMinute = NACKLogsServerFactor * s.lim.NACKLogsPerMinute
	s.guard = newGuard(s.lim, s.m.guard)
	s.authz, s.verifyClient, s.denied = opts.Authorization, opts.VerifyClient, newDeniedCounter()
	s.connsClosed = newConnsClosedCounter()
	s.services = opts.Services
	if err := promreg.Register(opts.Metrics, s.denied, s.connsClosed); err != nil {
		panic(err)
	}
	s.observeChangeACK(opts.Metrics)
	return s
}

// observeChangeACK exports the change → ACK latencies the cache measures
// (syncstatus.go) as a histogram by type; no per-client labels.
func (s *Server) observeChangeACK(reg prometheus.Registerer) {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "xdsbridge_xds_change_ack_seconds",
		Help:    "Time from the commit of a resource version to a client's ACK of the response carrying it (the newest version a response carried, counted when committed after the client's previous ACK of the type), by type.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
	}, []string{"type"})
	if err := promreg.Register(reg, h); err != nil {
		panic(err)
	}
	// The histogram of each type (servedIndex), resolved at its first
	// sample: the observer is called under the cache's lock, which guards
	// the array.
	var byType [len(servedTypes) + 1]prometheus.Observer
	s.cache.lock()
	s.cache.ackObserver = func(typeURL string, d time.Duration) {
		i := servedIndex(typeURL)
		o := byType[i]
		if o == nil {
			o = h.WithLabelValues(servedType(typeURL))
			byType[i] = o
		}
		o.Observe(d.Seconds())
		s.recentACK.add(d)
	}
	s.cache.unlock()
}

// maxRecentLatencies bounds the latencies kept between two
// DrainChangeACK calls; when full, every other one kept is dropped and
// the stride of those kept doubles, so what is kept stays an even sample.
const maxRecentLatencies = 4096

// recentLatencies collects latencies for one reader that drains them.
type recentLatencies struct {
	mu     sync.Mutex
	ds     []time.Duration
	stride int // keep one sample in stride (0: 1)
	n      int // samples seen since the last one kept
}

func (r *recentLatencies) add(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stride > 1 {
		if r.n++; r.n < r.stride {
			return
		}
		r.n = 0
	}
	if len(r.ds) == maxRecentLatencies {
		k := r.ds[:0]
		for i := 0; i < len(r.ds); i += 2 {
			k = append(k, r.ds[i])
		}
		r.ds, r.stride, r.n = k, max(r.stride, 1)*2, 0
	}
	r.ds = append(r.ds, d)
}

// DrainChangeACK returns the change → ACK latencies (every client and
// type) observed since the previous call, at most maxRecentLatencies of
// them, evenly thinned; nil when none. It is meant for one reader (the
// status page's sampler); safe for concurrent use.
func (s *Server) DrainChangeACK() []time.Duration {
	r := &s.recentACK
	r.mu.Lock()
	defer r.mu.Unlock()
	ds := r.ds
	r.ds, r.stride, r.n = nil, 0, 0
	return ds
}

// Run serves xDS on lis until ctx is done, then closes every stream.
func (s *Server) Run(ctx context.Context, lis net.Listener) error {
	// Each connection's accounting, which holds the connection, to close
	// one whose client certificate no longer holds (conns.go).
	conns := acctListener{lis}
	gs := grpc.NewServer(
		// gRPC's default pool hands a message over 32 KiB a 1 MiB buffer
		// (an Envoy's EDS subscription to 5,000 names is 70 KiB); tiers in
		// powers of two instead, and responses encoded to their size.
		experimental.BufferPool(bufferPool),
		grpc.ForceServerCodecV2(codec{wire: s.cache.store.Wire(), out: s.out}),
		grpc.MaxRecvMsgSize(s.lim.MaxRecvMessageBytes),
		// gRPC's default is 16 MiB of headers per stream, kept with it.
		grpc.MaxHeaderListSize(uint32(s.lim.MaxHeaderBytes)),
		// Fixed HTTP/2 flow-control windows (which turns off gRPC's
		// bandwidth-delay estimate, whose windows grow to 16 MiB): a stream
		// whose requests are paced (requests_per_second) can make the server
		// buffer only its window, 256 KiB, not 16 MiB, unread. Clients send
		// small requests; a 2 MiB subscription takes a few round trips.
		grpc.InitialWindowSize(256<<10),
		grpc.InitialConnWindowSize(1<<20),
		// HTTP/2's SETTINGS_MAX_CONCURRENT_STREAMS is twice the limit: a
		// stream past MaxStreamsPerConnection reaches the guard, which
		// refuses it with an error naming the limit and counts it (at the
		// limit itself, a grpc-go client would wait silently for a free
		// stream, and a client ignoring the setting is reset by gRPC's
		// transport, uncounted). A refused stream ends at once, so the
		// excess costs at most as many short-lived streams again.
		grpc.MaxConcurrentStreams(uint32(2*s.lim.MaxStreamsPerConnection)),
		grpc.ChainStreamInterceptor(s.guard.intercept),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: s.keep.MinTime, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: s.keep.Time, Timeout: s.keep.Timeout}),
		grpc.Creds(s.creds), // nil: plaintext
	)
	xs := newXDSServer(ctx, s.cache, s.callbacks())
	discovery.RegisterAggregatedDiscoveryServiceServer(gs, xs)
	clusterservice.RegisterClusterDiscoveryServiceServer(gs, xs)
	endpointservice.RegisterEndpointDiscoveryServiceServer(gs, xs)
	listenerservice.RegisterListenerDiscoveryServiceServer(gs, xs)
	routeservice.RegisterRouteDiscoveryServiceServer(gs, xs)
	if s.services != nil {
		s.services(authorizing{gs: gs, s: s})
	}

	errc := make(chan error, 1)
	go func() { errc <- gs.Serve(conns) }()
	select {
	case <-ctx.Done():
		gs.Stop()
		<-errc
		return nil
	case err := <-errc:
		if errors.Is(err, grpc.ErrServerStopped) {
			return nil
		}
		return fmt.Errorf("xds server: %w", err)
	}
}

func modeName(delta bool) string {
	if delta {
		return "delta"
	}
	return "sotw"
}

func typeLabel(typeURL string) string {
	if typeURL == "" || typeURL == resource.AnyType {
		return "ads"
	}
	return servedType(typeURL)
}

// servedTypes are the types the server serves; a metric names any other
// "other" (servedType).
var servedTypes = [...]string{ClusterType, EndpointType, ListenerType, RouteType, VirtualHostType}

// servedType is typeURL if it is a type served, else "other": a type URL
// a client sent becomes a metric label or a map key only through it, so
// that no client can add label series (or megabyte labels).
func servedType(typeURL string) string {
	if slices.Contains(servedTypes[:], typeURL) {
		return typeURL
	}
	return "other"
}

func (s *Server) opened(ctx context.Context, delta bool, id int64, typeURL string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var addr string
	if p, _ := peer.FromContext(ctx); p != nil && p.Addr != nil {
		addr = p.Addr.String()
	}
	s.clients[streamKey{delta, id}] = &clientInfo{Mode: modeName(delta), TypeURL: typeLabel(typeURL), Opened: time.Now(), Peer: addr,
		acct: streamAcctOf(ctx), nackLog: logLimiter{perMinute: s.lim.NACKLogsPerMinute}, responses: new(atomic.Uint64)}
	s.m.clients.WithLabelValues(typeLabel(typeURL), modeName(delta)).Inc()
}

func (s *Server) closed(delta bool, id int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := streamKey{delta, id}
	if ci, ok := s.clients[k]; ok {
		s.m.clients.WithLabelValues(ci.TypeURL, ci.Mode).Dec()
		delete(s.clients, k)
	}
}

func (s *Server) responded(delta bool, id int64, typeURL string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ci, ok := s.clients[streamKey{delta, id}]; ok {
		ci.responses.Add(1)
	}
	s.pushCounter(delta, typeURL).Inc()
}

// responseCounters is implemented by the server's callbacks: a delta
// stream's counters, in its own state (deltaStream.counter), are
// registered as it opens, and it counts its responses itself, without the
// server's lock or a lookup of its client per response.
type responseCounters interface {
	countResponses(delta bool, id int64, r *streamResponses) bool
}

// streamResponses counts one stream's responses: its client's count
// (ClientStatus.Responses, read through clientInfo.responses) and the push
// counter of each type, resolved at the type's first response. Written by
// the stream's handler (a delta stream's under its lock); until registered
// (on), it counts nothing.
type streamResponses struct {
	n      atomic.Uint64
	on     bool
	s      *Server
	delta  bool
	pushes [len(servedTypes) + 1]prometheus.Counter
}

func (r *streamResponses) responded(typeURL string) {
	if !r.on {
		return
	}
	r.n.Add(1)
	i := servedIndex(typeURL)
	c := r.pushes[i]
	if c == nil {
		r.s.mu.Lock()
		c = r.s.pushCounter(r.delta, typeURL)
		r.s.mu.Unlock()
		r.pushes[i] = c
	}
	c.Inc()
}

// serverCallbacks are the server's callbacks (Server.callbacks), which
// also give a stream its response counters.
type serverCallbacks struct {
	serverv3.CallbackFuncs
	s *Server
}

// countResponses makes r the response counters of an open stream, before
// it sends any; false: the stream is not open.
func (cb serverCallbacks) countResponses(delta bool, id int64, r *streamResponses) bool {
	s := cb.s
	s.mu.Lock()
	defer s.mu.Unlock()
	ci := s.clients[streamKey{delta, id}]
	if ci == nil {
		return false
	}
	r.on, r.s, r.delta = true, s, delta
	r.n.Store(ci.responses.Load())
	ci.responses = &r.n
	return true
}

// servedIndex is typeURL's index in servedTypes, or len(servedTypes) for
// any other ("other").
func servedIndex(typeURL string) int {
	if i := slices.Index(servedTypes[:], typeURL); i >= 0 {
		return i
	}
	return len(servedTypes)
}

// pushCounter returns the push counter of a mode and type, resolved at
// its first response (by label values: a lookup that hashes them). Under
// s.mu.
func (s *Server) pushCounter(delta bool, typeURL string) prometheus.Counter {
	i := servedIndex(typeURL)
	m := 0
	if delta {
		m = 1
	}
	c := s.pushes[m][i]
	if c == nil {
		c = s.m.pushes.WithLabelValues(servedType(typeURL), modeName(delta))
		s.pushes[m][i] = c
	}
	return c
}

// newXDSServer is the xDS server the cache is served by: our stream
// handlers for sotw (sotwserver.go) and delta (deltaserver.go: shared
// subscription sets), go-control-plane's REST server (unused: REST-JSON
// polling is served by REST). handlers_test.go runs this very
// composition, so that what the handlers' doc comments say holds of the
// handlers served.
func newXDSServer(ctx context.Context, c watcher, cb serverv3.Callbacks) serverv3.Server {
	return serverv3.NewServerAdvanced(rest.NewServer(c, cb), newSotwServer(ctx, c, cb), newDeltaServer(ctx, c, cb))
}

func (s *Server) callbacks() serverv3.Callbacks {
	return serverCallbacks{s: s, CallbackFuncs: serverv3.CallbackFuncs{
		StreamOpenFunc: func(ctx context.Context, id int64, typeURL string) error {
			return s.open(ctx, false, id, typeURL)
		},
		StreamClosedFunc: func(id int64, _ *core.Node) { s.closed(false, id); s.cache.streamClosed(streamKey{false, id}) },
		DeltaStreamOpenFunc: func(ctx context.Context, id int64, typeURL string) error {
			return s.open(ctx, true, id, typeURL)
		},
		DeltaStreamClosedFunc: func(id int64, _ *core.Node) { s.closed(true, id); s.cache.streamClosed(streamKey{true, id}) },
		StreamRequestFunc: func(id int64, req *discovery.DiscoveryRequest) error {
			s.cache.noteRequest(req, streamKey{false, id}, req.GetTypeUrl())
			s.request(false, id, req.GetNode(), req.GetTypeUrl(), req.GetResponseNonce(), req.GetErrorDetail(), req.GetErrorDetail() != nil)
			return nil
		},
		StreamResponseFunc: func(_ context.Context, id int64, req *discovery.DiscoveryRequest, resp *discovery.DiscoveryResponse) {
			s.cache.sotwSent(streamKey{false, id}, resp)
			s.cache.responseSent(streamKey{false, id}, resp.GetTypeUrl(), resp, resp.GetNonce())
			s.responded(false, id, req.GetTypeUrl())
		},
		StreamDeltaRequestFunc: func(id int64, req *discovery.DeltaDiscoveryRequest) error {
			// The delta stream handler tells the cache the stream of its
			// watches itself (Cache.newDeltaWatch).
			s.request(true, id, req.GetNode(), req.GetTypeUrl(), req.GetResponseNonce(), req.GetErrorDetail(), req.GetErrorDetail() != nil)
			return nil
		},
		// No StreamDeltaResponseFunc: the delta stream handler marks the
		// response sent for the cache itself (deltaResponse.sentOut), and
		// counts it (streamResponses).
	}}
}
