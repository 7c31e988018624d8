package healthcheck

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/xdsbridge/xdsbridge/config/decode"
)

// Probe types.
const (
	TypeTCP  = "tcp"
	TypeHTTP = "http"
	TypeGRPC = "grpc"
)

// Initial states (Config.InitialState).
const (
	// InitialUnknown (the default): the target has no verdict until probes
	// give one, and until then the host's discovery health stands.
	InitialUnknown = "unknown"
	// InitialHealthy: the target is Healthy before its first probe and needs
	// unhealthy_threshold failures to turn Unhealthy.
	InitialHealthy = "healthy"
	// InitialUnhealthy: the target is Unhealthy before its first probe (what
	// Envoy does with a new host); its first success makes it Healthy.
	InitialUnhealthy = "unhealthy"
)

// Defaults. The thresholds are those of Envoy's documentation examples.
const (
	DefaultInterval           = 5 * time.Second
	DefaultTimeout            = 1 * time.Second
	DefaultJitterPercent      = 10 // of the interval, when jitter is not given
	DefaultHealthyThreshold   = 2
	DefaultUnhealthyThreshold = 3
	DefaultHTTPPath           = "/"
	// MaxThreshold bounds both thresholds; anything larger is a typo.
	MaxThreshold = 1000
)

// Ranges of the durations, checked by Validate.
const (
	MinInterval = 10 * time.Millisecond
	MaxInterval = time.Hour // also jitter's upper bound
	MinTimeout  = time.Millisecond
	MaxTimeout  = time.Minute
)

// DefaultExpectedStatuses is [200, 300): any 2xx.
var DefaultExpectedStatuses = []StatusRange{{Start: 200, End: 300}}

// Config is one health check as written in the config file, e.g.
//
//	health_check:
//	  type: http            # tcp | http | grpc (inferred from the http/grpc block if left out)
//	  interval: 5s          # between the end of one probe and the start of the next
//	  timeout: 1s
//	  jitter: 500ms         # each wait gets a random extra in [0, jitter); default 10% of interval
//	  healthy_threshold: 2
//	  unhealthy_threshold: 3
//	  initial_state: unknown
//	  reuse_connection: true # http and grpc: keep the connection between probes
//	  http: {path: /healthz, host: web.internal, expected_statuses: [{start: 200, end: 300}]}
//
// Decode it with ParseConfig (strict, defaults, validation) or as part of a
// larger document (UnmarshalJSON is strict and applies defaults; call
// Validate after). A Config built in Go gets the defaults of zero fields
// from the Checker (Normalize), except Jitter: zero there means no jitter.
type Config struct {
	Type               string          `json:"type"`
	Interval           decode.Duration `json:"interval"`
	Timeout            decode.Duration `json:"timeout"`
	Jitter             decode.Duration `json:"jitter"`
	HealthyThreshold   uint32          `json:"healthy_threshold"`
	UnhealthyThreshold uint32          `json:"unhealthy_threshold"`
	InitialState       string          `json:"initial_state"`
	// ReuseConnection keeps an HTTP or gRPC check's connection open
	// between probes, as Envoy's reuse_connection (default true; nil means
	// the default). False opens and closes a connection per probe. TCP
	// checks always open a new connection: the connect is the check.
	ReuseConnection *bool       `json:"reuse_connection,omitempty"`
	HTTP            *HTTPConfig `json:"http,omitempty"`
	GRPC            *GRPCConfig `json:"grpc,omitempty"`
}

// HTTPConfig is the http block: an HTTP/1.1 GET of Path.
type HTTPConfig struct {
	// Path is the request path (and query), default "/".
	Path string `json:"path"`
	// Host is the Host header; empty means the target's address:port.
	Host string `json:"host,omitempty"`
	// ExpectedStatuses are half-open ranges [start, end) as Envoy's
	// expected_statuses; default [{start: 200, end: 300}].
	ExpectedStatuses []StatusRange `json:"expected_statuses"`
}

// StatusRange is a half-open range of HTTP status codes [Start, End), as
// Envoy's type.v3.Int64Range.
type StatusRange struct {
	Start int64 `json:"start"`
	End   int64 `json:"end"`
}

// GRPCConfig is the grpc block: grpc.health.v1.Health/Check.
type GRPCConfig struct {
	// ServiceName is sent in the HealthCheckRequest; empty asks about the
	// server as a whole.
	ServiceName string `json:"service_name"`
	// Authority overrides the :authority header; empty means address:port.
	Authority string `json:"authority,omitempty"`
}

// rawConfig is the file form: pointers tell "absent" from zero.
type rawConfig struct {
	Type               string           `json:"type"`
	Interval           *decode.Duration `json:"interval"`
	Timeout            *decode.Duration `json:"timeout"`
	Jitter             *decode.Duration `json:"jitter"`
	HealthyThreshold   *uint32          `json:"healthy_threshold"`
	UnhealthyThreshold *uint32          `json:"unhealthy_threshold"`
	InitialState       string           `json:"initial_state"`
	ReuseConnection    *bool            `json:"reuse_connection"`
	HTTP               *HTTPConfig      `json:"http"`
	GRPC               *GRPCConfig      `json:"grpc"`
}

// UnmarshalJSON decodes the file form strictly (unknown fields are errors)
// and applies the defaults. It does not validate: call Validate.
func (c *Config) UnmarshalJSON(b []byte) error {
	if t := strings.TrimSpace(string(b)); t == "null" || t == "" {
		return nil
	} else if t[0] != '{' {
		return errors.New("want a mapping (type, interval, ...), not " + t[:min(len(t), 20)])
	}
	var r rawConfig
	if err := decode.JSONStrict(b, &r); err != nil {
		return err
	}
	out := Config{
		Type:            strings.ToLower(strings.TrimSpace(r.Type)),
		InitialState:    strings.ToLower(strings.TrimSpace(r.InitialState)),
		ReuseConnection: r.ReuseConnection,
		HTTP:            r.HTTP,
		GRPC:            r.GRPC,
	}
	if out.Type == "" {
		switch {
		case r.HTTP != nil && r.GRPC == nil:
			out.Type = TypeHTTP
		case r.GRPC != nil && r.HTTP == nil:
			out.Type = TypeGRPC
		}
	}
	if r.Interval != nil {
		out.Interval = *r.Interval
	}
	if r.Timeout != nil {
		out.Timeout = *r.Timeout
	}
	if r.HealthyThreshold != nil {
		out.HealthyThreshold = *r.HealthyThreshold
	}
	if r.UnhealthyThreshold != nil {
		out.UnhealthyThreshold = *r.UnhealthyThreshold
	}
	// Thresholds of 0 stay 0 so that Validate reports them; Normalize
	// would otherwise turn them into the defaults.
	zeroHealthy := r.HealthyThreshold != nil && *r.HealthyThreshold == 0
	zeroUnhealthy := r.UnhealthyThreshold != nil && *r.UnhealthyThreshold == 0
	zeroInterval := r.Interval != nil && *r.Interval == 0
	zeroTimeout := r.Timeout != nil && *r.Timeout == 0
	out = out.Normalize()
	if r.Jitter != nil {
		out.Jitter = *r.Jitter
	} else {
		out.Jitter = decode.Duration(out.Interval.D() * DefaultJitterPercent / 100)
	}
	if zeroHealthy {
		out.HealthyThreshold = 0
	}
	if zeroUnhealthy {
		out.UnhealthyThreshold = 0
	}
	if zeroInterval {
		out.Interval = 0
	}
	if zeroTimeout {
		out.Timeout = 0
	}
	*c = out
	return nil
}

// Normalize returns the config with defaults in its zero fields (interval,
// timeout, thresholds, initial state, HTTP path and statuses) and the
// expected statuses sorted. It leaves Jitter alone: zero means none. It
// does not validate and does not modify c's blocks (it copies them).
func (c Config) Normalize() Config {
	c.Type = strings.ToLower(c.Type)
	if c.Interval == 0 {
		c.Interval = decode.Duration(DefaultInterval)
	}
	if c.Timeout == 0 {
		c.Timeout = decode.Duration(DefaultTimeout)
	}
	if c.HealthyThreshold == 0 {
		c.HealthyThreshold = DefaultHealthyThreshold
	}
	if c.UnhealthyThreshold == 0 {
		c.UnhealthyThreshold = DefaultUnhealthyThreshold
	}
	c.InitialState = strings.ToLower(c.InitialState)
	if c.InitialState == "" {
		c.InitialState = InitialUnknown
	}
	reuse := c.ReuseConnection == nil || *c.ReuseConnection
	c.ReuseConnection = &reuse
	if c.HTTP != nil {
		h := *c.HTTP
		if h.Path == "" {
			h.Path = DefaultHTTPPath
		}
		if len(h.ExpectedStatuses) == 0 {
			h.ExpectedStatuses = DefaultExpectedStatuses
		}
		h.ExpectedStatuses = append([]StatusRange(nil), h.ExpectedStatuses...)
		sort.Slice(h.ExpectedStatuses, func(i, j int) bool {
			a, b := h.ExpectedStatuses[i], h.ExpectedStatuses[j]
			if a.Start != b.Start {
				return a.Start < b.Start
			}
			return a.End < b.End
		})
		c.HTTP = &h
	} else if c.Type == TypeHTTP {
		c.HTTP = &HTTPConfig{Path: DefaultHTTPPath, ExpectedStatuses: append([]StatusRange(nil), DefaultExpectedStatuses...)}
	}
	if c.GRPC != nil {
		g := *c.GRPC
		c.GRPC = &g
	} else if c.Type == TypeGRPC {
		c.GRPC = &GRPCConfig{}
	}
	return c
}

// ParseConfig decodes one health_check block (YAML turned JSON) strictly,
// applies the defaults and validates it. field names the block in errors,
// e.g. "sources[0].file.health_check".
func ParseConfig(raw json.RawMessage, field string) (Config, error) {
	if t := strings.TrimSpace(string(raw)); t == "" || t == "null" {
		return Config{}, fmt.Errorf("%s: empty health check (want at least a type: tcp, http or grpc)", field)
	}
	var c Config
	if err := json.Unmarshal(raw, &c); err != nil {
		err = unwrapJSON(err)
		// "interval: cannot use ..." from the strict decoder becomes
		// "health_check.interval: cannot use ...".
		if f, _, ok := strings.Cut(err.Error(), ": "); ok && isFieldPath(f) {
			return Config{}, fmt.Errorf("%s.%w", field, err)
		}
		return Config{}, fmt.Errorf("%s: %w", field, err)
	}
	if err := c.Validate(field); err != nil {
		return Config{}, err
	}
	return c, nil
}

func isFieldPath(s string) bool {
	if s == "" || s == "json" {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '[' || r == ']') {
			return false
		}
	}
	return true
}

// unwrapJSON strips the "json: " noise encoding/json puts on syntax errors.
func unwrapJSON(err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Errorf("invalid JSON at offset %d: %s", se.Offset, strings.TrimPrefix(se.Error(), "json: "))
	}
	return err
}

// Validate checks a config that has its defaults (from ParseConfig,
// UnmarshalJSON or Normalize). Errors start with field, e.g.
// "health_check.http.expected_statuses[0]: start 300 >= end 200".
func (c *Config) Validate(field string) error {
	switch c.Type {
	case TypeTCP, TypeHTTP, TypeGRPC:
	case "":
		return fmt.Errorf("%s.type: missing (want tcp, http or grpc)", field)
	default:
		return fmt.Errorf("%s.type: %q is not one of tcp, http, grpc", field, c.Type)
	}
	// Ranges (healthcheck/README.md): an interval of 1us ran 23,000 probes
	// a second per host.
	for _, r := range []struct {
		name     string
		d        time.Duration
		min, max time.Duration
	}{
		{"interval", c.Interval.D(), MinInterval, MaxInterval},
		{"timeout", c.Timeout.D(), MinTimeout, MaxTimeout},
		{"jitter", c.Jitter.D(), 0, MaxInterval},
	} {
		if err := decode.CheckRange(field+"."+r.name, r.d, r.min, r.max); err != nil {
			return err
		}
	}
	if c.HealthyThreshold < 1 || c.HealthyThreshold > MaxThreshold {
		return fmt.Errorf("%s.healthy_threshold: %d is not in 1..%d", field, c.HealthyThreshold, MaxThreshold)
	}
	if c.UnhealthyThreshold < 1 || c.UnhealthyThreshold > MaxThreshold {
		return fmt.Errorf("%s.unhealthy_threshold: %d is not in 1..%d", field, c.UnhealthyThreshold, MaxThreshold)
	}
	switch c.InitialState {
	case InitialUnknown, InitialHealthy, InitialUnhealthy:
	case "":
		return fmt.Errorf("%s.initial_state: missing (want unknown, healthy or unhealthy)", field)
	default:
		return fmt.Errorf("%s.initial_state: %q is not one of unknown, healthy, unhealthy", field, c.InitialState)
	}
	if c.HTTP != nil && c.Type != TypeHTTP {
		return fmt.Errorf("%s.http: only allowed with type http (type is %s)", field, c.Type)
	}
	if c.GRPC != nil && c.Type != TypeGRPC {
		return fmt.Errorf("%s.grpc: only allowed with type grpc (type is %s)", field, c.Type)
	}
	if c.Type == TypeHTTP {
		if c.HTTP == nil {
			return fmt.Errorf("%s.http: missing", field)
		}
		if err := c.HTTP.validate(field + ".http"); err != nil {
			return err
		}
	}
	if c.Type == TypeGRPC && c.GRPC != nil {
		if err := checkToken(c.GRPC.ServiceName, true); err != nil {
			return fmt.Errorf("%s.grpc.service_name: %v", field, err)
		}
		if err := checkToken(c.GRPC.Authority, false); err != nil {
			return fmt.Errorf("%s.grpc.authority: %v", field, err)
		}
		if strings.Contains(c.GRPC.Authority, "@") {
			return fmt.Errorf("%s.grpc.authority: user information (user:password@) is not supported (the value is not shown)", field)
		}
	}
	return nil
}

func (h *HTTPConfig) validate(field string) error {
	if h.Path == "" {
		return fmt.Errorf("%s.path: missing", field)
	}
	if !strings.HasPrefix(h.Path, "/") {
		return fmt.Errorf("%s.path: %q does not start with /", field, h.Path)
	}
	if err := checkToken(h.Path, false); err != nil {
		return fmt.Errorf("%s.path: %v", field, err)
	}
	if err := checkToken(h.Host, false); err != nil {
		return fmt.Errorf("%s.host: %v", field, err)
	}
	if strings.Contains(h.Host, "@") {
		return fmt.Errorf("%s.host: user information (user:password@) is not supported (the value is not shown)", field)
	}
	if len(h.ExpectedStatuses) == 0 {
		return fmt.Errorf("%s.expected_statuses: empty", field)
	}
	for i, r := range h.ExpectedStatuses {
		f := fmt.Sprintf("%s.expected_statuses[%d]", field, i)
		if r.Start >= r.End {
			return fmt.Errorf("%s: start %d >= end %d (ranges are half-open: [start, end))", f, r.Start, r.End)
		}
		if r.Start < 100 || r.End > 600 {
			return fmt.Errorf("%s: [%d, %d) is outside the HTTP status codes [100, 600)", f, r.Start, r.End)
		}
	}
	return nil
}

// checkToken rejects whitespace and control characters (they would break a
// request line or header, or are typos).
func checkToken(s string, spacesOK bool) error {
	for _, r := range s {
		if r < ' ' || r == 0x7f || (!spacesOK && r == ' ') {
			return fmt.Errorf("%q contains whitespace or control characters", s)
		}
	}
	return nil
}

// statusOK reports whether code is in one of the ranges.
func (h *HTTPConfig) statusOK(code int) bool {
	for _, r := range h.ExpectedStatuses {
		if int64(code) >= r.Start && int64(code) < r.End {
			return true
		}
	}
	return false
}

// canonical is a stable, unambiguous string form of a normalized config:
// two checks with the same canonical form probe the same way and share one
// probe stream per address:port.
func (c Config) canonical() string {
	var b strings.Builder
	b.WriteString(c.Type)
	switch {
	case c.Type == TypeHTTP && c.HTTP != nil:
		b.WriteString(" GET ")
		b.WriteString(strconv.Quote(c.HTTP.Path))
		if c.HTTP.Host != "" {
			b.WriteString(" host=")
			b.WriteString(strconv.Quote(c.HTTP.Host))
		}
		b.WriteString(" status=")
		for i, r := range c.HTTP.ExpectedStatuses {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "[%d,%d)", r.Start, r.End)
		}
	case c.Type == TypeGRPC && c.GRPC != nil:
		b.WriteString(" service=")
		b.WriteString(strconv.Quote(c.GRPC.ServiceName))
		if c.GRPC.Authority != "" {
			b.WriteString(" authority=")
			b.WriteString(strconv.Quote(c.GRPC.Authority))
		}
	}
	if c.Type != TypeTCP && !c.reuse() {
		b.WriteString(" reuse_connection=false")
	}
	fmt.Fprintf(&b, " every=%s jitter=%s timeout=%s healthy=%d unhealthy=%d initial=%s",
		c.Interval.D(), c.Jitter.D(), c.Timeout.D(), c.HealthyThreshold, c.UnhealthyThreshold, c.InitialState)
	return b.String()
}

// reuse reports whether connections are kept between probes (default true).
func (c *Config) reuse() bool { return c.ReuseConnection == nil || *c.ReuseConnection }
