package app

import (
	"fmt"
	"log/slog"
	"sort"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xdsbridge/xdsbridge/config"
	"github.com/xdsbridge/xdsbridge/config/decode"
	"github.com/xdsbridge/xdsbridge/healthcheck"
	"github.com/xdsbridge/xdsbridge/internal/certs"
	"github.com/xdsbridge/xdsbridge/internal/memlimit"
	"github.com/xdsbridge/xdsbridge/policy"
	"github.com/xdsbridge/xdsbridge/sources"
)

// checked is what reading the config builds, short of connecting to a
// registry, listening or writing: New goes on from it, Check stops there.
type checked struct {
	srcs             []sources.Source
	perSource        map[string]healthcheck.Config
	perService       map[string]healthcheck.Config
	xdsTLS, adminTLS *certs.Watcher
	restTLS          *certs.Watcher
	token            *AdminToken
	warnings         []string
	// sourceMetrics holds each source's collectors, registered on the
	// registry check was given (none without one).
	sourceMetrics map[string]*sourceMetrics
}

// check reads and checks everything the config names, as New needs it:
// the blocks other packages own (ResolveOptions fills in their defaults in
// c), every source's block and the files it reads (services and policy
// files, Consul's token and TLS files), the health checks, the TLS files
// of the xDS, REST and admin listeners, the admin token file and
// memory_limit. Errors name the config file, line and column where they
// can. Metrics register on reg when it is not nil.
func check(c *config.Config, log *slog.Logger, reg prometheus.Registerer) (*checked, error) {
	if err := ResolveOptions(c); err != nil {
		return nil, err
	}
	if _, err := memlimit.Parse(c.MemoryLimit); err != nil {
		return nil, c.ErrorAt(nil, err, err)
	}
	k := &checked{sourceMetrics: map[string]*sourceMetrics{}}
	srcs, conflicts, err := buildSources(c, log, func(name string) prometheus.Registerer {
		if reg == nil {
			return nil
		}
		m := &sourceMetrics{reg: reg}
		k.sourceMetrics[name] = m
		return m
	})
	if err != nil {
		return nil, err
	}
	k.srcs = srcs
	if k.perSource, k.perService, err = healthChecksFromConfig(c); err != nil {
		return nil, c.ErrorAt(nil, err, err)
	}
	if k.xdsTLS, k.adminTLS, err = BuildTLS(c, log, reg); err != nil {
		return nil, c.ErrorAt(nil, err, err)
	}
	if rc := c.XDS.REST; rc != nil && rc.TLS != nil {
		opts := certs.Options{Logger: log, Metrics: reg, NextProtos: []string{"h2", "http/1.1"}}
		if k.restTLS, err = certs.New(c, rc.TLS, "xds.rest.tls", opts); err != nil {
			return nil, c.ErrorAt(nil, err, err)
		}
	}
	if k.token, err = AdminTokenFromConfig(c, log, reg); err != nil {
		return nil, c.ErrorAt(nil, err, err)
	}
	k.warnings = append(configWarnings(srcs), conflicts...)
	return k, nil
}

// Check checks the config as run does, short of connecting to a registry,
// listening or writing (the shared check of New), and returns the
// warnings run logs at start.
func Check(c *config.Config, log *slog.Logger) (warnings []string, err error) {
	k, err := check(c, log, nil)
	if err != nil {
		return nil, err
	}
	return k.warnings, nil
}

// warner is a source with something to say about its config that is not
// an error (a file that does not exist yet).
type warner interface {
	ConfigWarnings() []string
}

// policyFiler is a source that publishes a policy file it can read before
// running (the policy_file source).
type policyFiler interface {
	PolicyFile() (f *policy.File, data []byte, path string, err error)
}

// configWarnings are what the config asks for that is allowed but likely not
// meant: each source's own (a services file that does not exist yet), and
// a policy for a service name no static source (services files, DNS)
// publishes, with the closest name that one does. With a source whose
// names are known only at run time (Consul), such a policy is reported
// only when a published name is close to it.
func configWarnings(srcs []sources.Source) []string {
	var out []string
	type policyFile struct {
		i    int
		f    *policy.File
		data []byte
		path string
	}
	var files []policyFile
	for i, s := range srcs {
		if w, ok := s.(warner); ok {
			for _, msg := range w.ConfigWarnings() {
				out = append(out, fmt.Sprintf("sources[%d] (%s): %s", i, s.Name(), msg))
			}
		}
		if pf, ok := s.(policyFiler); ok {
			if f, data, path, err := pf.PolicyFile(); err == nil && f != nil {
				files = append(files, policyFile{i, f, data, path})
			}
		}
	}
	if len(files) == 0 {
		return out
	}
	// The sources' files are read again for their names: only when a
	// policy file needs them.
	static := map[string]bool{}
	var dynamic []string
	for _, s := range srcs {
		sc, ok := s.(sources.StaticClaimer)
		if !ok {
			dynamic = append(dynamic, s.Name())
			continue
		}
		names, err := sc.ClaimedNames()
		if err != nil {
			continue // BuildSources reported it
		}
		for _, n := range names {
			static[n] = true
		}
	}
	known := make([]string, 0, len(static))
	for n := range static {
		known = append(known, n)
	}
	sort.Strings(known)
	for _, pf := range files {
		name := srcs[pf.i].Name()
		for _, k := range decode.Keys(pf.data, "services") {
			if _, ok := pf.f.Services[k.Name]; !ok || policy.IsPattern(k.Name) || static[k.Name] {
				continue
			}
			near := decode.Suggest(k.Name, known)
			if len(dynamic) > 0 && near == "" {
				continue
			}
			what := fmt.Sprintf("no source publishes service %q", k.Name)
			if len(dynamic) > 0 {
				what = fmt.Sprintf("no services file or DNS source publishes service %q (it may come from source %s)", k.Name, strings.Join(dynamic, ", "))
			}
			msg := fmt.Sprintf("sources[%d] (%s): %s: line %d, column %d: %s: %s", pf.i, name, pf.path, k.Line, k.Column, decode.FieldPath([]string{"services", k.Name}), what)
			if near != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", near)
			}
			out = append(out, msg)
		}
	}
	return out
}
