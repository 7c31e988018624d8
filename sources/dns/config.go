package dns

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/xdsbridge/xdsbridge/config/decode"
	"github.com/xdsbridge/xdsbridge/sources"
)

// Defaults.
const (
	DefaultTimeout        = 5 * time.Second
	DefaultMaxConcurrency = 64
	DefaultRefreshRate    = 5000 * time.Millisecond
	// minRefreshRate is Envoy's lower bound for the refresh rates (at least 1ms).
	minRefreshRate = time.Millisecond
	// maxRefreshRate bounds the refresh rates and the jitter.
	maxRefreshRate = 24 * time.Hour
	// maxConcurrency bounds max_concurrency.
	maxConcurrency = 1024
)

// Cluster discovery types, as Envoy names them.
const (
	TypeStrict  = "STRICT_DNS"
	TypeLogical = "LOGICAL_DNS"
)

// Family is a dns_lookup_family value.
type Family string

// Lookup families, as Envoy names them.
const (
	FamilyV4   Family = "V4_ONLY"
	FamilyV6   Family = "V6_ONLY"
	FamilyAuto Family = "AUTO"
	FamilyAll  Family = "ALL"
)

// Config is the `dns:` block of a source entry.
type Config struct {
	// Resolvers are "ip:port" (or "ip", port 53) servers; empty means the
	// nameservers of /etc/resolv.conf.
	Resolvers []string `json:"resolvers,omitempty"`
	// Timeout bounds one query to one server (default 5s, as c-ares).
	Timeout decode.Duration `json:"timeout,omitempty"`
	// MaxConcurrency bounds resolutions in flight across all names (default 64).
	MaxConcurrency int `json:"max_concurrency,omitempty"`
	// Services are the clusters this source owns.
	Services []ServiceConfig `json:"services"`
}

// ServiceConfig is one entry of `services`: one cluster fed by DNS names.
type ServiceConfig struct {
	Name string `json:"name"`
	// Type is STRICT_DNS (default) or LOGICAL_DNS.
	Type  string       `json:"type,omitempty"`
	Hosts []HostConfig `json:"hosts"`
	// DNSLookupFamily is V4_ONLY, V6_ONLY, AUTO (default, as Envoy) or ALL.
	DNSLookupFamily Family `json:"dns_lookup_family,omitempty"`
	// DNSRefreshRate is the refresh interval (default 5000ms). A pointer, so
	// that an explicit 0s is told from an absent field and refused.
	DNSRefreshRate *decode.Duration `json:"dns_refresh_rate,omitempty"`
	// DNSFailureRefreshRate is the retry interval after a failure (default:
	// DNSRefreshRate).
	DNSFailureRefreshRate *decode.Duration `json:"dns_failure_refresh_rate,omitempty"`
	// RespectDNSTTL makes record TTLs drive the refresh interval.
	RespectDNSTTL bool `json:"respect_dns_ttl,omitempty"`
	// DNSJitter delays each refresh by a random amount in [0, DNSJitter).
	// Default: a tenth of the interval being scheduled.
	DNSJitter *decode.Duration `json:"dns_jitter,omitempty"`
	// SRV makes each host name an SRV name; targets and ports come from the
	// SRV records.
	SRV bool `json:"srv,omitempty"`
}

// HostConfig is one DNS name of a service and the port its endpoints get.
type HostConfig struct {
	Name string `json:"name"`
	// Port is required unless the service is in SRV mode, where it must be unset.
	Port int `json:"port,omitempty"`
}

// parseConfig decodes and validates raw, filling in defaults.
func parseConfig(raw json.RawMessage) (*Config, error) {
	var c Config
	if err := decode.JSONStrict(raw, &c); err != nil {
		return nil, err
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	c.applyDefaults()
	return &c, nil
}

func (c *Config) applyDefaults() {
	if c.Timeout == 0 {
		c.Timeout = decode.Duration(DefaultTimeout)
	}
	if c.MaxConcurrency == 0 {
		c.MaxConcurrency = DefaultMaxConcurrency
	}
	for i := range c.Services {
		s := &c.Services[i]
		if s.Type == "" {
			s.Type = TypeStrict
		}
		if s.DNSLookupFamily == "" {
			s.DNSLookupFamily = FamilyAuto
		}
		if s.DNSRefreshRate == nil {
			d := decode.Duration(DefaultRefreshRate)
			s.DNSRefreshRate = &d
		}
		if s.DNSFailureRefreshRate == nil {
			d := *s.DNSRefreshRate
			s.DNSFailureRefreshRate = &d
		}
	}
}

func (c *Config) validate() error {
	for i, r := range c.Resolvers {
		if _, err := resolverAddr(r); err != nil {
			return fmt.Errorf("resolvers[%d]: %w", i, err)
		}
	}
	if c.MaxConcurrency < 0 {
		return fmt.Errorf("max_concurrency: %d is negative", c.MaxConcurrency)
	}
	// Ranges (README); 0 is the default.
	if c.Timeout != 0 {
		if err := decode.CheckRange("timeout", c.Timeout.D(), time.Millisecond, time.Minute); err != nil {
			return err
		}
	}
	if err := decode.CheckCount("max_concurrency", c.MaxConcurrency, 0, maxConcurrency); err != nil {
		return err
	}
	if len(c.Services) == 0 {
		return fmt.Errorf("services: none configured")
	}
	seen := make(map[string]int, len(c.Services))
	for i, s := range c.Services {
		field := fmt.Sprintf("services[%d]", i)
		if err := s.validate(field); err != nil {
			return err
		}
		if j, dup := seen[s.Name]; dup {
			return fmt.Errorf("%s.name: duplicate service %q (also services[%d])", field, s.Name, j)
		}
		seen[s.Name] = i
	}
	return nil
}

func (s ServiceConfig) validate(field string) error {
	if err := sources.ValidateServiceName(field+".name", s.Name); err != nil {
		return err
	}
	switch s.Type {
	case "", TypeStrict, TypeLogical:
	default:
		return fmt.Errorf("%s.type: unknown type %q (want %s or %s)", field, s.Type, TypeStrict, TypeLogical)
	}
	switch s.DNSLookupFamily {
	case "", FamilyV4, FamilyV6, FamilyAuto, FamilyAll:
	default:
		return fmt.Errorf("%s.dns_lookup_family: unknown family %q (want V4_ONLY, V6_ONLY, AUTO or ALL)", field, s.DNSLookupFamily)
	}
	// Absent means the default; a value given, 0s included, must be in range.
	for _, r := range []struct {
		name string
		d    *decode.Duration
	}{{"dns_refresh_rate", s.DNSRefreshRate}, {"dns_failure_refresh_rate", s.DNSFailureRefreshRate}} {
		if r.d == nil {
			continue
		}
		if err := decode.CheckRange(field+"."+r.name, r.d.D(), minRefreshRate, maxRefreshRate); err != nil {
			return err
		}
	}
	if s.DNSJitter != nil {
		if err := decode.CheckRange(field+".dns_jitter", s.DNSJitter.D(), 0, maxRefreshRate); err != nil {
			return err
		}
	}
	if len(s.Hosts) == 0 {
		return fmt.Errorf("%s.hosts: empty (want at least one DNS name)", field)
	}
	if s.Type == TypeLogical && len(s.Hosts) != 1 {
		return fmt.Errorf("%s.hosts: %s takes exactly one host (got %d)", field, TypeLogical, len(s.Hosts))
	}
	for j, h := range s.Hosts {
		if err := h.validate(fmt.Sprintf("%s.hosts[%d]", field, j), s.SRV); err != nil {
			return err
		}
	}
	return nil
}

func (h HostConfig) validate(field string, srv bool) error {
	if h.Name == "" {
		return fmt.Errorf("%s.name: empty", field)
	}
	if _, ok := mdns.IsDomainName(h.Name); !ok || strings.ContainsAny(h.Name, " \t\r\n") {
		return fmt.Errorf("%s.name: %q is not a valid DNS name", field, h.Name)
	}
	if srv {
		if h.Port != 0 {
			return fmt.Errorf("%s.port: must not be set in SRV mode (ports come from the SRV records)", field)
		}
		return nil
	}
	if h.Port < 1 || h.Port > 65535 {
		if h.Port == 0 {
			return fmt.Errorf("%s.port: missing", field)
		}
		return fmt.Errorf("%s.port: %d is not in 1..65535", field, h.Port)
	}
	return nil
}

// resolverAddr parses "ip", "ip:port" or "[ipv6]:port" into "ip:port".
func resolverAddr(s string) (string, error) {
	if strings.Contains(s, "@") {
		// Not echoed: it may hold a password.
		return "", errors.New("user information (user:password@) is not supported (the value is not shown); give ip or ip:port")
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		if ap.Port() == 0 {
			return "", fmt.Errorf("%q: port 0", s)
		}
		return ap.String(), nil
	}
	if a, err := netip.ParseAddr(strings.Trim(s, "[]")); err == nil {
		return net.JoinHostPort(a.String(), "53"), nil
	}
	return "", fmt.Errorf("%q is not an IP address or ip:port", s)
}
