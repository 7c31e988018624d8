package xds

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	promreg "github.com/xdsbridge/xdsbridge/internal/metrics"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// REST-JSON polling (the xDS protocol's "REST-JSON polling subscriptions"):
// POST /v3/discovery:clusters, :endpoints, :listeners and :routes, the
// JSON canonical form of DiscoveryRequest and DiscoveryResponse, on a
// listener of its own (config xds.rest).
//
// Stateless: what a client holds is the version_info it sends. A response's
// version_info (and nonce) is a hash of the (name, version) of every
// resource it carries, so it changes exactly when what the request asks
// for changes. A poll whose version_info is the current one is held until
// that changes (answered at once, 200) or MaxWait passes (304 Not Modified,
// no body: what Envoy's REST fetcher takes as "nothing new"). Resource
// names filter what is answered: CDS and LDS with no names (or "*") are
// wildcard; EDS and RDS answer the names asked for only.
//
// A request with error_detail is a NACK: logged and counted as on gRPC
// (xdsbridge_xds_nacks_total{mode="rest"}, Server.NACKs) once per client
// node, type and nonce; the content it rejects (its response_nonce, or
// what would be answered now if it carries none) is not answered again: the
// poll is held as an up-to-date one until the content changes. (Envoy's
// REST subscription sends no error_detail: it keeps its version_info and
// polls again; see README.)
//
// Clusters served over REST can have their eds_config rewritten to a REST
// api_config_source (RESTOptions.EDS): the bridge's clusters name ADS, which
// an Envoy polling over REST does not have.

// Defaults and ranges of RESTOptions.
const (
	DefaultRESTMaxWait      = 10 * time.Second
	MaxRESTMaxWait          = 60 * time.Second
	DefaultRESTMaxBodyBytes = 1 << 20
	MinRESTMaxBodyBytes     = 1 << 10
	MaxRESTMaxBodyBytes     = 64 << 20
	DefaultRESTMaxHeldPolls = 1024
	MaxRESTMaxHeldPolls     = 1 << 20
	// A held poll keeps the names it asks for, packed: their bytes and 4
	// bytes a name. The defaults bound the names of all held polls to
	// about 64 MiB.
	DefaultRESTMaxHeldNames     = 1 << 20
	MaxRESTMaxHeldNames         = 1 << 26
	DefaultRESTMaxHeldNameBytes = 64 << 20
	MinRESTMaxHeldNameBytes     = 1 << 10
	MaxRESTMaxHeldNameBytes     = 4 << 30
)

// RESTOptions configure the REST handler. Zero fields: their defaults.
type RESTOptions struct {
	// MaxWait is how long an up-to-date poll is held before it is
	// answered 304 Not Modified.
	MaxWait time.Duration
	// MaxBodyBytes bounds a request body; a larger one is refused (413).
	MaxBodyBytes int64
	// MaxHeldPolls bounds the polls held at once; an up-to-date poll over
	// it is answered 304 at once instead of being held.
	MaxHeldPolls int
	// MaxHeldNames and MaxHeldNameBytes bound the resource names that
	// the held polls ask for, together (their count, and the sum of
	// their lengths); an up-to-date poll that would go over either is
	// answered 304 at once instead of being held.
	MaxHeldNames     int
	MaxHeldNameBytes int64
	// EDS, when set, is written as the eds_config of each cluster served
	// over REST.
	EDS *RESTEDS
	// Metrics is where the handler registers its collectors; nil for none.
	Metrics prometheus.Registerer
	// VerifyClient, when set (mTLS), verifies the client's certificate
	// chain at every request against the client CA pool current then, as
	// the gRPC server does at every stream open: a keep-alive connection
	// whose certificate expired, or whose CA was taken out of the pool
	// since its handshake, is answered 403 and closed.
	VerifyClient func(chain []*x509.Certificate) error
}

// RESTEDS is the REST api_config_source written into clusters served over
// REST: Envoy polls the cluster named ClusterName for their assignments.
type RESTEDS struct {
	ClusterName    string
	RefreshDelay   time.Duration
	RequestTimeout time.Duration
}

// WithDefaults returns o with every zero field set to its default.
func (o RESTOptions) WithDefaults() RESTOptions {
	if o.MaxWait == 0 {
		o.MaxWait = DefaultRESTMaxWait
	}
	if o.MaxBodyBytes == 0 {
		o.MaxBodyBytes = DefaultRESTMaxBodyBytes
	}
	if o.MaxHeldPolls == 0 {
		o.MaxHeldPolls = DefaultRESTMaxHeldPolls
	}
	if o.MaxHeldNames == 0 {
		o.MaxHeldNames = DefaultRESTMaxHeldNames
	}
	if o.MaxHeldNameBytes == 0 {
		o.MaxHeldNameBytes = DefaultRESTMaxHeldNameBytes
	}
	return o
}

// restPaths maps each REST path to the type it serves.
var restPaths = map[string]string{
	"/v3/discovery:clusters":  ClusterType,
	"/v3/discovery:endpoints": EndpointType,
	"/v3/discovery:listeners": ListenerType,
	"/v3/discovery:routes":    RouteType,
}

// REST serves the cache's resources as REST-JSON polling. Create it with
// NewREST; it is an http.Handler, and Serve runs it on a listener.
type REST struct {
	s     *Server
	store Store // Ready, and Read: a request's resources at one instant
	opts  RESTOptions
	log   *slog.Logger

	edsSource *core.ConfigSource // nil: clusters as they are
	edsHash   uint64             // folded into CDS versions

	held      prometheus.Gauge
	requests  *prometheus.CounterVec
	encodings *prometheus.CounterVec
	// wild is, per type, the last wildcard response encoded.
	wild     map[string]*restEncoded
	refusals *prometheus.CounterVec

	mu        sync.Mutex
	nHeld     int                             // polls held
	heldNames int                             // names they ask for
	heldBytes int64                           // the bytes of those names
	nacked    map[string]string               // node + type → last nonce NACKed
	clusters  map[string]restRewrittenCluster // name → rewritten cluster
}

type restEncoded struct {
	mu      sync.Mutex
	version string
	body    []byte
}

type restRewrittenCluster struct {
	version string
	any     *anypb.Any
}

// NewREST returns the REST handler serving s's cache; NACKs count in s.
func NewREST(s *Server, opts RESTOptions) *REST {
	opts = opts.WithDefaults()
	r := &REST{s: s, store: s.cache.store, opts: opts, log: s.log, nacked: map[string]string{}, clusters: map[string]restRewrittenCluster{},
		held: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "xdsbridge_xds_rest_held_polls", Help: "REST xDS polls held (up to date, waiting for a change or xds.rest.max_wait).",
		}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "xdsbridge_xds_rest_requests_total", Help: "REST xDS requests answered, by type (other: a path not served) and HTTP status code (200 resources, 304 not modified, 4xx refused, 503 not ready).",
		}, []string{"type", "code"}),
		encodings: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "xdsbridge_xds_rest_encodings_total", Help: "REST xDS responses encoded to JSON, by type (a wildcard response is encoded once per version, whatever the number of clients).",
		}, []string{"type"}),
		wild: map[string]*restEncoded{},
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "xdsbridge_xds_rest_limit_refusals_total", Help: "REST xDS requests refused (max_body_bytes: 413) or answered 304 at once instead of held (max_held_polls, max_held_names, max_held_name_bytes), by the xds.rest field.",
		}, []string{"limit"}),
	}
	r.refusals.WithLabelValues("max_body_bytes")
	for _, t := range restPaths {
		r.wild[t] = &restEncoded{}
	}
	for _, l := range []string{"max_held_polls", "max_held_names", "max_held_name_bytes"} {
		r.refusals.WithLabelValues(l)
	}
	if e := opts.EDS; e != nil {
		acs := &core.ApiConfigSource{
			ApiType:             core.ApiConfigSource_REST,
			TransportApiVersion: core.ApiVersion_V3,
			ClusterNames:        []string{e.ClusterName},
			RefreshDelay:        durationpb.New(e.RefreshDelay),
		}
		if e.RequestTimeout > 0 {
			acs.RequestTimeout = durationpb.New(e.RequestTimeout)
		}
		r.edsSource = &core.ConfigSource{
			ResourceApiVersion:    core.ApiVersion_V3,
			ConfigSourceSpecifier: &core.ConfigSource_ApiConfigSource{ApiConfigSource: acs},
		}
		b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(r.edsSource)
		sum := sha256.Sum256(b)
		r.edsHash = binary.BigEndian.Uint64(sum[:8])
	}
	if err := promreg.Register(opts.Metrics, r.held, r.requests, r.refusals, r.encodings); err != nil {
		panic(err)
	}
	return r
}

// Serve serves r on lis (over TLS with tlsConf, if not nil) until ctx is
// done, then closes every connection: a held poll ends unanswered.
func (r *REST) Serve(ctx context.Context, lis net.Listener, tlsConf *tls.Config) error {
	srv := &http.Server{
		Handler:           r,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      r.opts.MaxWait + 15*time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(r.log.Handler(), slog.LevelDebug),
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	if tlsConf != nil {
		lis = tls.NewListener(lis, tlsConf)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }()
	select {
	case <-ctx.Done():
		// Held polls see ctx done and answer 304 at once; wait for
		// them a moment, then close whatever is left.
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = srv.Shutdown(sctx)
		cancel()
		srv.Close()
		<-errc
		return nil
	case err := <-errc:
		return fmt.Errorf("xds rest server: %w", err)
	}
}

// ServeHTTP answers one poll.
func (r *REST) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	typeURL, ok := restPaths[req.URL.Path]
	label := servedType(typeURL)
	fail := func(code int, format string, args ...any) {
		r.requests.WithLabelValues(label, strconv.Itoa(code)).Inc()
		http.Error(w, fmt.Sprintf(format, args...), code)
	}
	if !ok {
		fail(http.StatusNotFound, "xdsbridge: %q is not served: want POST /v3/discovery:clusters, /v3/discovery:endpoints, /v3/discovery:listeners or /v3/discovery:routes", trimForError(req.URL.Path))
		return
	}
	dr, ok := r.decode(w, req, typeURL, fail)
	if !ok {
		return
	}
	if !r.store.Ready() {
		w.Header().Set("Retry-After", "1")
		fail(http.StatusServiceUnavailable, "xdsbridge: not ready (no complete first state yet)")
		return
	}
	names, wild := restInterest(typeURL, dr.GetResourceNames())
	version := dr.GetVersionInfo()
	var rejected string
	if dr.GetErrorDetail() != nil {
		rejected = dr.GetResponseNonce()
		if rejected == "" {
			// No nonce: the content rejected is taken to be what
			// would be answered now.
			v, _, _ := r.state(typeURL, names, wild, false)
			rejected = v
		}
		r.nack(dr, typeURL, rejected)
	}
	// From here on dr is not used: a held poll keeps its packed names,
	// not the decoded request.
	upToDate := func(v string) bool { return v == version || v == rejected }

	v, items, changed := r.state(typeURL, names, wild, true)
	if !upToDate(v) {
		r.answer(w, typeURL, v, items, wild)
		return
	}
	if limit := r.hold(names); limit != "" {
		r.refusals.WithLabelValues(limit).Inc()
		w.Header().Set("X-Xdsbridge-Limit", "xds.rest."+limit)
		r.notModified(w, typeURL)
		return
	}
	defer r.release(names)
	r.wait(w, req, typeURL, names, wild, upToDate, changed)
}

// decode checks a request's client certificate and method and decodes its
// body; on an error it answers (fail) and returns false.
func (r *REST) decode(w http.ResponseWriter, req *http.Request, typeURL string, fail func(code int, format string, args ...any)) (*discovery.DiscoveryRequest, bool) {
	if r.opts.VerifyClient != nil {
		var chain []*x509.Certificate
		if req.TLS != nil {
			chain = req.TLS.PeerCertificates
		}
		if err := r.opts.VerifyClient(chain); err != nil {
			w.Header().Set("Connection", "close")
			fail(http.StatusForbidden, "xdsbridge: the client certificate does not verify against the current client CA pool: %v", err)
			return nil, false
		}
	}
	if req.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		fail(http.StatusMethodNotAllowed, "xdsbridge: %s: want POST with a JSON DiscoveryRequest", req.Method)
		return nil, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, r.opts.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			r.refusals.WithLabelValues("max_body_bytes").Inc()
			fail(http.StatusRequestEntityTooLarge, "xdsbridge: xds.rest.max_body_bytes (%d) reached: the request body is larger", r.opts.MaxBodyBytes)
			return nil, false
		}
		fail(http.StatusBadRequest, "xdsbridge: reading the request: %v", err)
		return nil, false
	}
	dr := &discovery.DiscoveryRequest{}
	// Unknown fields are ignored: a newer client's node carries fields
	// these protos may not know.
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(body, dr); err != nil {
		fail(http.StatusBadRequest, "xdsbridge: the body is not a JSON DiscoveryRequest: %v", err)
		return nil, false
	}
	if t := dr.GetTypeUrl(); t != "" && t != typeURL {
		fail(http.StatusBadRequest, "xdsbridge: type_url %q does not match the path %s (%s)", trimForError(t), req.URL.Path, typeURL)
		return nil, false
	}
	return dr, true
}

// wait holds an up-to-date poll until what it asks for changes (answered
// 200), MaxWait passes or the client goes (304).
func (r *REST) wait(w http.ResponseWriter, req *http.Request, typeURL string, names restNames, wild bool, upToDate func(string) bool, changed <-chan struct{}) {
	timer := time.NewTimer(r.opts.MaxWait)
	defer timer.Stop()
	for {
		select {
		case <-changed:
		case <-timer.C:
			r.notModified(w, typeURL)
			return
		case <-req.Context().Done():
			// The client went away, or the server is stopping: never
			// return without an answer (net/http would send an empty
			// 200, which a client takes for a response and cannot
			// parse). Nothing changed: 304.
			r.notModified(w, typeURL)
			return
		}
		// Every commit wakes every held poll: the version alone first
		// (no copy of 5,000 clusters for a change to one assignment).
		var v string
		if v, _, changed = r.state(typeURL, names, wild, false); upToDate(v) {
			continue
		}
		v, items, ch := r.state(typeURL, names, wild, true)
		changed = ch
		if !upToDate(v) {
			r.answer(w, typeURL, v, items, wild)
			return
		}
	}
}

// hold counts a poll asking for names as held, or returns the limit
// (max_held_polls, max_held_names or max_held_name_bytes) that holding it
// would go over.
func (r *REST) hold(names restNames) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.nHeld >= r.opts.MaxHeldPolls:
		return "max_held_polls"
	case r.heldNames+names.Len() > r.opts.MaxHeldNames:
		return "max_held_names"
	case r.heldBytes+int64(names.Bytes()) > r.opts.MaxHeldNameBytes:
		return "max_held_name_bytes"
	}
	r.nHeld++
	r.heldNames += names.Len()
	r.heldBytes += int64(names.Bytes())
	r.held.Inc()
	return ""
}

// release undoes hold.
func (r *REST) release(names restNames) {
	r.mu.Lock()
	r.nHeld--
	r.heldNames -= names.Len()
	r.heldBytes -= int64(names.Bytes())
	r.mu.Unlock()
	r.held.Dec()
}

func trimForError(s string) string {
	s, _ = bound(s, "", MaxClientStringBytes)
	return s
}

// restInterest is what a request's names ask for: every resource (wild)
// for CDS and LDS with no names or "*", else the names (sorted, unique).
func restInterest(typeURL string, names []string) (restNames, bool) {
	fullState := typeURL == ClusterType || typeURL == ListenerType
	if fullState && (len(names) == 0 || slices.Contains(names, "*")) {
		return restNames{}, true
	}
	sorted := slices.Sorted(slices.Values(names))
	return packNames(slices.Compact(sorted)), false
}

// restNames is a sorted list of names packed in one string: a held poll
// keeps the names' bytes and 4 bytes a name, not a string header and an
// allocation for each.
type restNames struct {
	all  string
	ends []uint32 // ends[i] is where name i ends in all
}

func packNames(names []string) restNames {
	var sb strings.Builder
	n := 0
	for _, s := range names {
		n += len(s)
	}
	sb.Grow(n)
	ends := make([]uint32, len(names))
	for i, s := range names {
		sb.WriteString(s)
		ends[i] = uint32(sb.Len())
	}
	return restNames{all: sb.String(), ends: ends}
}

// Len is the number of names.
func (n restNames) Len() int { return len(n.ends) }

// Bytes is the sum of the names' lengths.
func (n restNames) Bytes() int { return len(n.all) }

// At is name i.
func (n restNames) At(i int) string {
	start := uint32(0)
	if i > 0 {
		start = n.ends[i-1]
	}
	return n.all[start:n.ends[i]]
}
