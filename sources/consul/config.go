package consul

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/xdsbridge/xdsbridge/config/decode"
	"github.com/xdsbridge/xdsbridge/sources"
)

// Config is the `consul:` block of a source entry. Every field is optional;
// README.md documents each with its default.
type Config struct {
	// Address of the Consul agent's HTTP API (host:port, or a URL with
	// http:// or https://). Overrides CONSUL_HTTP_ADDR.
	Address string `json:"address"`
	// Scheme is http or https. Overrides CONSUL_HTTP_SSL.
	Scheme string `json:"scheme"`
	// Token is an ACL token. Overrides CONSUL_HTTP_TOKEN. Never logged.
	Token string `json:"token"`
	// TokenFile is a file holding the ACL token, relative to the config
	// file. Overrides CONSUL_HTTP_TOKEN_FILE.
	TokenFile string `json:"token_file"`
	TLS       TLS    `json:"tls"`

	// Datacenter is the local datacenter (priority 0). Empty means the
	// agent's own.
	Datacenter string `json:"datacenter"`
	// FailoverDatacenters are watched too; their endpoints get priority 1,
	// 2, ... in this order.
	FailoverDatacenters []string `json:"failover_datacenters"`

	Services Selection `json:"services"`

	// Consistency is stale (default), default or consistent.
	Consistency string `json:"consistency"`
	// MaxStale is the largest X-Consul-LastContact a stale read may have;
	// staler results are read again with consistent mode (default 10s).
	MaxStale decode.Duration `json:"max_stale"`
	// UseCache serves reads from the agent's cache (?cached; with the
	// streaming backend for health queries). Not with consistency=consistent.
	UseCache bool `json:"use_cache"`

	// WaitTime is the blocking-query wait (default 5m, Consul's maximum 10m).
	WaitTime decode.Duration `json:"wait_time"`
	// MaxConcurrentQueries bounds the HTTP requests in flight to the agent,
	// and so its connections (default 64). When the selected services of all
	// datacenters outnumber it, service watches switch from holding blocking
	// queries to being woken by a datacenter-wide change feed (README).
	MaxConcurrentQueries int `json:"max_concurrent_queries"`
	// MaxConcurrentReads bounds, within MaxConcurrentQueries, the
	// requests in flight that do not block (the start-up reads, the reads
	// of changed services), and so the connections a burst of them opens
	// (default 16).
	MaxConcurrentReads int `json:"max_concurrent_reads"`
	// RateLimit is each watch's sustained queries per second (default 2)
	// and RateBurst its burst (default 5).
	RateLimit float64 `json:"rate_limit"`
	RateBurst int     `json:"rate_burst"`
	// FeedRateLimit is the sustained queries per second (burst the same) of
	// each datacenter's service-list watch and change feed (default 10):
	// one of each per datacenter, and they carry every service's changes.
	FeedRateLimit float64 `json:"feed_rate_limit"`
	// RetryMin and RetryMax bound the exponential backoff after errors
	// (defaults 500ms, 30s).
	RetryMin decode.Duration `json:"retry_min"`
	RetryMax decode.Duration `json:"retry_max"`
	// Coalesce is the shortest time between publishes (default 20ms, 0–1s):
	// a change after a quiet window is published at once, later ones batched.
	Coalesce decode.Duration `json:"coalesce"`
	// HintedRefresh is how often a service watch that waits for change
	// hints re-reads anyway (default 5m).
	HintedRefresh decode.Duration `json:"hinted_refresh"`
	// StaleAfter is how long the agent may go without answering before
	// the source is marked stale (default 10s, 1s..10m). A liveness probe
	// (GET /v1/status/leader on a connection of its own) runs every
	// quarter of it, so that a quiet registry is told from a hung agent.
	StaleAfter decode.Duration `json:"stale_after"`

	Mapping Mapping `json:"mapping"`

	// ConfigEntries also watches the service-defaults, service-router,
	// service-splitter and service-resolver config entries of the local
	// datacenter and publishes them as the traffic policy of the services
	// they name (README "Config entries").
	ConfigEntries bool `json:"config_entries"`
}

// TLS holds the client TLS settings; each overrides its CONSUL_* variable.
type TLS struct {
	CAFile             string `json:"ca_file"`     // CONSUL_CACERT
	CAPath             string `json:"ca_path"`     // CONSUL_CAPATH
	CertFile           string `json:"cert_file"`   // CONSUL_CLIENT_CERT
	KeyFile            string `json:"key_file"`    // CONSUL_CLIENT_KEY
	ServerName         string `json:"server_name"` // CONSUL_TLS_SERVER_NAME
	InsecureSkipVerify bool   `json:"insecure_skip_verify"`
}

// Selection chooses the services and instances to publish.
type Selection struct {
	// Include lists service names; an entry written /.../ is a regular
	// expression. Empty means all services.
	Include []string `json:"include"`
	// Exclude lists names or /regex/ removed from the included ones.
	Exclude []string `json:"exclude"`
	// IncludeTags keeps only instances with at least one of these tags.
	IncludeTags []string `json:"include_tags"`
	// ExcludeTags drops instances with any of these tags.
	ExcludeTags []string `json:"exclude_tags"`
	// Kinds lists service kinds published besides typical services, e.g.
	// connect-proxy, mesh-gateway, terminating-gateway, ingress-gateway,
	// api-gateway. Empty: instances with a Kind are skipped.
	Kinds []string `json:"kinds"`
}

// Mapping configures how Consul instances become endpoints.
type Mapping struct {
	// TaggedAddress picks a tagged address (lan, lan_ipv4, lan_ipv6, wan,
	// wan_ipv4, wan_ipv6) for the local datacenter, service's first, then
	// the node's; empty uses the service address, else the node address.
	TaggedAddress string `json:"tagged_address"`
	// FailoverTaggedAddress is the same for failover datacenters (default:
	// TaggedAddress).
	FailoverTaggedAddress string `json:"failover_tagged_address"`
	// ResolveHostnames resolves an address that is a hostname (default
	// true); false skips such instances with a warning.
	ResolveHostnames *bool `json:"resolve_hostnames"`
	// ResolveTimeout bounds one hostname lookup (default 2s).
	ResolveTimeout decode.Duration `json:"resolve_timeout"`
	// Warning is the status of an instance with a warning check and no
	// critical one: healthy (default, with Weights.Warning) or degraded.
	Warning string `json:"warning"`
	// ZoneMetaKey and SubZoneMetaKey are the node meta keys of the locality
	// zone and sub-zone (defaults "zone", "sub_zone").
	ZoneMetaKey    string `json:"zone_meta_key"`
	SubZoneMetaKey string `json:"sub_zone_meta_key"`
	// MetadataNamespace is the filter_metadata namespace of tags and meta
	// (default "consul").
	MetadataNamespace string `json:"metadata_namespace"`
	// ClusterName is the cluster name template with {service} and
	// {datacenter} (default "{service}").
	ClusterName string `json:"cluster_name"`
}

// settings is the validated, defaulted configuration the source runs with.
// It is immutable after New.
type settings struct {
	apiConfig     *api.Config
	tls           *tlsSettings
	localDC       string
	failoverDCs   []string
	sel           selector
	consistency   string
	maxStale      time.Duration
	useCache      bool
	waitTime      time.Duration
	staleAfter    time.Duration
	maxQueries    int
	maxReads      int
	rateLimit     float64
	rateBurst     int
	feedRate      float64
	retryMin      time.Duration
	retryMax      time.Duration
	coalesce      time.Duration
	hintedRefresh time.Duration
	mapping       mappingSettings
	configEntries bool
}

type mappingSettings struct {
	localTagged    string
	failoverTagged string
	resolve        bool
	resolveTimeout time.Duration
	warningDegr    bool
	zoneKey        string
	subZoneKey     string
	namespace      string
	clusterName    string
}

var taggedAddressKeys = []string{"lan", "lan_ipv4", "lan_ipv6", "wan", "wan_ipv4", "wan_ipv6"}

// parseConfig decodes and validates a config block. Reading the CONSUL_*
// environment happens here (api.DefaultConfig), and loading the TLS files
// (CA, client certificate and key); no other I/O.
func parseConfig(raw json.RawMessage, baseDir string) (*settings, error) {
	var c Config
	if err := decode.JSONStrict(raw, &c); err != nil {
		return nil, err
	}
	s := &settings{}
	var err error
	if s.apiConfig, err = c.apiConfig(baseDir); err != nil {
		return nil, err
	}
	if s.tls, err = loadTLS(c.TLS, s.apiConfig.TLSConfig); err != nil {
		return nil, err
	}
	if err := c.validateDatacenters(); err != nil {
		return nil, err
	}
	s.localDC, s.failoverDCs = c.Datacenter, c.FailoverDatacenters
	if s.sel, err = newSelector(c.Services); err != nil {
		return nil, err
	}
	if err := c.queryOptions(s); err != nil {
		return nil, err
	}
	if err := c.pacing(s); err != nil {
		return nil, err
	}
	if s.mapping, err = c.Mapping.settings(); err != nil {
		return nil, err
	}
	s.configEntries = c.ConfigEntries
	if s.configEntries && s.maxQueries < heldPerDC*(1+len(s.failoverDCs))+len(entryKinds)+1 {
		return nil, fmt.Errorf("max_concurrent_queries: %d leaves no query for service watches besides the lists, change feeds and %d config-entry watches", s.maxQueries, len(entryKinds))
	}
	if dcs := 1 + len(s.failoverDCs); s.maxQueries < heldPerDC*dcs+1 {
		return nil, fmt.Errorf("max_concurrent_queries: %d leaves no query for service reads besides the service lists and change feeds of %d datacenters (%d each); at least %d", s.maxQueries, dcs, heldPerDC, heldPerDC*dcs+1)
	}
	return s, nil
}

func (c *Config) apiConfig(baseDir string) (*api.Config, error) {
	ac := api.DefaultConfig() // reads CONSUL_HTTP_ADDR, CONSUL_HTTP_TOKEN, CONSUL_CACERT, ...
	if c.Address != "" {
		ac.Address = c.Address
	}
	switch c.Scheme {
	case "":
	case "http", "https":
		ac.Scheme = c.Scheme
	default:
		return nil, fmt.Errorf("scheme: %q is not one of http, https", c.Scheme)
	}
	if c.Token != "" && c.TokenFile != "" {
		return nil, fmt.Errorf("token, token_file: set one, not both")
	}
	if c.Token != "" {
		ac.Token, ac.TokenFile = c.Token, ""
	}
	if c.TokenFile != "" {
		ac.TokenFile = relPath(baseDir, c.TokenFile)
	}
	t := c.TLS
	if t.CAFile != "" {
		ac.TLSConfig.CAFile = relPath(baseDir, t.CAFile)
	}
	if t.CAPath != "" {
		ac.TLSConfig.CAPath = relPath(baseDir, t.CAPath)
	}
	if t.CertFile != "" {
		ac.TLSConfig.CertFile = relPath(baseDir, t.CertFile)
	}
	if t.KeyFile != "" {
		ac.TLSConfig.KeyFile = relPath(baseDir, t.KeyFile)
	}
	if (ac.TLSConfig.CertFile == "") != (ac.TLSConfig.KeyFile == "") {
		return nil, fmt.Errorf("tls.cert_file, tls.key_file: set both or neither (CONSUL_CLIENT_CERT/CONSUL_CLIENT_KEY count)")
	}
	if t.ServerName != "" {
		ac.TLSConfig.Address = t.ServerName
	}
	if t.InsecureSkipVerify {
		ac.TLSConfig.InsecureSkipVerify = true
	}
	if hasUserinfo(ac.Address) {
		// Not echoed: the address holds a password. The HTTP client would
		// take it as part of the host name, and it would show in logs,
		// /debug/sources and /readyz.
		field := "address"
		if c.Address == "" {
			field = "address (from CONSUL_HTTP_ADDR)"
		}
		return nil, fmt.Errorf("%s: user:password@ in the address is not supported (it is not shown here); give an ACL token with token or token_file", field)
	}
	if strings.HasPrefix(ac.Address, "unix://") {
		return nil, fmt.Errorf("address: unix sockets are not supported (the source needs its own bounded HTTP transport)")
	}
	addr, err := normalizeAddress(ac.Address)
	if err != nil {
		field := "address"
		if c.Address == "" {
			field = "address (from CONSUL_HTTP_ADDR)"
		}
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	ac.Address = addr
	if ac.TokenFile != "" {
		// Read as the API client reads it when the source starts; an
		// unreadable file is an error now, not when run connects.
		field := "token_file"
		if c.TokenFile == "" {
			field = "token_file (from CONSUL_HTTP_TOKEN_FILE)"
		}
		if _, err := os.ReadFile(ac.TokenFile); err != nil {
			return nil, fmt.Errorf("%s: %w", field, err)
		}
	}
	return ac, nil
}

// DefaultPort is the port of an address given without one: the Consul
// agent's HTTP port, as Consul's own clients assume.
const DefaultPort = "8500"

// normalizeAddress writes the agent's address as the API client takes it:
// a host without a port gets DefaultPort ("127.0.0.1" is
// "127.0.0.1:8500", "[::1]" and "::1" are "[::1]:8500"), and trailing
// slashes are dropped ("http://consul:8500/" would send every request to
// "//v1/...", a 404). A URL keeps its scheme and a path under which a
// reverse proxy serves the API ("https://gw.example/consul").
func normalizeAddress(addr string) (string, error) {
	scheme, rest, hasScheme := strings.Cut(addr, "://")
	if !hasScheme {
		scheme, rest = "", addr
	} else if scheme != "http" && scheme != "https" {
		return "", fmt.Errorf("%q: the scheme is not http or https", addr)
	}
	hostPort, path, _ := strings.Cut(rest, "/")
	path = strings.TrimRight(path, "/")
	if path != "" && !hasScheme {
		return "", fmt.Errorf("%q: an address with a path needs its scheme (e.g. \"http://%s/%s\")", addr, hostPort, path)
	}
	if hostPort == "" {
		return "", fmt.Errorf("%q: no host (expected host:port, e.g. \"127.0.0.1:8500\")", addr)
	}
	if _, port, err := net.SplitHostPort(hostPort); err == nil {
		if port == "" {
			hostPort += DefaultPort
		} else if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
			return "", fmt.Errorf("%q: port %q is not a number in 1..65535", addr, port)
		}
	} else {
		host := strings.TrimSuffix(strings.TrimPrefix(hostPort, "["), "]")
		if strings.ContainsAny(host, "[]") {
			return "", fmt.Errorf("%q is not host:port (e.g. \"127.0.0.1:8500\")", addr)
		}
		hostPort = net.JoinHostPort(host, DefaultPort)
	}
	out := hostPort
	if path != "" {
		out += "/" + path
	}
	if hasScheme {
		out = scheme + "://" + out
	}
	return out, nil
}

// hasUserinfo reports whether an address (host:port or a URL) carries
// user information (user@ or user:password@) before its host.
func hasUserinfo(addr string) bool {
	if _, rest, ok := strings.Cut(addr, "://"); ok {
		addr = rest
	}
	if i := strings.IndexAny(addr, "/?#"); i >= 0 {
		addr = addr[:i]
	}
	return strings.Contains(addr, "@")
}

func (c *Config) validateDatacenters() error {
	seen := map[string]bool{c.Datacenter: true}
	for i, dc := range c.FailoverDatacenters {
		if dc == "" {
			return fmt.Errorf("failover_datacenters[%d]: empty", i)
		}
		if seen[dc] {
			return fmt.Errorf("failover_datacenters[%d]: %q listed twice or equal to datacenter", i, dc)
		}
		seen[dc] = true
	}
	return nil
}

func (c *Config) queryOptions(s *settings) error {
	switch c.Consistency {
	case "", "stale":
		s.consistency = "stale"
	case "default", "consistent":
		s.consistency = c.Consistency
	default:
		return fmt.Errorf("consistency: %q is not one of stale, default, consistent", c.Consistency)
	}
	s.useCache = c.UseCache
	if s.useCache && s.consistency == "consistent" {
		return fmt.Errorf("use_cache: cannot be combined with consistency: consistent")
	}
	s.maxStale = orDefault(c.MaxStale.D(), 10*time.Second)
	if err := decode.CheckRange("max_stale", s.maxStale, 0, time.Hour); err != nil {
		return err
	}
	s.staleAfter = orDefault(c.StaleAfter.D(), DefaultStaleAfter)
	if err := decode.CheckRange("stale_after", s.staleAfter, time.Second, 10*time.Minute); err != nil {
		return err
	}
	s.waitTime = orDefault(c.WaitTime.D(), 5*time.Minute)
	if s.waitTime < 100*time.Millisecond || s.waitTime > 10*time.Minute {
		return fmt.Errorf("wait_time: %s is not within 100ms..10m", s.waitTime)
	}
	return nil
}

func (c *Config) pacing(s *settings) error {
	s.maxQueries = c.MaxConcurrentQueries
	if s.maxQueries == 0 {
		s.maxQueries = 64
	}
	if s.maxQueries < 4 || s.maxQueries > 150 {
		return fmt.Errorf("max_concurrent_queries: %d is not within 4..150 (the agent allows 200 connections per client)", s.maxQueries)
	}
	s.maxReads = c.MaxConcurrentReads
	if s.maxReads == 0 {
		s.maxReads = 16
	}
	if err := decode.CheckCount("max_concurrent_reads", s.maxReads, 1, 150); err != nil {
		return err
	}
	s.maxReads = min(s.maxReads, s.maxQueries)
	s.rateLimit = c.RateLimit
	if s.rateLimit == 0 {
		s.rateLimit = 2
	}
	if s.rateLimit < 0 {
		return fmt.Errorf("rate_limit: %v is negative", s.rateLimit)
	}
	s.rateBurst = c.RateBurst
	if s.rateBurst == 0 {
		s.rateBurst = 5
	}
	if s.rateBurst < 0 {
		return fmt.Errorf("rate_burst: %d is negative", s.rateBurst)
	}
	if err := decode.CheckCount("rate_burst", s.rateBurst, 1, 10000); err != nil {
		return err
	}
	s.feedRate = orDefault(c.FeedRateLimit, 10)
	if s.feedRate < 0 {
		return fmt.Errorf("feed_rate_limit: %v is negative", s.feedRate)
	}
	s.retryMin = orDefault(c.RetryMin.D(), 500*time.Millisecond)
	s.retryMax = orDefault(c.RetryMax.D(), 30*time.Second)
	if err := decode.CheckRange("retry_min", s.retryMin, time.Millisecond, time.Minute); err != nil {
		return err
	}
	if err := decode.CheckRange("retry_max", s.retryMax, time.Millisecond, time.Hour); err != nil {
		return err
	}
	if s.retryMax < s.retryMin {
		return fmt.Errorf("retry_max: %s is shorter than retry_min (%s)", s.retryMax, s.retryMin)
	}
	s.coalesce = orDefault(c.Coalesce.D(), 20*time.Millisecond)
	if s.coalesce > time.Second {
		return fmt.Errorf("coalesce: %s is longer than 1s", s.coalesce)
	}
	s.hintedRefresh = orDefault(c.HintedRefresh.D(), 5*time.Minute)
	if s.hintedRefresh < time.Second {
		return fmt.Errorf("hinted_refresh: %s is shorter than 1s", s.hintedRefresh)
	}
	if err := decode.CheckRange("hinted_refresh", s.hintedRefresh, time.Second, 24*time.Hour); err != nil {
		return err
	}
	return nil
}

func (m Mapping) settings() (mappingSettings, error) {
	out := mappingSettings{
		localTagged:    m.TaggedAddress,
		failoverTagged: m.FailoverTaggedAddress,
		resolve:        m.ResolveHostnames == nil || *m.ResolveHostnames,
		resolveTimeout: orDefault(m.ResolveTimeout.D(), 2*time.Second),
		zoneKey:        orDefault(m.ZoneMetaKey, "zone"),
		subZoneKey:     orDefault(m.SubZoneMetaKey, "sub_zone"),
		namespace:      orDefault(m.MetadataNamespace, "consul"),
		clusterName:    orDefault(m.ClusterName, "{service}"),
	}
	if err := decode.CheckRange("mapping.resolve_timeout", out.resolveTimeout, time.Millisecond, time.Minute); err != nil {
		return out, err
	}
	if out.failoverTagged == "" {
		out.failoverTagged = out.localTagged
	}
	for _, f := range []struct{ field, v string }{{"mapping.tagged_address", out.localTagged}, {"mapping.failover_tagged_address", out.failoverTagged}} {
		if f.v != "" && !slices.Contains(taggedAddressKeys, f.v) {
			return out, fmt.Errorf("%s: %q is not one of %s", f.field, f.v, strings.Join(taggedAddressKeys, ", "))
		}
	}
	switch m.Warning {
	case "", "healthy":
	case "degraded":
		out.warningDegr = true
	default:
		return out, fmt.Errorf("mapping.warning: %q is not one of healthy, degraded", m.Warning)
	}
	if !strings.Contains(out.clusterName, "{service}") {
		return out, fmt.Errorf("mapping.cluster_name: %q lacks {service}", out.clusterName)
	}
	rest := strings.NewReplacer("{service}", "", "{datacenter}", "").Replace(out.clusterName)
	if strings.ContainsAny(rest, "{}") {
		return out, fmt.Errorf("mapping.cluster_name: %q has a placeholder other than {service}, {datacenter}", out.clusterName)
	}
	if strings.Contains(rest, sources.DerivedNameSeparator) {
		return out, fmt.Errorf("mapping.cluster_name: %q holds %q, which only the names the bridge derives hold (a subset's cluster is <service>/<subset>)", out.clusterName, sources.DerivedNameSeparator)
	}
	if err := sources.ValidateServiceName("mapping.cluster_name", rest+"x"); err != nil {
		return out, err
	}
	return out, nil
}

// selector decides which services and instances are published. Immutable,
// safe for concurrent use.
type selector struct {
	include, exclude nameMatcher
	includeTags      []string
	excludeTags      []string
	kinds            []string
}

// nameMatcher matches exact names or regular expressions.
type nameMatcher struct {
	exact map[string]bool
	res   []*regexp.Regexp
}

func newNameMatcher(field string, entries []string) (nameMatcher, error) {
	m := nameMatcher{exact: map[string]bool{}}
	for i, e := range entries {
		if len(e) >= 2 && strings.HasPrefix(e, "/") && strings.HasSuffix(e, "/") {
			re, err := regexp.Compile(e[1 : len(e)-1])
			if err != nil {
				return m, fmt.Errorf("%s[%d]: bad regular expression: %v", field, i, err)
			}
			m.res = append(m.res, re)
			continue
		}
		if e == "" {
			return m, fmt.Errorf("%s[%d]: empty", field, i)
		}
		m.exact[e] = true
	}
	return m, nil
}

func (m nameMatcher) empty() bool { return len(m.exact) == 0 && len(m.res) == 0 }

func (m nameMatcher) match(name string) bool {
	if m.exact[name] {
		return true
	}
	for _, re := range m.res {
		if re.MatchString(name) {
			return true
		}
	}
	return false
}

var knownKinds = []string{"connect-proxy", "mesh-gateway", "terminating-gateway", "ingress-gateway", "api-gateway"}

func newSelector(c Selection) (selector, error) {
	var s selector
	var err error
	if s.include, err = newNameMatcher("services.include", c.Include); err != nil {
		return s, err
	}
	if s.exclude, err = newNameMatcher("services.exclude", c.Exclude); err != nil {
		return s, err
	}
	for i, k := range c.Kinds {
		if !slices.Contains(knownKinds, k) {
			return s, fmt.Errorf("services.kinds[%d]: %q is not one of %s", i, k, strings.Join(knownKinds, ", "))
		}
	}
	s.includeTags, s.excludeTags, s.kinds = c.IncludeTags, c.ExcludeTags, c.Kinds
	return s, nil
}

// service reports whether a service from the catalog list is watched, given
// the union of its instances' tags.
func (s selector) service(name string, tags []string) bool {
	if !s.include.empty() && !s.include.match(name) {
		return false
	}
	if s.exclude.match(name) {
		return false
	}
	return len(s.includeTags) == 0 || intersects(s.includeTags, tags)
}

// instance reports whether one instance is published.
func (s selector) instance(kind string, tags []string) bool {
	if kind != "" && !slices.Contains(s.kinds, kind) {
		return false
	}
	if len(s.includeTags) > 0 && !intersects(s.includeTags, tags) {
		return false
	}
	return !intersects(s.excludeTags, tags)
}

// tagReason says why instance drops an instance with these tags
// (instance returned false for a typical or listed kind).
func (s selector) tagReason(tags []string) string {
	for _, t := range s.excludeTags {
		if slices.Contains(tags, t) {
			return fmt.Sprintf("tag %q is in services.exclude_tags", t)
		}
	}
	return fmt.Sprintf("none of its tags %q is in services.include_tags %q", tags, s.includeTags)
}

func intersects(a, b []string) bool {
	for _, x := range a {
		if slices.Contains(b, x) {
			return true
		}
	}
	return false
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

func relPath(baseDir, p string) string {
	if p == "" || baseDir == "" || strings.HasPrefix(p, "/") {
		return p
	}
	return baseDir + "/" + p
}
