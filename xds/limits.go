package xds

import (
	"fmt"
	"runtime"
	"time"
)

// Limits bound what one xDS client can make the server hold or do, so that
// no client (a bug, or an attacker that can reach the port) exhausts the
// bridge. A zero field means its default. The JSON names are the config
// file's (`xds.limits:` block). Every refusal is counted in
// xdsbridge_xds_limit_refusals_total{limit} under the field's JSON name,
// and its error names the field ("xds.limits.max_streams_per_connection
// (16) reached: ..."), but for max_recv_message_bytes, refused by gRPC with
// its own message, and max_header_bytes, enforced by gRPC's transport
// (see there). Enforced by guard.go, in front of the stream handlers.
type Limits struct {
	// MaxStreams bounds the xDS streams open at once, over every
	// connection. A stream over it is refused (ResourceExhausted).
	// Default 65,536. A stream counts (here and in
	// max_streams_per_connection) until its context ends: the client
	// closes or resets it, or the server ends it. A stream over either
	// limit first waits up to 100 ms for one to end (one at a time per
	// connection; the others are refused at once), so a client that
	// resets a stream and opens another at the limit is served.
	MaxStreams int `json:"max_streams"`
	// MaxStreamsPerConnection bounds the streams open at once on one
	// connection (Envoy's ADS and grpc-go use one per server; Envoy
	// without ADS one per type; cmd/xdsload 16). A stream over it is
	// refused (ResourceExhausted). Default 16: with max_recv_message_bytes
	// it bounds what one connection can make the server hold for a moment
	// (see there). The server's HTTP/2
	// SETTINGS_MAX_CONCURRENT_STREAMS is twice this, so that streams past
	// it are refused with that error and counted; past twice, gRPC's
	// transport resets them (REFUSED_STREAM), uncounted.
	MaxStreamsPerConnection int `json:"max_streams_per_connection"`
	// MaxNamesPerStream bounds the resource names a stream subscribes to,
	// per type. A request that takes a stream over it ends the stream
	// (ResourceExhausted). Default 50,000 (an Envoy with 5,000 clusters
	// subscribes to 5,000 assignments). Names are counted exactly: delta
	// subscribes and unsubscribes ("*" is a name); a sotw request's list
	// replaces its type's. A delta client's initial_resource_versions (its
	// state, sent when it reconnects) are not names, so that it is served
	// wherever a fresh client is: the delta handler uses them for the
	// type's first response only. They count in their own budget,
	// max_initial_version_bytes_per_connection, and in
	// max_name_bytes_total (of a type not served, in the request's other
	// bytes below).
	MaxNamesPerStream int `json:"max_names_per_stream"`
	// MaxNameBytesPerStream bounds the bytes of those names, per stream
	// (every type), plus the other bytes of each type's last request
	// (nonce, version, error detail, node...), which the server holds until
	// the type's next. Each type a stream names also counts as one name.
	// Default 2 MiB.
	MaxNameBytesPerStream int `json:"max_name_bytes_per_stream"`
	// MaxNamesPerConnection and MaxNameBytesPerConnection bound the same
	// over every stream of one connection. Defaults 100,000 and 4 MiB. A
	// stream's names are released when it ends. What the names cost is
	// shown per stream in /debug/clients (memory_estimate_bytes): at the
	// defaults a connection can keep ~11 MB of them (measured).
	MaxNamesPerConnection     int `json:"max_names_per_connection"`
	MaxNameBytesPerConnection int `json:"max_name_bytes_per_connection"`
	// MaxNameBytesTotal bounds the same bytes over every connection: the
	// stream whose request takes the server over it ends
	// (ResourceExhausted), and is counted. Released as the per-connection
	// ones, when a stream ends. Default 1 GiB (over 2 GiB of heap by
	// memory_estimate_bytes' measure; an Envoy subscribed to 5,000
	// clusters and their assignments, 12-byte names, holds 60 KB).
	MaxNameBytesTotal int `json:"max_name_bytes_total"`
	// MaxInitialVersionBytesPerConnection bounds the bytes of the
	// initial_resource_versions (a delta client's state, sent when it
	// reconnects) the server holds for one connection's streams: a type's
	// first request's for the stream's life (the cache may keep a removal
	// for each name in them it does not serve until the client ACKs), a
	// later request's until the next. Over it, the stream ends
	// (ResourceExhausted). They are not names, so a reconnecting client
	// passes the names limits wherever a fresh one does; this budget is
	// what keeps a client from making the server hold made-up versions
	// without bound. Default 16 MiB (an Envoy reconnecting with 16,000
	// clusters and their assignments sends ~4 MB).
	MaxInitialVersionBytesPerConnection int `json:"max_initial_version_bytes_per_connection"`
	// MaxNodeBytes bounds the encoded size of a request's node (id,
	// cluster, metadata, extensions...). A request over it ends the
	// stream (InvalidArgument). Envoy 1.40.0's node is 61,097 bytes with
	// no metadata of its own (it lists its 516 extensions), and Envoy
	// sends it on every request unless set_node_on_first_message_only.
	// Default 256 KiB.
	MaxNodeBytes int `json:"max_node_bytes"`
	// MaxRecvMessageBytes bounds one request message; gRPC refuses a
	// larger one (ResourceExhausted) from its header, before reading it.
	// Default 4 MiB (gRPC's own default). A request is checked against the
	// other limits once received, before it is decoded, so a connection
	// can make the server hold ~2 × this per stream for a moment (gRPC's
	// frames and their contiguous copy): with 64 streams per connection,
	// each sending a 3.9 MB request, that was ~0.3 GB of RSS at the peak
	// (~0.1 GB at 1 MiB; TestMeasureAbuse); the default of 16 streams cuts
	// it to a quarter. Requests are small (an Envoy's EDS subscription to
	// 5,000 names is 70 KiB): 1 MiB is ample where that peak matters.
	MaxRecvMessageBytes int `json:"max_recv_message_bytes"`
	// MaxHeaderBytes bounds a stream's request headers (gRPC metadata),
	// as HTTP/2 counts them (each field's name and value plus 32 bytes),
	// after HPACK decoding: gRPC's own default is 16 MiB per stream, kept
	// for the stream's life, and HPACK lets one or two bytes on the wire
	// repeat a header of up to 4 KB already sent (119 KB sent made the
	// server hold 195 MB over 16 streams). The server advertises it in
	// SETTINGS_MAX_HEADER_LIST_SIZE: a grpc-go client refuses to send more
	// (Internal, "header list size to send violates the maximum size");
	// a client sending more anyway has the stream reset by gRPC's
	// transport (RST_STREAM FRAME_SIZE_ERROR) before the server sees it,
	// uncounted; a header block going on in CONTINUATION frames past it,
	// or a single header field longer than it, closes the connection
	// (GOAWAY), uncounted too. grpc-go and Envoy send a few
	// hundred bytes (method, path, authority, content type, user agent),
	// plus the call credentials or initial_metadata configured (a bearer
	// token: 1-2 KB). Default 16 KiB.
	MaxHeaderBytes int `json:"max_header_bytes"`
	// RequestsPerSecond and RequestBurst pace each stream's requests (a
	// token bucket): a client that sends faster is read slower, not
	// refused (the wait is before the read: gRPC buffers at most the
	// stream's 256 KiB flow-control window meanwhile). Each request read
	// late is counted in xdsbridge_xds_requests_delayed_total. Defaults
	// 100 and 1,000.
	RequestsPerSecond float64 `json:"requests_per_second"`
	RequestBurst      int     `json:"request_burst"`
	// NACKLogsPerMinute bounds the NACKs logged per stream per minute; the
	// rest are counted (xdsbridge_xds_nack_logs_suppressed_total{reason=
	// "rate"}), and the next line logged says how many were not
	// (nacks_not_logged). Over every stream, NACKLogsServerFactor (10) ×
	// this are logged per minute, so that a client opening stream after
	// stream does not get a fresh allowance each time; the rest are
	// counted (reason="server_rate") and the next line logged says how
	// many were not (nacks_not_logged_server_wide). A NACK repeating the
	// nonce its stream last NACKed for the type is counted and logged once
	// (reason="repeated"). A logged NACK's message is cut to
	// MaxNACKMessageBytes, its type URL and nonce to MaxClientStringBytes;
	// in xdsbridge_xds_nacks_total, a type not served is "other". Default
	// 6.
	NACKLogsPerMinute int `json:"nack_logs_per_minute"`
	// ResumesDecoding bounds the delta requests carrying
	// initial_resource_versions (a reconnecting Envoy's versions of what it
	// holds: ~430 kB decoded for 5,000 names) that are decoded and not yet
	// taken by the cache (resumegate.go). Past it a request waits to be
	// decoded (gRPC holds its bytes meanwhile), as long as the cache takes
	// others; after a second in which it took none (clients that stopped
	// reading hold the places), it is decoded anyway. Waits are counted in
	// xdsbridge_xds_resumes_waited_total{outcome}: "place" (got one),
	// "none" (decoded without). Default 4 × the cores: in a reconnect storm
	// of 1,000 Envoys every stream decoded at once, 700 MB of maps live
	// together.
	ResumesDecoding int `json:"resumes_decoding"`
	// MaxUnwrittenResponseBytes bounds the bytes of responses (delta and
	// sotw) encoded and not yet written out to their connection, over
	// every stream (unwritten.go). gRPC encodes a response whole and holds
	// it until its connection's writer copies it out; in a first sync of
	// 2,000 clients, a 32 KiB part per stream waited so, 100 MB of
	// encodings. Past it a response waits before it is encoded, in turn;
	// a response larger than this goes alone. A response's bytes count for
	// a second at most: those of one its client does not read stop
	// counting then, so such clients delay others by a second, never stop
	// them. Waits are counted in
	// xdsbridge_xds_responses_waited_total{outcome} ("room"; "expired":
	// once bytes held a second stopped counting; "ended": the stream
	// ended first), the bytes in xdsbridge_xds_unwritten_response_bytes.
	// Responses under 1 KiB (gRPC's pooling threshold) are not counted.
	// Default 16 MiB.
	MaxUnwrittenResponseBytes int `json:"max_unwritten_response_bytes"`
	// MaxUnansweredResponses bounds the delta responses of one type that
	// a stream has sent and its client not yet answered (ACK or NACK: an
	// answer to a response answers those sent before it). The server keeps
	// what each carried until it is answered, to send it again on a NACK,
	// and each response's record copies that list. A response is sent
	// only for a request of its type (a watch is answered once; the next
	// part of a split first sync is sent for the ACK of the previous one),
	// so the list grows only with requests that answer nothing
	// (subscription changes) while responses are on their way. The names
	// the stream subscribes to by name in the type that the unanswered
	// responses carry count on top of it, each once (a response's first
	// name): a client may subscribe to each name in a request of its own
	// before it answers the first responses (Envoy's on-demand CDS, for a
	// burst of requests naming other clusters), and the names are bounded
	// by the name limits; a client that subscribes to one name again and
	// again gets room for one. A response
	// that takes its stream over it is sent, then the stream ends
	// (ResourceExhausted): the client reconnects with its
	// initial_resource_versions. Per type, because the list is: a stream
	// holds at most the served types' number times this. Envoy answers
	// each response, in order, within milliseconds: Envoy 1.40.0 had at
	// most 2 of a type unanswered in a first sync of 5,000 clusters. The
	// records of the responses answered are dropped (dropAnswered), not
	// counted. A sotw stream holds one response per type
	// unanswered (a request that does not answer the latest is skipped),
	// so this does not apply to it. Default 1,000 (a record is ~100 B plus
	// its names, and copying 1,000 pointers per response costs little).
	MaxUnansweredResponses int `json:"max_unanswered_responses"`
}

// Defaults of Limits.
const (
	DefaultMaxStreams                          = 65536
	DefaultMaxStreamsPerConnection             = 16
	DefaultMaxNamesPerStream                   = 50000
	DefaultMaxNameBytesPerStream               = 2 << 20
	DefaultMaxNamesPerConnection               = 100000
	DefaultMaxNameBytesPerConnection           = 4 << 20
	DefaultMaxNameBytesTotal                   = 1 << 30
	DefaultMaxInitialVersionBytesPerConnection = 16 << 20
	DefaultMaxNodeBytes                        = 256 << 10
	DefaultMaxRecvMessageBytes                 = 4 << 20
	DefaultMaxHeaderBytes                      = 16 << 10
	DefaultRequestsPerSecond                   = 100
	DefaultRequestBurst                        = 1000
	DefaultNACKLogsPerMinute                   = 6
	DefaultMaxUnwrittenResponseBytes           = 16 << 20
	DefaultMaxUnansweredResponses              = 1000
)

// DefaultResumesDecoding is ResumesDecoding's default: 4 × the cores.
func DefaultResumesDecoding() int { return 4 * runtime.GOMAXPROCS(0) }

// WithDefaults returns l with every zero field set to its default.
func (l Limits) WithDefaults() Limits {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&l.MaxStreams, DefaultMaxStreams)
	def(&l.MaxStreamsPerConnection, DefaultMaxStreamsPerConnection)
	def(&l.MaxNamesPerStream, DefaultMaxNamesPerStream)
	def(&l.MaxNameBytesPerStream, DefaultMaxNameBytesPerStream)
	def(&l.MaxNamesPerConnection, DefaultMaxNamesPerConnection)
	def(&l.MaxNameBytesPerConnection, DefaultMaxNameBytesPerConnection)
	def(&l.MaxNameBytesTotal, DefaultMaxNameBytesTotal)
	def(&l.MaxInitialVersionBytesPerConnection, DefaultMaxInitialVersionBytesPerConnection)
	def(&l.MaxNodeBytes, DefaultMaxNodeBytes)
	def(&l.MaxRecvMessageBytes, DefaultMaxRecvMessageBytes)
	def(&l.MaxHeaderBytes, DefaultMaxHeaderBytes)
	def(&l.RequestBurst, DefaultRequestBurst)
	def(&l.NACKLogsPerMinute, DefaultNACKLogsPerMinute)
	def(&l.ResumesDecoding, DefaultResumesDecoding())
	def(&l.MaxUnwrittenResponseBytes, DefaultMaxUnwrittenResponseBytes)
	def(&l.MaxUnansweredResponses, DefaultMaxUnansweredResponses)
	if l.RequestsPerSecond == 0 {
		l.RequestsPerSecond = DefaultRequestsPerSecond
	}
	return l
}

// Check reports the first field out of its range; the error starts with
// the field's JSON name. Call it on WithDefaults' result.
func (l Limits) Check() error {
	for _, f := range []struct {
		name     string
		v        int
		min, max int
	}{
		{"max_streams", l.MaxStreams, 1, 1 << 24},
		{"max_streams_per_connection", l.MaxStreamsPerConnection, 1, 1 << 16},
		{"max_names_per_stream", l.MaxNamesPerStream, 1, 1 << 24},
		{"max_name_bytes_per_stream", l.MaxNameBytesPerStream, 1 << 10, 1 << 30},
		{"max_names_per_connection", l.MaxNamesPerConnection, 1, 1 << 26},
		{"max_name_bytes_per_connection", l.MaxNameBytesPerConnection, 1 << 10, 1 << 32},
		{"max_name_bytes_total", l.MaxNameBytesTotal, 1 << 20, 1 << 40},
		{"max_initial_version_bytes_per_connection", l.MaxInitialVersionBytesPerConnection, 64 << 10, 1 << 32},
		{"max_node_bytes", l.MaxNodeBytes, 1 << 10, 16 << 20},
		{"max_recv_message_bytes", l.MaxRecvMessageBytes, 64 << 10, 256 << 20},
		{"max_header_bytes", l.MaxHeaderBytes, 4 << 10, 1 << 20},
		{"request_burst", l.RequestBurst, 1, 1 << 20},
		{"nack_logs_per_minute", l.NACKLogsPerMinute, 1, 1 << 20}, // 0 is the default
		{"resumes_decoding", l.ResumesDecoding, 1, 1 << 16},
		{"max_unwritten_response_bytes", l.MaxUnwrittenResponseBytes, 64 << 10, 1 << 40},
		{"max_unanswered_responses", l.MaxUnansweredResponses, 16, 1 << 20},
	} {
		if f.v < f.min || f.v > f.max {
			return fmt.Errorf("%s: %d is not in %d..%d", f.name, f.v, f.min, f.max)
		}
	}
	if l.RequestsPerSecond < 0.01 || l.RequestsPerSecond > 1e6 {
		return fmt.Errorf("requests_per_second: %v is not in 0.01..1000000", l.RequestsPerSecond)
	}
	return nil
}

// Keepalive is the server's HTTP/2 keepalive: its own pings, and what it
// enforces of clients' pings (gRFC A8). A zero field means its default.
// A client sent GOAWAY for pinging too often is not counted in a metric:
// gRPC does not report it to the server.
type Keepalive struct {
	// Time: the server pings a connection idle this long (default 30s).
	Time time.Duration `json:"-"`
	// Timeout: and closes it if the ping is not answered within this
	// (default 10s).
	Timeout time.Duration `json:"-"`
	// MinTime: a client pinging more often than this is sent GOAWAY
	// (ENHANCE_YOUR_CALM) and disconnected (default 5s; gRPC's own default
	// is 5 min, but Envoy's xDS clusters are commonly set to ping every
	// 10-30 s, and a bridge must not cut them off).
	MinTime time.Duration `json:"-"`
}

// Defaults of Keepalive.
const (
	DefaultKeepaliveTime    = 30 * time.Second
	DefaultKeepaliveTimeout = 10 * time.Second
	DefaultKeepaliveMinTime = 5 * time.Second
)

// WithDefaults returns k with every zero field set to its default.
func (k Keepalive) WithDefaults() Keepalive {
	if k.Time == 0 {
		k.Time = DefaultKeepaliveTime
	}
	if k.Timeout == 0 {
		k.Timeout = DefaultKeepaliveTimeout
	}
	if k.MinTime == 0 {
		k.MinTime = DefaultKeepaliveMinTime
	}
	return k
}
