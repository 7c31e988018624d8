// Package policy is the traffic policy of the services the bridge
// publishes: how clients connect to a service's hosts (cluster settings),
// which groups of its hosts can be addressed on their own (subsets), and
// how requests for it choose among services and subsets (routes, splits,
// retries, timeouts).
//
// Policy comes from policy sources (a policy file, Consul's L7 config
// entries) next to the services that discovery sources publish:
//
//	policy sources ──Set──┐
//	                      ▼
//	discovery sources ──▶ merge loop ──▶ translate(service, policy) ──▶ xDS
//
// The package is pure: no I/O, no goroutines. Its values are plain data,
// decoded from YAML or JSON with the field names of their json tags
// (README "Policy" shows the file), and the policy sources build them the
// same way. A Service is valid when Check returns nil; the translator
// assumes it.
package policy

import (
	"github.com/xdsbridge/xdsbridge/config/decode"
)

// Protocol is what a service speaks, as Consul's service-defaults
// protocol: it decides the upstream HTTP version.
type Protocol string

const (
	// ProtocolTCP (and the empty protocol) leave the cluster as it is:
	// Envoy uses HTTP/1.1 to the hosts.
	ProtocolTCP   Protocol = "tcp"
	ProtocolHTTP  Protocol = "http"
	ProtocolHTTP2 Protocol = "http2"
	// ProtocolGRPC is HTTP/2 to the hosts, as ProtocolHTTP2.
	ProtocolGRPC Protocol = "grpc"
)

// HTTP2 reports whether the hosts speak HTTP/2.
func (p Protocol) HTTP2() bool { return p == ProtocolHTTP2 || p == ProtocolGRPC }

// Service is the policy of one service (or of every service whose name
// matches a pattern, in a policy file). The zero Service is the default
// policy: a round-robin cluster with the default connect timeout, and one
// route sending everything to the service's own hosts.
type Service struct {
	Protocol       Protocol        `json:"protocol,omitempty"`
	ConnectTimeout decode.Duration `json:"connect_timeout,omitempty"`
	LoadBalancer   *LoadBalancer   `json:"load_balancer,omitempty"`
	// CircuitBreakers are the default-priority thresholds of the cluster.
	CircuitBreakers  *CircuitBreakers  `json:"circuit_breakers,omitempty"`
	OutlierDetection *OutlierDetection `json:"outlier_detection,omitempty"`
	TLS              *UpstreamTLS      `json:"tls,omitempty"`

	// Subsets are named groups of the service's hosts, each published as
	// a cluster of its own (see SubsetCluster) that routes and splits can
	// name.
	Subsets map[string]Subset `json:"subsets,omitempty"`
	// DefaultSubset is where the default route sends requests, and what a
	// destination naming the service without a subset means. Empty: all
	// the service's hosts.
	DefaultSubset string `json:"default_subset,omitempty"`
	// Redirect resolves the service to another: every request for it
	// goes where a request for the target would (Consul's
	// service-resolver redirect).
	Redirect *Target `json:"redirect,omitempty"`
	// Failover lists where requests go when the service (or a subset)
	// has no healthy host, in order: the targets' hosts are published
	// as lower priorities of the service's own assignment.
	Failover []Target `json:"failover,omitempty"`

	// Domains are the virtual host's domains besides the service's name,
	// as gRFC A28 matches them: exact, "*.suffix", "prefix.*" or "*".
	Domains []string `json:"domains,omitempty"`
	// Routes are tried in order; the first whose match matches takes the
	// request. After them comes the default route: everything, to Split
	// if set, else to the service (its DefaultSubset), with Timeout and
	// Retry.
	Routes []Route `json:"routes,omitempty"`
	// Split divides the default route's requests by weight (Consul's
	// service-splitter).
	Split []Split `json:"split,omitempty"`
	// Timeout bounds a whole request of the default route (and of routes
	// without their own). 0: none.
	Timeout decode.Duration `json:"timeout,omitempty"`
	// Retry is the retry policy of the default route (and of routes
	// without their own).
	Retry *Retry `json:"retry,omitempty"`
}

// HasSubset reports whether the service's policy defines the subset; a
// nil policy defines none.
func (s *Service) HasSubset(name string) bool {
	if s == nil {
		return false
	}
	_, ok := s.Subsets[name]
	return ok
}

// LoadBalancer chooses a host of the cluster for each request.
type LoadBalancer struct {
	// Policy: round_robin (default), least_request, ring_hash, maglev or
	// random.
	Policy       string        `json:"policy,omitempty"`
	LeastRequest *LeastRequest `json:"least_request,omitempty"`
	RingHash     *RingHash     `json:"ring_hash,omitempty"`
	// HashPolicies say what ring_hash and maglev hash: the first that
	// yields a value (or all of them, up to a terminal one) make the key.
	HashPolicies []HashPolicy `json:"hash_policies,omitempty"`
}

// Load balancer policies.
const (
	LBRoundRobin   = "round_robin"
	LBLeastRequest = "least_request"
	LBRingHash     = "ring_hash"
	LBMaglev       = "maglev"
	LBRandom       = "random"
)

// LeastRequest is least_request's configuration.
type LeastRequest struct {
	// ChoiceCount is how many random hosts are compared (default 2).
	ChoiceCount uint32 `json:"choice_count,omitempty"`
}

// RingHash is ring_hash's configuration.
type RingHash struct {
	MinimumRingSize uint64 `json:"minimum_ring_size,omitempty"`
	MaximumRingSize uint64 `json:"maximum_ring_size,omitempty"`
}

// HashPolicy is one input of the hash of ring_hash and maglev: exactly one
// of Header, Cookie, SourceIP or QueryParameter.
type HashPolicy struct {
	Header         string      `json:"header,omitempty"`
	Cookie         *HashCookie `json:"cookie,omitempty"`
	SourceIP       bool        `json:"source_ip,omitempty"`
	QueryParameter string      `json:"query_parameter,omitempty"`
	// Terminal stops at this policy when it yields a value.
	Terminal bool `json:"terminal,omitempty"`
}

// HashCookie hashes a cookie; with a TTL Envoy sets the cookie when the
// request has none.
type HashCookie struct {
	Name string          `json:"name"`
	TTL  decode.Duration `json:"ttl,omitempty"`
	Path string          `json:"path,omitempty"`
}

// CircuitBreakers are limits on what the clients send to the whole
// cluster at once. Absent fields, and max_connections,
// max_pending_requests or max_requests of 0, keep Envoy's defaults (1024
// each); max_retries of 0 allows no retry in flight (default 3).
type CircuitBreakers struct {
	MaxConnections     *uint32 `json:"max_connections,omitempty"`
	MaxPendingRequests *uint32 `json:"max_pending_requests,omitempty"`
	MaxRequests        *uint32 `json:"max_requests,omitempty"`
	MaxRetries         *uint32 `json:"max_retries,omitempty"`
}

// OutlierDetection ejects hosts that fail requests. Absent fields, and
// counts and durations of 0, keep Envoy's defaults; percentages of 0 mean
// 0 %. MaxEjectionTime must not be below BaseEjectionTime (default 30s).
type OutlierDetection struct {
	Consecutive5xx            *uint32         `json:"consecutive_5xx,omitempty"`
	ConsecutiveGatewayFailure *uint32         `json:"consecutive_gateway_failure,omitempty"`
	Interval                  decode.Duration `json:"interval,omitempty"`
	BaseEjectionTime          decode.Duration `json:"base_ejection_time,omitempty"`
	MaxEjectionTime           decode.Duration `json:"max_ejection_time,omitempty"`
	MaxEjectionPercent        *uint32         `json:"max_ejection_percent,omitempty"`
	// EnforcingConsecutive5xx is the percentage of detections that eject
	// (Envoy's default 100).
	EnforcingConsecutive5xx *uint32 `json:"enforcing_consecutive_5xx,omitempty"`
}

// UpstreamTLS makes the clients speak TLS to the hosts.
type UpstreamTLS struct {
	// SNI is the server name sent and, with CAFile, the name verified in
	// the host's certificate (default: the service name).
	SNI string `json:"sni,omitempty"`
	// CAFile is a PEM bundle, read by the clients from their own file
	// system at this path, to verify the hosts. Empty: not verified.
	CAFile string `json:"ca_file,omitempty"`
}

// Subset is a named group of a service's hosts.
type Subset struct {
	// Filter selects the hosts, as a Consul filter expression over each
	// host (see README "Policy": Service.Tags, Service.Meta.<key>,
	// Node.Meta.<key>, Metadata.<namespace>.<key>, …). Empty: every host.
	Filter string `json:"filter,omitempty"`
	// OnlyPassing keeps only hosts whose merged health is HEALTHY (or
	// unknown, which Envoy routes to).
	OnlyPassing bool `json:"only_passing,omitempty"`
}

// Target names a service (another, or the same), optionally a subset of
// it, optionally in another datacenter (for the Consul source, the
// service as watched in that datacenter).
type Target struct {
	Service    string `json:"service,omitempty"`
	Subset     string `json:"subset,omitempty"`
	Datacenter string `json:"datacenter,omitempty"`
}

// Route is one route of a service's virtual host.
type Route struct {
	Match Match `json:"match"`
	// Destination is where matching requests go: a service (default: the
	// route's own), optionally a subset. Exclusive with Split.
	Destination *Target `json:"destination,omitempty"`
	// Split divides matching requests by weight.
	Split []Split `json:"split,omitempty"`
	// PrefixRewrite replaces the matched path prefix (Envoy only: gRPC
	// clients cannot rewrite, and ignore it). It starts with / and holds
	// visible ASCII only (percent-encode the rest).
	PrefixRewrite string `json:"prefix_rewrite,omitempty"`
	// Timeout bounds the whole request (and its retries). 0: the service's.
	Timeout decode.Duration `json:"timeout,omitempty"`
	// Retry overrides the service's retry policy for this route.
	Retry *Retry `json:"retry,omitempty"`
}

// Match is what a request must have for a route to take it: all of it.
// At most one of Prefix, Path and Regex; none is the prefix "/".
type Match struct {
	Prefix string `json:"prefix,omitempty"`
	Path   string `json:"path,omitempty"`
	// Regex is an RE2 expression the whole path must match. Envoy and
	// gRPC clients must both accept it (see RegexError).
	Regex string `json:"regex,omitempty"`
	// CaseInsensitive compares Prefix and Path without case.
	CaseInsensitive bool          `json:"case_insensitive,omitempty"`
	Headers         []HeaderMatch `json:"headers,omitempty"`
	// Methods are HTTP methods, any of which matches (gRPC calls are all
	// POST).
	Methods []string `json:"methods,omitempty"`
	// QueryParameters match the query string (Envoy only: gRPC clients
	// never take a route with them).
	QueryParameters []QueryParameterMatch `json:"query_parameters,omitempty"`
	// Fraction takes only this percentage of the requests that match the
	// rest (0–100, up to 4 decimals).
	Fraction *float64 `json:"fraction,omitempty"`
}

// HeaderMatch matches one header: exactly one of Exact, Prefix, Suffix,
// Contains, Regex, Present or Range; Invert negates it.
type HeaderMatch struct {
	Name     string `json:"name"`
	Exact    string `json:"exact,omitempty"`
	Prefix   string `json:"prefix,omitempty"`
	Suffix   string `json:"suffix,omitempty"`
	Contains string `json:"contains,omitempty"`
	Regex    string `json:"regex,omitempty"`
	Present  bool   `json:"present,omitempty"`
	// Range is an integer range [start, end).
	Range  *Range `json:"range,omitempty"`
	Invert bool   `json:"invert,omitempty"`
}

// Range is a half-open range of integers, [Start, End).
type Range struct {
	Start int64 `json:"start"`
	End   int64 `json:"end"`
}

// QueryParameterMatch matches one query parameter: Exact, Regex or
// Present.
type QueryParameterMatch struct {
	Name    string `json:"name"`
	Exact   string `json:"exact,omitempty"`
	Regex   string `json:"regex,omitempty"`
	Present bool   `json:"present,omitempty"`
}

// Split is one share of a route's requests. Weights are percentages with
// up to two decimals that add up to 100, as in Consul's service-splitter;
// a share of 0 takes no request.
type Split struct {
	Weight float64 `json:"weight"`
	// Service is the destination (default: the route's own), Subset a
	// subset of it.
	Service string `json:"service,omitempty"`
	Subset  string `json:"subset,omitempty"`
}

// Retry is a retry policy (gRFC A44, Envoy's RetryPolicy).
type Retry struct {
	// On (retry_on) are the conditions to retry on: gRPC status names (cancelled,
	// deadline-exceeded, internal, resource-exhausted, unavailable),
	// which both gRPC clients and Envoy proxying gRPC honour, and
	// Envoy's HTTP conditions (5xx, gateway-error, reset,
	// connect-failure, retriable-4xx, refused-stream,
	// retriable-status-codes), which gRPC clients ignore.
	On []string `json:"retry_on"`
	// NumRetries is how many times a request is retried (default 1, at
	// least 1; gRPC clients make at most 5 attempts in all).
	NumRetries *uint32 `json:"num_retries,omitempty"`
	// BaseInterval and MaxInterval bound the exponential back-off between
	// retries (A44's defaults: 25ms and 10 × base).
	BaseInterval decode.Duration `json:"base_interval,omitempty"`
	MaxInterval  decode.Duration `json:"max_interval,omitempty"`
	// StatusCodes are the HTTP statuses retriable-status-codes retries
	// (Envoy only).
	StatusCodes []uint32 `json:"status_codes,omitempty"`
	// PerTryTimeout bounds each attempt (Envoy only: gRPC clients do not
	// support it without hedging, gRFC A44).
	PerTryTimeout decode.Duration `json:"per_try_timeout,omitempty"`
}
