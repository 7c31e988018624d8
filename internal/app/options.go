package app

import (
	"fmt"
	"time"

	"github.com/xdsbridge/xdsbridge/bridge"
	"github.com/xdsbridge/xdsbridge/config"
	"github.com/xdsbridge/xdsbridge/config/decode"
	"github.com/xdsbridge/xdsbridge/fileout"
	"github.com/xdsbridge/xdsbridge/translate"
	"github.com/xdsbridge/xdsbridge/xds"
)

// The config package reads the file; the packages that use a block own
// its defaults and ranges (translate.Limits, xds.Limits, xds.RESTOptions,
// fileout.Config, bridge.DebounceDefaults, ...). This file maps each block
// to its package's options, and back.

// Defaults of xds.rest.eds_config (the REST api_config_source written
// into clusters; xds.RESTEDS takes them as they are).
const (
	defaultRESTRefreshDelay = time.Second
	// restRequestTimeoutMargin is added to max_wait for the default
	// request_timeout.
	restRequestTimeoutMargin = 5 * time.Second
)

// ResolveOptions fills in c the defaults of the blocks whose options
// belong to another package, and checks each with that package's rules;
// New, Check and a reload call it first. Errors name the field, and its
// line and column in the config file. The config then holds what runs: a
// reload compares two configs field by field (needsRestart), so an absent
// field and its default written out are the same.
func ResolveOptions(c *config.Config) error {
	if err := resolve(c); err != nil {
		return c.ErrorAt(nil, err, err)
	}
	return nil
}

func resolve(c *config.Config) error {
	quiet, maxHold := bridge.DebounceDefaults(c.Debounce.Quiet.D(), c.Debounce.Max.D())
	c.Debounce.Quiet, c.Debounce.Max = decode.Duration(quiet), decode.Duration(maxHold)
	if maxHold < quiet {
		return fmt.Errorf("debounce.max (%s) is shorter than debounce.quiet (%s)", maxHold, quiet)
	}
	l := translate.Limits(c.Limits).WithDefaults()
	if err := l.Check(); err != nil {
		return fmt.Errorf("limits.%w", err)
	}
	c.Limits = config.Limits(l)
	xl := xds.Limits(c.XDS.Limits).WithDefaults()
	if err := xl.Check(); err != nil {
		return fmt.Errorf("xds.limits.%w", err)
	}
	c.XDS.Limits = config.XDSLimits(xl)
	if a := authorizationOptions(c.XDS.Authorization); a != nil {
		if err := a.Check(); err != nil {
			return fmt.Errorf("xds.authorization.%w", err)
		}
	}
	if c.Egress != nil {
		e := egressOptions(c.Egress).WithDefaults()
		if err := e.Check(); err != nil {
			return fmt.Errorf("egress.%w", err)
		}
		c.Egress = egressConfig(e)
	}
	if f := c.Outputs.Filesystem; f != nil {
		fo := fileout.Config(*f).WithDefaults()
		if err := fo.Check(); err != nil {
			return fmt.Errorf("outputs.filesystem.%w", err)
		}
		*f = config.Filesystem(fo)
	}
	if r := c.XDS.REST; r != nil {
		return resolveREST(r)
	}
	return nil
}

// resolveREST fills in xds.rest's defaults (xds.RESTOptions.WithDefaults,
// and eds_config's) and checks its ranges.
func resolveREST(r *config.REST) error {
	o := restOptions(r).WithDefaults()
	r.MaxWait, r.MaxBodyBytes, r.MaxHeldPolls = decode.Duration(o.MaxWait), int(o.MaxBodyBytes), o.MaxHeldPolls
	r.MaxHeldNames, r.MaxHeldNameBytes = o.MaxHeldNames, int(o.MaxHeldNameBytes)
	if e := r.EDSConfig; e != nil {
		if e.RefreshDelay == 0 {
			e.RefreshDelay = decode.Duration(defaultRESTRefreshDelay)
		}
		if e.RequestTimeout == 0 {
			e.RequestTimeout = r.MaxWait + decode.Duration(restRequestTimeoutMargin)
		}
	}
	if err := decode.CheckRange("xds.rest.max_wait", r.MaxWait.D(), time.Millisecond, xds.MaxRESTMaxWait); err != nil {
		return err
	}
	for _, n := range []struct {
		field    string
		v        int
		min, max int
	}{
		{"xds.rest.max_body_bytes", r.MaxBodyBytes, xds.MinRESTMaxBodyBytes, xds.MaxRESTMaxBodyBytes},
		{"xds.rest.max_held_polls", r.MaxHeldPolls, 1, xds.MaxRESTMaxHeldPolls},
		{"xds.rest.max_held_names", r.MaxHeldNames, 1, xds.MaxRESTMaxHeldNames},
		{"xds.rest.max_held_name_bytes", r.MaxHeldNameBytes, xds.MinRESTMaxHeldNameBytes, xds.MaxRESTMaxHeldNameBytes},
	} {
		if err := decode.CheckCount(n.field, n.v, n.min, n.max); err != nil {
			return err
		}
	}
	e := r.EDSConfig
	if e == nil {
		return nil
	}
	if err := decode.CheckRange("xds.rest.eds_config.refresh_delay", e.RefreshDelay.D(), time.Millisecond, time.Hour); err != nil {
		return err
	}
	if err := decode.CheckRange("xds.rest.eds_config.request_timeout", e.RequestTimeout.D(), time.Millisecond, time.Hour); err != nil {
		return err
	}
	if e.RequestTimeout <= r.MaxWait {
		return fmt.Errorf("xds.rest.eds_config.request_timeout (%s) is not longer than xds.rest.max_wait (%s): Envoy would give up on every held poll", e.RequestTimeout.D(), r.MaxWait.D())
	}
	return nil
}

// restOptions is xds.rest as the REST handler's options; zero fields are
// their defaults.
func restOptions(r *config.REST) xds.RESTOptions {
	o := xds.RESTOptions{MaxWait: r.MaxWait.D(), MaxBodyBytes: int64(r.MaxBodyBytes), MaxHeldPolls: r.MaxHeldPolls, MaxHeldNames: r.MaxHeldNames, MaxHeldNameBytes: int64(r.MaxHeldNameBytes)}
	if e := r.EDSConfig; e != nil {
		o.EDS = &xds.RESTEDS{ClusterName: e.ClusterName, RefreshDelay: e.RefreshDelay.D(), RequestTimeout: e.RequestTimeout.D()}
	}
	return o
}

// authorizationOptions is xds.authorization as the server's; nil when
// absent.
func authorizationOptions(a *config.Authorization) *xds.Authorization {
	if a == nil {
		return nil
	}
	out := &xds.Authorization{Allow: make([]xds.AuthRule, len(a.Allow))}
	for i, r := range a.Allow {
		out.Allow[i] = xds.AuthRule(r)
	}
	return out
}

// egressOptions is the egress block as the merge loop's option; nil when
// absent.
func egressOptions(e *config.Egress) *translate.Egress {
	if e == nil {
		return nil
	}
	return &translate.Egress{
		RouteConfigName: e.RouteConfigName,
		Listener:        (*translate.EgressListener)(e.Listener),
		DomainSuffixes:  e.DomainSuffixes,
		Include:         translate.EgressInclude(e.Include),
		Fallback:        e.Fallback,
	}
}

// egressConfig is egressOptions backwards.
func egressConfig(e translate.Egress) *config.Egress {
	return &config.Egress{
		RouteConfigName: e.RouteConfigName,
		Listener:        (*config.EgressListener)(e.Listener),
		DomainSuffixes:  e.DomainSuffixes,
		Include:         config.EgressInclude(e.Include),
		Fallback:        e.Fallback,
	}
}
