// Package config is the bridge's configuration file: its schema, and the
// defaults and checks of the file's own fields. The blocks whose options
// belong to another package (blocks.go, xds.rest, debounce) take that
// package's defaults and ranges through the app (internal/app/options.go):
// config imports no package of the bridge but config/decode. It is
// decoded with config/decode (unknown and miscased keys are errors naming
// the field); every source's block is decoded by that source's own factory
// with the same strictness (decode.JSONStrict).
package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/xdsbridge/xdsbridge/config/decode"
)

// Config is the whole configuration file.
type Config struct {
	XDS      XDS      `json:"xds"`
	Admin    Admin    `json:"admin"`
	Debounce Debounce `json:"debounce"`
	Logging  Logging  `json:"logging"`
	Sources  []Source `json:"sources"`
	// HealthChecks configures active health checking per service.
	HealthChecks HealthChecks `json:"health_checks"`
	// DefaultLocality is the locality of endpoints that have none, for
	// sources that do not set their own. Zero: an empty locality.
	DefaultLocality Locality `json:"default_locality"`
	// Limits bound what one service's resources may carry (see
	// translate.Limits for each field, its default and its range; 0 or
	// absent is the default).
	Limits Limits `json:"limits"`
	// Outputs are deliveries besides the xDS server (config/outputs.go).
	Outputs Outputs `json:"outputs"`
	// Egress, when set, serves Envoys a route table with a virtual host
	// per published service, and optionally a listener routed by it
	// (translate.Egress for each field). Absent: neither is served.
	Egress *Egress `json:"egress"`
	// MemoryLimit is the Go runtime's soft memory limit: "auto" or absent
	// (90 % of the container's cgroup memory limit, none without one),
	// "off", or a size ("512MiB", bytes); GOMEMLIMIT in the environment
	// wins. See internal/memlimit.
	MemoryLimit string `json:"memory_limit"`
	// BaseDir is the directory the config was read from (relative paths in
	// source configs are relative to it). Not part of the file.
	BaseDir string `json:"-"`
	// File is the path the config was loaded from, "" when parsed from
	// memory: errors found after parsing (a source's block, a health
	// check) name the file, and the line and column in it. Not part of
	// the file.
	File string `json:"-"`
}

// ErrorAt returns err naming the config file and the line and column of
// the field it is about (decode.Locate), the field's path in the file
// being prefix and then the path err names. err is the text that follows.
// The file is read again for the line (errors are rare, and a config
// holding its own text would differ from an equal one read elsewhere).
func (c *Config) ErrorAt(prefix []string, about, err error) error {
	var line, col int
	if c.File != "" {
		if data, rerr := os.ReadFile(c.File); rerr == nil {
			line, col = decode.Locate(data, prefix, about)
		}
	}
	switch {
	case line > 0 && c.File != "":
		return fmt.Errorf("%s: line %d, column %d: %w", c.File, line, col, err)
	case line > 0:
		return fmt.Errorf("line %d, column %d: %w", line, col, err)
	case c.File != "":
		return fmt.Errorf("%s: %w", c.File, err)
	}
	return err
}

// HealthChecks configures active health checking (see healthcheck/README.md).
// Check blocks are decoded by healthcheck.ParseConfig.
type HealthChecks struct {
	// Services maps a service name to its check; it overrides the check of
	// the service's source (a source entry's health_check).
	Services map[string]json.RawMessage `json:"services"`
	// MaxRetention bounds how long a host absent from discovery but passing
	// its check keeps being served; 0 (default) keeps it while it passes.
	MaxRetention decode.Duration `json:"max_retention"`
	// Workers bounds concurrent probes; 0 (default) sizes the bound from
	// the checks (healthcheck.Options.Workers).
	Workers int `json:"workers"`
	// HDS shares the probing of HTTP and TCP checks among the Envoys that
	// connect as HDS checkers (hds/README.md).
	HDS HDS `json:"hds"`
}

// HDS configures the Health Discovery Service the bridge serves on its
// xDS listener (health_checks.hds). Zero fields are their defaults.
type HDS struct {
	// Enabled serves HDS and routes HTTP and TCP checks to the connected
	// checkers (default false: the bridge probes everything itself).
	Enabled bool `json:"enabled"`
	// K is how many checkers probe each target (default 2, 1..MaxHDSK).
	K int `json:"k"`
	// Rule merges the checkers' reports: majority (default), any, all.
	Rule string `json:"rule"`
	// ReportInterval is how often checkers report (default 5s).
	ReportInterval decode.Duration `json:"report_interval"`
	// Silence: a checker that sends no report this long loses its targets
	// (default 3 × report_interval; longer than report_interval).
	Silence decode.Duration `json:"silence"`
	// Fallback is what happens to a target no connected checker can take
	// (none connected, or a gRPC check): local (default, the bridge probes
	// it) or source (it is not probed; its source's health stands).
	Fallback string `json:"fallback"`
}

// HDS fallbacks (health_checks.hds.fallback).
const (
	HDSFallbackLocal  = "local"
	HDSFallbackSource = "source"
)

// Locality is where endpoints run, as Envoy's core.v3.Locality. Every
// field may be empty.
type Locality struct {
	Region  string `json:"region,omitempty"`
	Zone    string `json:"zone,omitempty"`
	SubZone string `json:"sub_zone,omitempty"`
}

// XDS configures the xDS gRPC listener.
type XDS struct {
	Listen string `json:"listen" want:"host:port"`
	// TLS, when set, serves xDS over TLS (mTLS with client_ca_file).
	// Absent: plaintext.
	TLS *TLS `json:"tls"`
	// Authorization, when set, allows only clients whose verified
	// certificate matches a rule, and limits what each may read. It needs
	// tls.client_ca_file.
	Authorization *Authorization `json:"authorization"`
	// Limits bound what one client can make the server hold or do (see
	// xds.Limits for each field, its default and its range).
	Limits XDSLimits `json:"limits"`
	// Keepalive is the server's HTTP/2 keepalive (see xds.Keepalive).
	Keepalive Keepalive `json:"keepalive"`
	// GRPCCertificateProvider names the certificate provider instance
	// (a key of certificate_providers in gRPC clients' bootstrap) that
	// clusters with upstream TLS name for gRPC clients to verify the
	// hosts with (translate.Options.GRPCCertificateProvider,
	// translate/POLICY.md). Absent: none, and gRPC clients NACK those
	// clusters. Given, it is a name without whitespace or control
	// characters.
	GRPCCertificateProvider *string `json:"grpc_certificate_provider"`
	// REST, when set, serves REST-JSON polling on a listener of its own
	// (rest.go); absent: not served.
	REST *REST `json:"rest"`
}

// CertificateProvider is xds.grpc_certificate_provider, "" when absent.
func (x XDS) CertificateProvider() string {
	if x.GRPCCertificateProvider == nil {
		return ""
	}
	return *x.GRPCCertificateProvider
}

// Keepalive is xds.Keepalive as written in the file; 0 or absent is the
// default (30s, 10s, 5s).
type Keepalive struct {
	Time    decode.Duration `json:"time"`
	Timeout decode.Duration `json:"timeout"`
	MinTime decode.Duration `json:"min_time"`
}

// TLS configures a listener's TLS. The files are PEM; they are read at
// start (an unreadable or invalid file is an error naming the field) and
// again whenever they change on disk, without dropping connections: a
// change that does not load is logged and counted, and the last good
// certificate stays in use.
type TLS struct {
	// CertFile and KeyFile are the server's certificate chain and key.
	CertFile string `json:"cert_file"`
	KeyFile  string `json:"key_file"`
	// ClientCAFile, when set, turns on mTLS: a client must present a
	// certificate that chains to one of these CAs, or the handshake fails.
	ClientCAFile string `json:"client_ca_file"`
	// ReloadInterval is how often the files are checked for change
	// (default 10s; 100ms..1h).
	ReloadInterval decode.Duration `json:"reload_interval"`
	// MinVersion is the lowest TLS version accepted: "1.2" (default) or
	// "1.3".
	MinVersion string `json:"min_version"`
}

// Defaults and ranges of TLS.
const (
	DefaultTLSReloadInterval = 10 * time.Second
	MinTLSReloadInterval     = 100 * time.Millisecond
	MaxTLSReloadInterval     = time.Hour
)

// Path resolves a file path of the config against its directory.
func (c *Config) Path(p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(c.BaseDir, p)
}

func (t *TLS) applyDefaults() {
	if t == nil {
		return
	}
	if t.ReloadInterval == 0 {
		t.ReloadInterval = decode.Duration(DefaultTLSReloadInterval)
	}
	if t.MinVersion == "" {
		t.MinVersion = "1.2"
	}
}

func (t *TLS) check(field string) error {
	if t == nil {
		return nil
	}
	if t.CertFile == "" || t.KeyFile == "" {
		return fmt.Errorf("%s.cert_file, %s.key_file: both are needed", field, field)
	}
	switch t.MinVersion {
	case "1.2", "1.3":
	default:
		return fmt.Errorf("%s.min_version: %q is not one of 1.2, 1.3", field, t.MinVersion)
	}
	return decode.CheckRange(field+".reload_interval", t.ReloadInterval.D(), MinTLSReloadInterval, MaxTLSReloadInterval)
}

// Admin configures the admin HTTP listener (/healthz, /readyz, /metrics, /debug/...).
type Admin struct {
	Listen string `json:"listen" want:"host:port"`
	// Timeouts of the admin HTTP server; 0 or absent: the default (see
	// internal/app: 5s, 10s, 30s, 60s, 5s).
	ReadHeaderTimeout decode.Duration `json:"read_header_timeout"`
	ReadTimeout       decode.Duration `json:"read_timeout"`
	WriteTimeout      decode.Duration `json:"write_timeout"`
	IdleTimeout       decode.Duration `json:"idle_timeout"`
	// ShutdownTimeout is how long a shutdown waits for requests in flight
	// before it closes their connections.
	ShutdownTimeout decode.Duration `json:"shutdown_timeout"`
	// TLS, when set, serves the admin listener over TLS (mTLS with
	// client_ca_file: then every path needs a client certificate,
	// probes included).
	TLS *TLS `json:"tls"`
	// TokenFile, when set, is a file holding a bearer token that /debug/*
	// requests must carry (Authorization: Bearer <token>). /healthz,
	// /readyz and /metrics stay open. The file is re-read when it changes;
	// the token is never logged.
	TokenFile string `json:"token_file"`
}

// Debounce configures how the merge loop batches bursts of source events.
type Debounce struct {
	// Quiet is how long the loop waits after the last event before it
	// publishes, when the event follows a publish within Quiet; a change
	// after a quiet period is published at once (default 50ms).
	Quiet decode.Duration `json:"quiet"`
	// Max is the longest an event waits while events keep coming (default
	// 500ms, or Quiet if longer: bridge.DebounceDefaults).
	Max decode.Duration `json:"max"`
}

// Logging configures log/slog.
type Logging struct {
	Format string `json:"format"` // text (default) or json
	Level  string `json:"level"`  // debug, info (default), warn, error
}

// Source is one entry of `sources`: a name and exactly one type block, e.g.
//
//   - name: static
//     file: {path: services.yaml}
type Source struct {
	Name string
	Type string
	// Raw is the type block, decoded by the source's factory.
	Raw json.RawMessage
	// HealthCheck is the optional `health_check:` block: the active check
	// of every host of this source (healthcheck.ParseConfig decodes it).
	HealthCheck json.RawMessage
	// DefaultLocality is the optional `default_locality:` block: the
	// locality of this source's endpoints that have none, instead of the
	// top-level default_locality. Nil when not given.
	DefaultLocality *Locality
	// Priority is the optional `priority:` (default 0, MinPriority..
	// MaxPriority): of two sources publishing one service name, the one
	// with the higher priority owns it; on equal priorities, the one
	// listed first.
	Priority int
}

// Range of a source entry's priority.
const (
	MinPriority = -1000
	MaxPriority = 1000
)

// Priorities maps each source with a priority other than 0 to it.
func (c *Config) Priorities() map[string]int {
	out := map[string]int{}
	for _, s := range c.Sources {
		if s.Priority != 0 {
			out[s.Name] = s.Priority
		}
	}
	return out
}

// Locality returns the default locality of the source's endpoints: its
// own if given, else the config's.
func (c *Config) Locality(source Source) Locality {
	if source.DefaultLocality != nil {
		return *source.DefaultLocality
	}
	return c.DefaultLocality
}

// UnmarshalJSON splits the entry into its name and its single type block.
func (s *Source) UnmarshalJSON(b []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("expected a mapping with a name and one source type (e.g. {name: static, file: {path: services.yaml}}), got %s", decode.Describe(b))
	}
	if n, ok := m["name"]; ok {
		if err := json.Unmarshal(n, &s.Name); err != nil {
			return &decode.Error{Path: []string{"name"}, Msg: "expected a string, got " + decode.Describe(n)}
		}
		delete(m, "name")
	}
	if hc, ok := m["health_check"]; ok {
		s.HealthCheck = hc
		delete(m, "health_check")
	}
	if dl, ok := m["default_locality"]; ok {
		s.DefaultLocality = &Locality{}
		if err := decode.JSONStrict(dl, s.DefaultLocality); err != nil {
			return decode.Under(err, "default_locality")
		}
		delete(m, "default_locality")
	}
	if p, ok := m["priority"]; ok {
		if err := json.Unmarshal(p, &s.Priority); err != nil {
			return fmt.Errorf("priority: want a whole number in %d..%d, not %s", MinPriority, MaxPriority, p)
		}
		if s.Priority < MinPriority || s.Priority > MaxPriority {
			return fmt.Errorf("priority: %d is not in %d..%d", s.Priority, MinPriority, MaxPriority)
		}
		delete(m, "priority")
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	switch len(keys) {
	case 0:
		return errors.New("no source type given (expected one source type key, e.g. file:)")
	case 1:
		s.Type, s.Raw = keys[0], m[keys[0]]
		return nil
	default:
		return fmt.Errorf("more than one source type given (%s): one entry takes exactly one", strings.Join(keys, ", "))
	}
}

// MarshalJSON writes the entry back in the file's form.
func (s Source) MarshalJSON() ([]byte, error) {
	m := map[string]any{"name": s.Name, s.Type: s.Raw}
	if len(s.HealthCheck) > 0 {
		m["health_check"] = s.HealthCheck
	}
	if s.DefaultLocality != nil {
		m["default_locality"] = s.DefaultLocality
	}
	if s.Priority != 0 {
		m["priority"] = s.Priority
	}
	return json.Marshal(m)
}

// Defaults.
const (
	DefaultXDSListen   = "127.0.0.1:18000"
	DefaultAdminListen = "127.0.0.1:18001"
)

// Ranges, checked at load (README, "Bad input and limits").
const (
	MinDebounce      = time.Millisecond
	MaxDebounceQuiet = 5 * time.Second  // the bridge is unready until the first publish
	MaxDebounceMax   = 30 * time.Second // an event waits at most this long
	MaxRetention     = 7 * 24 * time.Hour
	MaxWorkers       = 4096 // health_checks.workers; 0 is the default (automatic)
	// health_checks.hds: k and the report interval's range.
	DefaultHDSK              = 2
	MaxHDSK                  = 16
	DefaultHDSReportInterval = 5 * time.Second
	MinHDSReportInterval     = 50 * time.Millisecond
	MaxHDSReportInterval     = 10 * time.Minute
	MaxHDSSilence            = time.Hour
)

// Parse reads a config document (YAML or JSON). baseDir is recorded for
// relative paths. knownTypes lists the source types that exist.
func Parse(data []byte, baseDir string, knownTypes []string) (*Config, error) {
	var c Config
	if err := decode.Strict(data, &c); err != nil {
		return nil, err
	}
	c.BaseDir = baseDir
	c.applyDefaults()
	if err := c.validate(knownTypes); err != nil {
		if line, col := decode.Locate(data, nil, err); line > 0 {
			return nil, fmt.Errorf("line %d, column %d: %w", line, col, err)
		}
		return nil, err
	}
	return &c, nil
}

// Load reads and parses the config file at path.
func Load(path string, knownTypes []string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	c, err := Parse(data, filepath.Dir(abs), knownTypes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	c.File = path
	return c, nil
}

func (c *Config) applyDefaults() {
	if c.XDS.Listen == "" {
		c.XDS.Listen = DefaultXDSListen
	}
	if c.Admin.Listen == "" {
		c.Admin.Listen = DefaultAdminListen
	}
	if c.Logging.Format == "" {
		c.Logging.Format = "text"
	}
	if c.Logging.Level == "" {
		c.Logging.Level = "info"
	}
	h := &c.HealthChecks.HDS
	if h.K == 0 {
		h.K = DefaultHDSK
	}
	if h.Rule == "" {
		h.Rule = "majority"
	}
	if h.ReportInterval == 0 {
		h.ReportInterval = decode.Duration(DefaultHDSReportInterval)
	}
	if h.Silence == 0 {
		h.Silence = 3 * h.ReportInterval
	}
	if h.Fallback == "" {
		h.Fallback = HDSFallbackLocal
	}
	c.XDS.TLS.applyDefaults()
	c.Admin.TLS.applyDefaults()
	if c.XDS.REST != nil {
		c.XDS.REST.TLS.applyDefaults()
	}
}

func (c *Config) validate(knownTypes []string) error {
	switch c.Logging.Format {
	case "text", "json":
	default:
		return fmt.Errorf("logging.format: %q is not one of text, json", c.Logging.Format)
	}
	switch strings.ToLower(c.Logging.Level) {
	case "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("logging.level: %q is not one of debug, info, warn, error", c.Logging.Level)
	}
	if err := c.XDS.TLS.check("xds.tls"); err != nil {
		return err
	}
	if err := c.Admin.TLS.check("admin.tls"); err != nil {
		return err
	}
	if c.XDS.Authorization != nil && (c.XDS.TLS == nil || c.XDS.TLS.ClientCAFile == "") {
		return errors.New("xds.authorization: needs xds.tls.client_ca_file (clients are authorized by their verified certificate)")
	}
	if p := c.XDS.GRPCCertificateProvider; p != nil {
		if err := checkProviderName(*p); err != nil {
			return fmt.Errorf("xds.grpc_certificate_provider: %w", err)
		}
	}
	for _, l := range []struct{ field, addr string }{{"xds.listen", c.XDS.Listen}, {"admin.listen", c.Admin.Listen}} {
		if err := checkListen(l.addr); err != nil {
			return fmt.Errorf("%s: %w", l.field, err)
		}
	}
	if c.XDS.Listen == c.Admin.Listen && !strings.HasSuffix(c.XDS.Listen, ":0") {
		return fmt.Errorf("admin.listen: %q is also xds.listen", c.Admin.Listen)
	}
	if err := c.XDS.REST.check(c); err != nil {
		return err
	}
	for _, r := range []struct {
		field    string
		d        decode.Duration
		min, max time.Duration
	}{
		{"health_checks.max_retention", c.HealthChecks.MaxRetention, 0, MaxRetention},
		{"xds.keepalive.time", c.XDS.Keepalive.Time, 0, 24 * time.Hour},
		{"xds.keepalive.timeout", c.XDS.Keepalive.Timeout, 0, time.Hour},
		{"xds.keepalive.min_time", c.XDS.Keepalive.MinTime, 0, time.Hour},
	} {
		if err := decode.CheckRange(r.field, r.d.D(), r.min, r.max); err != nil {
			return err
		}
	}
	// A debounce of 0 is the merge loop's default (bridge.DebounceDefaults);
	// the app checks max against quiet once the defaults are in.
	for _, r := range []struct {
		field    string
		d        decode.Duration
		min, max time.Duration
	}{
		{"debounce.quiet", c.Debounce.Quiet, MinDebounce, MaxDebounceQuiet},
		{"debounce.max", c.Debounce.Max, MinDebounce, MaxDebounceMax},
	} {
		if r.d == 0 {
			continue
		}
		if err := decode.CheckRange(r.field, r.d.D(), r.min, r.max); err != nil {
			return err
		}
	}
	if err := decode.CheckCount("health_checks.workers", c.HealthChecks.Workers, 0, MaxWorkers); err != nil {
		return err
	}
	if err := c.HealthChecks.HDS.check(); err != nil {
		return err
	}
	if len(c.Sources) == 0 {
		return errors.New("sources: at least one source is needed")
	}
	seen := map[string]bool{}
	for i, s := range c.Sources {
		if s.Name == "" {
			return fmt.Errorf("sources[%d].name: missing", i)
		}
		// The name is in logs, metrics, errors and the status page.
		if strings.IndexFunc(s.Name, func(r rune) bool { return !strconv.IsPrint(r) || r == utf8.RuneError }) >= 0 {
			return fmt.Errorf("sources[%d].name: %q: expected a name without control characters", i, s.Name)
		}
		if seen[s.Name] {
			return fmt.Errorf("sources[%d].name: %q used twice", i, s.Name)
		}
		seen[s.Name] = true
		known := false
		for _, t := range knownTypes {
			known = known || t == s.Type
		}
		if !known {
			hint := ""
			if m := decode.Suggest(s.Type, knownTypes); m != "" {
				hint = fmt.Sprintf("did you mean %q? ", m)
			}
			return fmt.Errorf("sources[%d] (%s): unknown source type %q (%sknown: %s)", i, s.Name, s.Type, hint, strings.Join(knownTypes, ", "))
		}
	}
	return nil
}

// checkProviderName checks a certificate provider instance name: not
// empty, no whitespace or control characters (it is a key of gRPC
// clients' bootstrap, and sent as is in every cluster with TLS).
func checkProviderName(name string) error {
	if name == "" {
		return errors.New("empty (leave the field out for none)")
	}
	for _, r := range name {
		if unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return fmt.Errorf("%q: want a name without whitespace or control characters", name)
		}
	}
	return nil
}

// checkListen checks a listen address as net.Listen("tcp") would take it,
// short of binding: host:port, the host empty, an IP address or a name,
// the port a number in 0..65535.
func checkListen(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("expected host:port (e.g. \"127.0.0.1:18000\", \":18000\"), got %q", addr)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || strconv.FormatUint(p, 10) != port {
		return fmt.Errorf("%q: port %q is not a number in 0..65535", addr, port)
	}
	if strings.ContainsAny(host, "@/ ") {
		return fmt.Errorf("%q: %q is not an IP address or host name", addr, host)
	}
	return nil
}

func (h *HDS) check() error {
	if err := decode.CheckCount("health_checks.hds.k", h.K, 1, MaxHDSK); err != nil {
		return err
	}
	switch h.Rule {
	case "majority", "any", "all":
	default:
		return fmt.Errorf("health_checks.hds.rule: %q is not one of majority, any, all", h.Rule)
	}
	switch h.Fallback {
	case HDSFallbackLocal, HDSFallbackSource:
	default:
		return fmt.Errorf("health_checks.hds.fallback: %q is not one of local, source", h.Fallback)
	}
	if err := decode.CheckRange("health_checks.hds.report_interval", h.ReportInterval.D(), MinHDSReportInterval, MaxHDSReportInterval); err != nil {
		return err
	}
	if err := decode.CheckRange("health_checks.hds.silence", h.Silence.D(), MinHDSReportInterval, MaxHDSSilence); err != nil {
		return err
	}
	if h.Silence <= h.ReportInterval {
		return fmt.Errorf("health_checks.hds.silence: %s is not longer than health_checks.hds.report_interval (%s): every checker would go silent between its reports", h.Silence.D(), h.ReportInterval.D())
	}
	return nil
}
