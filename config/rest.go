package config

import (
	"errors"
	"fmt"
	"strings"

	"github.com/xdsbridge/xdsbridge/config/decode"
)

// REST configures REST-JSON polling (`xds.rest:`), served on a listener of
// its own; absent: not served. See xds.RESTOptions and the README section
// "REST-JSON polling". The app applies the defaults and checks the ranges
// of the limits and of eds_config (internal/app/options.go).
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
	if e := r.EDSConfig; e != nil && e.ClusterName == "" {
		return errors.New("xds.rest.eds_config.cluster_name: missing (the Envoy cluster that reaches xds.rest.listen)")
	}
	return nil
}
