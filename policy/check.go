package policy

import (
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/xdsbridge/xdsbridge/config/decode"
	"github.com/xdsbridge/xdsbridge/policy/re2"
)

// FieldError is a problem with one field of a policy. Path leads from the
// top of the policy document to the field: mapping keys and "[i]"
// sequence indexes (decode.Line finds its line).
type FieldError struct {
	Path []string
	Msg  string
}

func (e *FieldError) Error() string { return FieldPath(e.Path) + ": " + e.Msg }

// FieldPath writes a path as the README and error messages do
// (decode.FieldPath): services."web.internal".routes[0].match. Keys with a
// dot, a bracket, a quote, a space or a control character are quoted, and
// a key such as the pattern "[ab]" is not taken for a list index.
func FieldPath(path []string) string { return decode.FieldPath(path) }

// Limits of what Check accepts. They are Envoy's (and gRPC's) own where
// those have one.
const (
	MaxDuration      = 24 * time.Hour
	MaxRoutes        = 1000
	MaxDomains       = 100
	MaxSubsets       = 100
	MaxSplits        = 100
	MaxHeaderMatches = 32
	MaxRingSize      = 8 * 1024 * 1024 // Envoy's bound on maximum_ring_size
	// MaxMinimumRingSize bounds minimum_ring_size: every Envoy builds a
	// ring of at least that many entries for each cluster of the service
	// (each subset's too), about 50 bytes an entry, and a ring of
	// Envoy's own bound costs every Envoy ~400 MB and seconds per
	// cluster. grpc-go caps its ring at 4,096 entries.
	MaxMinimumRingSize = 128 * 1024
	MaxRegexBytes      = 4096
	// DefaultBaseEjectionTime is Envoy's outlier_detection
	// base_ejection_time when left out.
	DefaultBaseEjectionTime = 30 * time.Second
	// MaxRetries is gRPC's bound on attempts (5) less the first one:
	// more are accepted and mean 4 to gRPC clients.
	MaxRetries = 100
)

var (
	subsetName = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,62}$`)
	methodName = regexp.MustCompile(`^[A-Z][A-Z0-9-]{0,31}$`)
	// headerName is an HTTP field name (RFC 9110 token) or an HTTP/2
	// pseudo-header.
	headerName = regexp.MustCompile("^:?[!#$%&'*+.^_`|~0-9A-Za-z-]{1,256}$")
	// cookieName is an RFC 6265 cookie-name (an RFC 9110 token).
	cookieName = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,256}$")
)

// GRPCRetryOn are the retry conditions gRPC clients honour (gRFC A44).
var GRPCRetryOn = []string{"cancelled", "deadline-exceeded", "internal", "resource-exhausted", "unavailable"}

// EnvoyRetryOn are Envoy's HTTP retry conditions (x-envoy-retry-on) the
// policy accepts besides GRPCRetryOn; gRPC clients ignore them.
var EnvoyRetryOn = []string{"5xx", "gateway-error", "reset", "connect-failure", "envoy-ratelimited", "retriable-4xx", "refused-stream", "retriable-status-codes", "http3-post-connect-failure"}

// Check reports every problem of the service's policy, each at path
// (where the service sits in its document) plus the field. It checks the
// service alone: names of other services and their subsets are checked
// where the whole set is known (File.Check, the translator).
func (s *Service) Check(path ...string) []*FieldError {
	c := &checker{}
	c.service(path, s)
	return c.errs
}

type checker struct{ errs []*FieldError }

func (c *checker) add(path []string, field, format string, args ...any) {
	p := append(append([]string(nil), path...), splitField(field)...)
	c.errs = append(c.errs, &FieldError{Path: p, Msg: fmt.Sprintf(format, args...)})
}

// splitField splits "routes[0].match" into its segments.
func splitField(f string) []string {
	if f == "" {
		return nil
	}
	var out []string
	for _, part := range strings.Split(f, ".") {
		for {
			i := strings.IndexByte(part, '[')
			if i < 0 {
				break
			}
			if i > 0 {
				out = append(out, part[:i])
			}
			j := strings.IndexByte(part[i:], ']')
			if j < 0 {
				break
			}
			out = append(out, part[i:i+j+1])
			part = part[i+j+1:]
		}
		if part != "" {
			out = append(out, part)
		}
	}
	return out
}

func sub(path []string, field string) []string {
	return append(append([]string(nil), path...), splitField(field)...)
}

func (c *checker) duration(path []string, field string, d decode.Duration, min time.Duration) {
	if d == 0 {
		return
	}
	if err := decode.CheckRange(field, d.D(), min, MaxDuration); err != nil {
		c.add(path, field, "%s", strings.TrimPrefix(err.Error(), field+": "))
	}
}

func (c *checker) service(p []string, s *Service) {
	switch s.Protocol {
	case "", ProtocolTCP, ProtocolHTTP, ProtocolHTTP2, ProtocolGRPC:
	default:
		c.add(p, "protocol", "unknown protocol %q (want tcp, http, http2 or grpc)", s.Protocol)
	}
	c.duration(p, "connect_timeout", s.ConnectTimeout, time.Millisecond)
	if s.LoadBalancer != nil {
		c.loadBalancer(sub(p, "load_balancer"), s.LoadBalancer)
	}
	if od := s.OutlierDetection; od != nil {
		q := sub(p, "outlier_detection")
		c.duration(q, "interval", od.Interval, time.Millisecond)
		c.duration(q, "base_ejection_time", od.BaseEjectionTime, time.Millisecond)
		c.duration(q, "max_ejection_time", od.MaxEjectionTime, time.Millisecond)
		c.percent(q, "max_ejection_percent", od.MaxEjectionPercent)
		c.percent(q, "enforcing_consecutive_5xx", od.EnforcingConsecutive5xx)
		// Envoy refuses the cluster when max_ejection_time is below
		// base_ejection_time (default 30s); a max left out is
		// max(300s, base).
		base := od.BaseEjectionTime.D()
		if base == 0 {
			base = DefaultBaseEjectionTime
		}
		if m := od.MaxEjectionTime.D(); m != 0 && m < base {
			c.add(q, "max_ejection_time", "%v < base_ejection_time %v (Envoy refuses a maximum below the base; the base defaults to %v)", m, base, DefaultBaseEjectionTime)
		}
	}
	if t := s.TLS; t != nil {
		if t.SNI != "" && !validHost(t.SNI) {
			c.add(p, "tls.sni", "%q is not a host name", t.SNI)
		}
	}

	if len(s.Subsets) > MaxSubsets {
		c.add(p, "subsets", "%d subsets; at most %d", len(s.Subsets), MaxSubsets)
	}
	for _, name := range slices.Sorted(maps.Keys(s.Subsets)) {
		if !subsetName.MatchString(name) {
			c.add(append(sub(p, "subsets"), name), "", "subset name %q: want letters, digits, '_', '.' and '-', at most 63, not starting with '.' or '-'", name)
		}
		if f := s.Subsets[name].Filter; f != "" {
			if _, err := CompileFilter(f); err != nil {
				c.add(append(sub(p, "subsets"), name), "filter", "%v", err)
			}
		}
	}
	if s.DefaultSubset != "" {
		if _, ok := s.Subsets[s.DefaultSubset]; !ok {
			c.add(p, "default_subset", "no subset %q in subsets", s.DefaultSubset)
		}
	}
	if s.Redirect != nil {
		c.target(p, "redirect", *s.Redirect, s)
		if s.Redirect.Service == "" && s.Redirect.Datacenter == "" && s.Redirect.Subset == "" {
			c.add(p, "redirect", "names nothing: give service, subset or datacenter")
		}
		if len(s.Failover) > 0 || s.DefaultSubset != "" {
			c.add(p, "redirect", "a redirected service takes its target's subsets and failover: leave out default_subset and failover")
		}
	}
	for i, t := range s.Failover {
		f := fmt.Sprintf("failover[%d]", i)
		if t.Service == "" && t.Datacenter == "" {
			c.add(p, f, "names no service and no datacenter")
		}
		c.target(p, f, t, s)
	}

	if len(s.Domains) > MaxDomains {
		c.add(p, "domains", "%d domains; at most %d", len(s.Domains), MaxDomains)
	}
	seen := map[string]int{}
	for i, d := range s.Domains {
		f := fmt.Sprintf("domains[%d]", i)
		if msg := checkDomain(d); msg != "" {
			c.add(p, f, "%q: %s", d, msg)
		}
		if j, ok := seen[strings.ToLower(d)]; ok {
			c.add(p, f, "%q is domains[%d] again (Envoy refuses a domain twice)", d, j)
		}
		seen[strings.ToLower(d)] = i
	}
	if len(s.Routes) > MaxRoutes {
		c.add(p, "routes", "%d routes; at most %d", len(s.Routes), MaxRoutes)
	}
	for i := range s.Routes {
		c.route(sub(p, fmt.Sprintf("routes[%d]", i)), &s.Routes[i], s)
	}
	c.splits(p, "split", s.Split, s)
	c.duration(p, "timeout", s.Timeout, time.Millisecond)
	if s.Retry != nil {
		c.retry(sub(p, "retry"), s.Retry)
	}
}

func (c *checker) percent(p []string, field string, v *uint32) {
	if v != nil && *v > 100 {
		c.add(p, field, "%d is not a percentage (0..100)", *v)
	}
}

// target checks a destination naming a subset of the service itself
// (Service empty): the subset must be one of its own.
func (c *checker) target(p []string, field string, t Target, self *Service) {
	if t.Service == "" && t.Datacenter == "" && t.Subset != "" {
		if _, ok := self.Subsets[t.Subset]; !ok {
			c.add(p, field+".subset", "no subset %q in subsets", t.Subset)
		}
	}
	if t.Subset != "" && !subsetName.MatchString(t.Subset) {
		c.add(p, field+".subset", "%q is not a subset name", t.Subset)
	}
}

func (c *checker) loadBalancer(p []string, lb *LoadBalancer) {
	switch lb.Policy {
	case "", LBRoundRobin, LBLeastRequest, LBRingHash, LBMaglev, LBRandom:
	default:
		c.add(p, "policy", "unknown policy %q (want round_robin, least_request, ring_hash, maglev or random)", lb.Policy)
	}
	if lb.LeastRequest != nil {
		if lb.Policy != LBLeastRequest {
			c.add(p, "least_request", "only with policy least_request")
		}
		if n := lb.LeastRequest.ChoiceCount; n != 0 && n < 2 {
			c.add(p, "least_request.choice_count", "%d: at least 2", n)
		}
	}
	if r := lb.RingHash; r != nil {
		if lb.Policy != LBRingHash {
			c.add(p, "ring_hash", "only with policy ring_hash")
		}
		if r.MinimumRingSize > MaxMinimumRingSize {
			c.add(p, "ring_hash.minimum_ring_size", "%d: at most %d (every Envoy builds a ring of at least this many entries, about 50 bytes each, for each of the service's clusters)", r.MinimumRingSize, MaxMinimumRingSize)
		}
		if r.MaximumRingSize > MaxRingSize {
			c.add(p, "ring_hash.maximum_ring_size", "%d: at most %d", r.MaximumRingSize, MaxRingSize)
		}
		if r.MinimumRingSize > 0 && r.MaximumRingSize > 0 && r.MinimumRingSize > r.MaximumRingSize {
			c.add(p, "ring_hash", "minimum_ring_size %d > maximum_ring_size %d", r.MinimumRingSize, r.MaximumRingSize)
		}
	}
	if len(lb.HashPolicies) > 0 && lb.Policy != LBRingHash && lb.Policy != LBMaglev {
		c.add(p, "hash_policies", "hash policies only matter to ring_hash and maglev (policy is %q)", lb.Policy)
	}
	for i, h := range lb.HashPolicies {
		f := fmt.Sprintf("hash_policies[%d]", i)
		n := 0
		if h.Header != "" {
			n++
			if !headerName.MatchString(h.Header) {
				c.add(p, f+".header", "%q is not a header name", h.Header)
			}
		}
		if h.Cookie != nil {
			n++
			if h.Cookie.Name == "" {
				c.add(p, f+".cookie.name", "required")
			} else if !cookieName.MatchString(h.Cookie.Name) {
				c.add(p, f+".cookie.name", "%q is not a cookie name (RFC 6265: letters, digits and !#$%%&'*+-.^_`|~)", h.Cookie.Name)
			}
			if i := strings.IndexFunc(h.Cookie.Path, func(r rune) bool { return isControl(r) || r == ';' }); i >= 0 {
				c.add(p, f+".cookie.path", "%q: byte %d (%q) cannot be in a Set-Cookie path", h.Cookie.Path, i, h.Cookie.Path[i])
			}
			c.duration(sub(p, f), "cookie.ttl", h.Cookie.TTL, time.Second)
		}
		if h.SourceIP {
			n++
		}
		if h.QueryParameter != "" {
			n++
		}
		if n != 1 {
			c.add(p, f, "give exactly one of header, cookie, source_ip and query_parameter (%d given)", n)
		}
	}
}

func (c *checker) route(p []string, r *Route, self *Service) {
	m := &r.Match
	n := 0
	for _, v := range []string{m.Prefix, m.Path, m.Regex} {
		if v != "" {
			n++
		}
	}
	if n > 1 {
		c.add(p, "match", "give at most one of prefix, path and regex")
	}
	if m.Prefix != "" && !strings.HasPrefix(m.Prefix, "/") {
		c.add(p, "match.prefix", "%q: must start with /", m.Prefix)
	}
	if m.Path != "" && !strings.HasPrefix(m.Path, "/") {
		c.add(p, "match.path", "%q: must start with /", m.Path)
	}
	c.regex(p, "match.regex", m.Regex)
	if m.CaseInsensitive && m.Prefix == "" && m.Path == "" {
		c.add(p, "match.case_insensitive", "only with prefix or path (write a case-insensitive regex as (?i)...)")
	}
	if len(m.Headers) > MaxHeaderMatches {
		c.add(p, "match.headers", "%d header matches; at most %d", len(m.Headers), MaxHeaderMatches)
	}
	for i, h := range m.Headers {
		c.header(sub(p, fmt.Sprintf("match.headers[%d]", i)), h)
	}
	methodsOK := true
	for i, meth := range m.Methods {
		if !methodName.MatchString(meth) {
			c.add(p, fmt.Sprintf("match.methods[%d]", i), "%q is not an HTTP method (upper case, as GET)", meth)
			methodsOK = false
		}
	}
	if methodsOK && len(m.Methods) > 1 {
		if err := re2.Check(MethodsRegex(m.Methods), re2.DefaultMaxProgramSize); err != nil {
			c.add(p, "match.methods", "%d methods: Envoy matches them with one regex, and %v: %s", len(m.Methods), err, envoyRefusesRoutes)
		}
	}
	for i, q := range m.QueryParameters {
		f := fmt.Sprintf("match.query_parameters[%d]", i)
		if q.Name == "" {
			c.add(p, f+".name", "required")
		}
		k := 0
		if q.Exact != "" {
			k++
		}
		if q.Regex != "" {
			k++
			c.regex(p, f+".regex", q.Regex)
		}
		if q.Present {
			k++
		}
		if k != 1 {
			c.add(p, f, "give exactly one of exact, regex and present (%d given)", k)
		}
	}
	if fr := m.Fraction; fr != nil {
		if !(*fr >= 0 && *fr <= 100) {
			c.add(p, "match.fraction", "%v is not a percentage (0..100)", *fr)
		} else if v := *fr * 10000; math.Abs(v-math.Round(v)) > 1e-6 {
			c.add(p, "match.fraction", "%v: at most 4 decimals", *fr)
		}
	}

	if r.Destination != nil && len(r.Split) > 0 {
		c.add(p, "", "give destination or split, not both")
	}
	if r.Destination != nil {
		c.target(p, "destination", *r.Destination, self)
	}
	c.splits(p, "split", r.Split, self)
	if r.PrefixRewrite != "" {
		if msg := pathProblem(r.PrefixRewrite); msg != "" {
			c.add(p, "prefix_rewrite", "%q: %s", r.PrefixRewrite, msg)
		}
	}
	c.duration(p, "timeout", r.Timeout, time.Millisecond)
	if r.Retry != nil {
		c.retry(sub(p, "retry"), r.Retry)
	}
}

func (c *checker) regex(p []string, field, re string) {
	if re == "" {
		return
	}
	if err := RegexError(re); err != nil {
		c.add(p, field, "%v", err)
	}
}

// RegexError says why gRPC clients or Envoy would refuse the regex re,
// or is nil. gRPC clients compile it with Go's regexp, Envoy with RE2
// (see package re2), each refusing with it the whole route
// configuration.
func RegexError(re string) error {
	if len(re) > MaxRegexBytes {
		return fmt.Errorf("%d bytes; at most %d", len(re), MaxRegexBytes)
	}
	if _, err := regexp.Compile(re); err != nil {
		return fmt.Errorf("%q: %v", re, err)
	}
	if err := re2.Check(re, re2.DefaultMaxProgramSize); err != nil {
		return fmt.Errorf("%q: %v: %s", re, err, envoyRefusesRoutes)
	}
	return nil
}

// envoyRefusesRoutes says what a regex Envoy refuses costs.
const envoyRefusesRoutes = "Envoy would refuse the service's whole route configuration"

// MethodsRegex is the regex that matches any of several methods (Envoy
// matches :method with it).
func MethodsRegex(methods []string) string {
	alts := make([]string, len(methods))
	for i, meth := range methods {
		alts[i] = regexp.QuoteMeta(meth)
	}
	return strings.Join(alts, "|")
}

func (c *checker) header(p []string, h HeaderMatch) {
	if !headerName.MatchString(h.Name) {
		c.add(p, "name", "%q is not a header name", h.Name)
	}
	n := 0
	for _, v := range []string{h.Exact, h.Prefix, h.Suffix, h.Contains, h.Regex} {
		if v != "" {
			n++
		}
	}
	if h.Present {
		n++
	}
	if h.Range != nil {
		n++
		if h.Range.Start >= h.Range.End {
			c.add(p, "range", "start %d >= end %d (ranges are half-open: [start, end))", h.Range.Start, h.Range.End)
		}
	}
	if n != 1 {
		c.add(p, "", "give exactly one of exact, prefix, suffix, contains, regex, present and range (%d given)", n)
	}
	c.regex(p, "regex", h.Regex)
}

func (c *checker) splits(p []string, field string, splits []Split, self *Service) {
	if len(splits) == 0 {
		return
	}
	if len(splits) > MaxSplits {
		c.add(p, field, "%d shares; at most %d", len(splits), MaxSplits)
	}
	var sum float64
	valid := true
	for i, s := range splits {
		f := fmt.Sprintf("%s[%d]", field, i)
		switch {
		case !(s.Weight >= 0 && s.Weight <= 100):
			c.add(p, f+".weight", "%v is not a percentage (0..100)", s.Weight)
			valid = false
		case math.Abs(s.Weight*100-math.Round(s.Weight*100)) > 1e-6:
			c.add(p, f+".weight", "%v: at most 2 decimals", s.Weight)
			valid = false
		default:
			sum += s.Weight
		}
		c.target(p, f, Target{Service: s.Service, Subset: s.Subset}, self)
	}
	// Weights are percentages of the requests, and must add up to 100
	// as in Consul's service-splitter (in hundredths: two decimals).
	if valid && math.Round(sum*100) != 100*100 {
		c.add(p, field, "the weights add up to %v; they must add up to 100 (each is the percentage of the requests that share takes)", math.Round(sum*100)/100)
	}
}

// pathProblem says why s cannot begin a request path (a prefix_rewrite),
// or is "": it must start with / and hold only visible ASCII (anything
// else percent-encoded), as Envoy sends it in the :path header.
func pathProblem(s string) string {
	if !strings.HasPrefix(s, "/") {
		return "must start with /"
	}
	for i := 0; i < len(s); i++ {
		if b := s[i]; b <= ' ' || b >= 0x7f {
			return fmt.Sprintf("byte %d (0x%02x) cannot be in a request path: write it percent-encoded", i, b)
		}
	}
	return ""
}

// isControl reports whether r is an ASCII control character.
func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

func (c *checker) retry(p []string, r *Retry) {
	if len(r.On) == 0 {
		c.add(p, "retry_on", "required: the conditions to retry on (%s, or Envoy's %s)", strings.Join(GRPCRetryOn, ", "), strings.Join(EnvoyRetryOn, ", "))
	}
	for i, on := range r.On {
		if !slices.Contains(GRPCRetryOn, on) && !slices.Contains(EnvoyRetryOn, on) {
			c.add(p, fmt.Sprintf("retry_on[%d]", i), "unknown condition %q (want %s, or Envoy's %s)", on, strings.Join(GRPCRetryOn, ", "), strings.Join(EnvoyRetryOn, ", "))
		}
	}
	if n := r.NumRetries; n != nil && (*n < 1 || *n > MaxRetries) {
		c.add(p, "num_retries", "%d: want 1..%d (gRFC A44: at least 1)", *n, MaxRetries)
	}
	c.duration(p, "base_interval", r.BaseInterval, time.Millisecond)
	c.duration(p, "max_interval", r.MaxInterval, time.Millisecond)
	if r.MaxInterval != 0 && r.BaseInterval == 0 {
		c.add(p, "max_interval", "needs base_interval (gRFC A44: a back-off without base_interval is refused)")
	}
	if r.BaseInterval != 0 && r.MaxInterval != 0 && r.MaxInterval < r.BaseInterval {
		c.add(p, "max_interval", "%v < base_interval %v", r.MaxInterval.D(), r.BaseInterval.D())
	}
	for i, code := range r.StatusCodes {
		if code < 100 || code > 599 {
			c.add(p, fmt.Sprintf("status_codes[%d]", i), "%d is not an HTTP status", code)
		}
	}
	if len(r.StatusCodes) > 0 && !slices.Contains(r.On, "retriable-status-codes") {
		c.add(p, "status_codes", "only used with retriable-status-codes in retry_on")
	}
	c.duration(p, "per_try_timeout", r.PerTryTimeout, time.Millisecond)
}

// checkDomain returns what is wrong with a virtual-host domain, or "".
// gRFC A28 and Envoy take an exact name, a wildcard prefix (*.example.com,
// *-bar.com), a wildcard suffix (example.*) or "*" alone.
func checkDomain(d string) string {
	switch {
	case d == "":
		return "empty"
	case d == "*":
		return ""
	case strings.Count(d, "*") > 1:
		return "at most one *, first or last"
	case len(d) > 2 && strings.Contains(d[1:len(d)-1], "*"):
		return "* only first or last"
	case strings.ContainsAny(d, " /") || strings.ContainsFunc(d, isControl):
		return "not a host name"
	}
	return ""
}

// validHost reports whether s is a DNS name (letters, digits, '-', '.',
// labels of 1..63) of at most 253 bytes.
func validHost(s string) bool {
	if len(s) == 0 || len(s) > 253 {
		return false
	}
	for _, l := range strings.Split(strings.TrimSuffix(s, "."), ".") {
		if len(l) == 0 || len(l) > 63 {
			return false
		}
		for _, r := range l {
			if !(r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
				return false
			}
		}
	}
	return true
}
