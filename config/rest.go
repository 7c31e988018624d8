package config

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/xdsbridge/xdsbridge/config/decode"
	"github.com/xdsbridge/xdsbridge/xds"
)

// REST configures REST-JSON polling (`xds.rest:`), served on a listener of
// its own; absent: not served. See xds.RESTOptions and the README section
// "REST-JSON polling".
type REST struct {
	// Listen is the HTTP listener's address (required).
	Listen string `json:"listen" want:"host:port"`
	// TLS, when set, serves it over TLS (mTLS with client_ca_file), the
	// files reloaded as the other listeners'.
	TLS *TLS `json:"tls"`
	// MaxWait is how long an up-to-date poll is held before it is answered
	// 304 Not Modified (default 10s; 1ms..60s).
	MaxWait decode.Duration `json:"max_wait"`
	// MaxBodyBytes bounds a request body (default 1 MiB; 1 KiB..64 MiB).
	MaxBodyBytes int `json:"max_body_bytes"`
	// MaxHeldPolls bounds the polls held at once (default 1024;
	// 1..1048576); an up-to-date poll over it is answered 304 at once.
	MaxHeldPolls int `json:"max_held_polls"`
	// MaxHeldNames bounds the resource names all held polls ask for
	// together (default 1048576; 1..67108864); MaxHeldNameBytes their
	// bytes (default 64 MiB; 1 KiB..4 GiB). An up-to-date poll that
	// would go over either is answered 304 at once.
	MaxHeldNames     int `json:"max_held_names"`
	MaxHeldNameBytes int `json:"max_held_name_bytes"`
	// EDSConfig, when set, is written as the eds_config of every cluster
	// served over REST: Envoy polls the cluster named for the assignments.
	// Absent: clusters keep their eds_config (ADS).
	EDSConfig *RESTEDSConfig `json:"eds_config"`
}

// RESTEDSConfig is the REST api_config_source of clusters served over REST.
type RESTEDSConfig struct {
	// ClusterName is the Envoy cluster (in its bootstrap) that reaches
	// xds.rest.listen (required).
	ClusterName string `json:"cluster_name"`
	// RefreshDelay is Envoy's delay between polls (default 1s; 1ms..1h).
	RefreshDelay decode.Duration `json:"refresh_delay"`
	// RequestTimeout is Envoy's poll timeout (default max_wait + 5s); it
	// must be longer than max_wait, or Envoy gives up on held polls.
	RequestTimeout decode.Duration `json:"request_timeout"`
}

// Defaults of REST.
const (
	DefaultRESTRefreshDelay = time.Second
	// RESTRequestTimeoutMargin is added to max_wait for the default
	// eds_config.request_timeout.
	RESTRequestTimeoutMargin = 5 * time.Second
)

func (r *REST) applyDefaults() {
	if r == nil {
		return
	}
	if r.MaxWait == 0 {
		r.MaxWait = decode.Duration(xds.DefaultRESTMaxWait)
	}
	if r.MaxBodyBytes == 0 {
		r.MaxBodyBytes = xds.DefaultRESTMaxBodyBytes
	}
	if r.MaxHeldPolls == 0 {
		r.MaxHeldPolls = xds.DefaultRESTMaxHeldPolls
	}
	if r.MaxHeldNames == 0 {
		r.MaxHeldNames = xds.DefaultRESTMaxHeldNames
	}
	if r.MaxHeldNameBytes == 0 {
		r.MaxHeldNameBytes = xds.DefaultRESTMaxHeldNameBytes
	}
	r.TLS.applyDefaults()
	if e := r.EDSConfig; e != nil {
		if e.RefreshDelay == 0 {
			e.RefreshDelay = decode.Duration(DefaultRESTRefreshDelay)
		}
		if e.RequestTimeout == 0 {
			e.RequestTimeout = r.MaxWait + decode.Duration(RESTRequestTimeoutMargin)
		}
	}
}

func (r *REST) check(c *Config) error {
	if r == nil {
		return nil
	}
	if r.Listen == "" {
		return errors.New("xds.rest.listen: missing (the REST listener's address, e.g. \"127.0.0.1:18002\")")
	}
	if err := checkListen(r.Listen); err != nil {
		return fmt.Errorf("xds.rest.listen: %w", err)
	}
	if !strings.HasSuffix(r.Listen, ":0") {
		for _, o := range []struct{ field, addr string }{{"xds.listen", c.XDS.Listen}, {"admin.listen", c.Admin.Listen}} {
			if r.Listen == o.addr {
				return fmt.Errorf("xds.rest.listen: %q is also %s", r.Listen, o.field)
			}
		}
	}
	if c.XDS.Authorization != nil {
		// A poll carries no stream whose certificate is checked and whose
		// reads are limited: served, it would hand every resource to any
		// client that reaches the port.
		return errors.New("xds.rest: not served with xds.authorization (REST polls are not authorized per client; serve restricted clients over gRPC only)")
	}
	if err := r.TLS.check("xds.rest.tls"); err != nil {
		return err
	}
	if err := decode.CheckRange("xds.rest.max_wait", r.MaxWait.D(), time.Millisecond, xds.MaxRESTMaxWait); err != nil {
		return err
	}
	if err := decode.CheckCount("xds.rest.max_body_bytes", r.MaxBodyBytes, xds.MinRESTMaxBodyBytes, xds.MaxRESTMaxBodyBytes); err != nil {
		return err
	}
	if err := decode.CheckCount("xds.rest.max_held_polls", r.MaxHeldPolls, 1, xds.MaxRESTMaxHeldPolls); err != nil {
		return err
	}
	if err := decode.CheckCount("xds.rest.max_held_names", r.MaxHeldNames, 1, xds.MaxRESTMaxHeldNames); err != nil {
		return err
	}
	if err := decode.CheckCount("xds.rest.max_held_name_bytes", r.MaxHeldNameBytes, xds.MinRESTMaxHeldNameBytes, xds.MaxRESTMaxHeldNameBytes); err != nil {
		return err
	}
	if e := r.EDSConfig; e != nil {
		if e.ClusterName == "" {
			return errors.New("xds.rest.eds_config.cluster_name: missing (the Envoy cluster that reaches xds.rest.listen)")
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
	}
	return nil
}

// Options returns the xds.RESTOptions of the config (after defaults).
func (r *REST) Options() xds.RESTOptions {
	o := xds.RESTOptions{MaxWait: r.MaxWait.D(), MaxBodyBytes: int64(r.MaxBodyBytes), MaxHeldPolls: r.MaxHeldPolls, MaxHeldNames: r.MaxHeldNames, MaxHeldNameBytes: int64(r.MaxHeldNameBytes)}
	if e := r.EDSConfig; e != nil {
		o.EDS = &xds.RESTEDS{ClusterName: e.ClusterName, RefreshDelay: e.RefreshDelay.D(), RequestTimeout: e.RequestTimeout.D()}
	}
	return o
}
