// Package app assembles the bridge from its config: sources, the merge loop,
// the xDS cache and server, and the admin HTTP server. The binary and the
// end-to-end tests both use it.
package app

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc/credentials"

	"github.com/xdsbridge/xdsbridge/bridge"
	"github.com/xdsbridge/xdsbridge/config"
	"github.com/xdsbridge/xdsbridge/fileout"
	"github.com/xdsbridge/xdsbridge/hds"
	"github.com/xdsbridge/xdsbridge/healthcheck"
	"github.com/xdsbridge/xdsbridge/internal/buildinfo"
	"github.com/xdsbridge/xdsbridge/internal/certs"
	promreg "github.com/xdsbridge/xdsbridge/internal/metrics"
	"github.com/xdsbridge/xdsbridge/sources"
	"github.com/xdsbridge/xdsbridge/translate"
	"github.com/xdsbridge/xdsbridge/xds"
)

// App is one configured bridge.
type App struct {
	Config   *config.Config
	Log      *slog.Logger
	Registry *prometheus.Registry
	// Sources are the sources built at start; a reload replaces them
	// (activeSources).
	Sources []sources.Source
	Loop    *bridge.Loop
	Cache   *xds.Cache
	XDS     *xds.Server
	// Checks is nil when no health check is configured.
	Checks *healthcheck.Manager
	// HDS serves Envoy's Health Discovery Service on the xDS listener
	// (health_checks.hds); nil when not enabled.
	HDS *hds.Server
	// XDSTLS and AdminTLS hold the listeners' certificates; nil for a
	// plaintext listener.
	XDSTLS, AdminTLS *certs.Watcher
	// Token guards /debug/* (admin.token_file); nil when not configured.
	Token *AdminToken
	// Files is the filesystem output (outputs.filesystem); nil when not
	// configured.
	Files *fileout.Writer

	xdsLis, adminLis net.Listener

	// REST serves REST-JSON polling (xds.rest), on restLis, with RESTTLS
	// (rest.go); nil when not configured.
	REST    *xds.REST
	RESTTLS *certs.Watcher
	restLis net.Listener

	// status is the status page's sampler (status.go).
	status statusOnce

	// LoadConfig reads the config again for a reload (reload.go); nil:
	// reloads are refused.
	LoadConfig func() (*config.Config, error)
	// running is the source instances once Run started them (sources.go).
	running runningSources
	// reloadMu serializes reloads; applied is the config last applied
	// (Config at start), under it.
	reloadMu sync.Mutex
	applied  *config.Config
	reloads  reloadState
}

// NewLogger builds the slog logger the config asks for.
func NewLogger(c config.Logging, w io.Writer) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(strings.ToUpper(c.Level)))
	opts := &slog.HandlerOptions{Level: lvl}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// BuildSources constructs every configured source; errors name the source
// entry (and the file, line and column where they can).
func BuildSources(c *config.Config, log *slog.Logger, reg prometheus.Registerer) ([]sources.Source, error) {
	srcs, _, err := buildSources(c, log, func(string) prometheus.Registerer { return reg })
	return srcs, err
}

// buildSources is BuildSources with each source's metrics registered on
// regFor(its name); it also returns the conflicts among the names the
// sources know up front (staticConflicts), as warnings.
func buildSources(c *config.Config, log *slog.Logger, regFor func(name string) prometheus.Registerer) ([]sources.Source, []string, error) {
	var out []sources.Source
	for i := range c.Sources {
		src, err := buildSource(c, i, log, regFor(c.Sources[i].Name))
		if err != nil {
			return nil, nil, err
		}
		out = append(out, src)
	}
	conflicts, err := staticConflicts(c, out)
	if err != nil {
		return nil, nil, c.ErrorAt(nil, err, err)
	}
	return out, conflicts, nil
}

// buildSource constructs the source of entry i of c.Sources; errors name
// the entry.
func buildSource(c *config.Config, i int, log *slog.Logger, reg prometheus.Registerer) (sources.Source, error) {
	sc := c.Sources[i]
	f, ok := SourceType(sc.Type)
	if !ok {
		return nil, fmt.Errorf("sources[%d] (%s): unknown source type %q (want one of %s)", i, sc.Name, sc.Type, strings.Join(SourceTypeNames(), ", "))
	}
	src, err := f(sc.Name, sc.Raw, sources.Env{BaseDir: c.BaseDir, Logger: log, Metrics: reg})
	if err != nil {
		return nil, c.ErrorAt([]string{"sources", fmt.Sprintf("[%d]", i), sc.Type}, err, fmt.Errorf("sources[%d] (%s).%s: %w", i, sc.Name, sc.Type, err))
	}
	return src, nil
}

// staticConflicts describes, one line each, the service names that more
// than one source publishes as far as their configs and files tell before
// running, and which source owns each (priority, then config order); then
// those that more than one policy file names, and whose policy is used.
func staticConflicts(c *config.Config, srcs []sources.Source) ([]string, error) {
	prio := c.Priorities()
	conflicts, err := sources.StaticConflicts(srcs, prio)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, cf := range conflicts {
		why := "listed first in sources"
		if prio[cf.Sources[0]] != prio[cf.Sources[1]] {
			why = fmt.Sprintf("priority %d", prio[cf.Sources[0]])
		}
		out = append(out, fmt.Sprintf("service %q is published by sources %s: %q owns it (%s)", cf.Service, strings.Join(quoteAll(cf.Sources), ", "), cf.Sources[0], why))
	}
	policies, err := sources.StaticPolicyConflicts(srcs)
	if err != nil {
		return nil, err
	}
	for _, cf := range policies {
		out = append(out, fmt.Sprintf("service %q is given a policy by sources %s: the policy of %q is used (listed first in sources)", cf.Service, strings.Join(quoteAll(cf.Sources), ", "), cf.Sources[0]))
	}
	return out, nil
}

func quoteAll(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = fmt.Sprintf("%q", v)
	}
	return out
}

// DefaultLocalities maps each source to the locality of its endpoints that
// have none: its own default_locality, else the config's.
func DefaultLocalities(c *config.Config) map[string]sources.Locality {
	out := make(map[string]sources.Locality, len(c.Sources))
	for _, sc := range c.Sources {
		l := c.Locality(sc)
		out[sc.Name] = sources.Locality{Region: l.Region, Zone: l.Zone, SubZone: l.SubZone}
	}
	return out
}

// BuildTLS loads the TLS files of the xDS and admin listeners (xds.tls,
// admin.tls); a listener without TLS gets nil. Errors name the field.
func BuildTLS(c *config.Config, log *slog.Logger, reg prometheus.Registerer) (xdsTLS, adminTLS *certs.Watcher, err error) {
	if c.XDS.TLS != nil {
		if xdsTLS, err = certs.New(c, c.XDS.TLS, "xds.tls", certs.Options{Logger: log, Metrics: reg}); err != nil {
			return nil, nil, err
		}
	}
	if c.Admin.TLS != nil {
		opts := certs.Options{Logger: log, Metrics: reg, NextProtos: []string{"h2", "http/1.1"}}
		if adminTLS, err = certs.New(c, c.Admin.TLS, "admin.tls", opts); err != nil {
			return nil, nil, err
		}
	}
	return xdsTLS, adminTLS, nil
}

// ServicesAndPolicy names the sources that publish services and a policy
// (sources.PolicyPublisher): the merge loop counts each synced only once it
// has published both.
func ServicesAndPolicy(srcs []sources.Source) []string {
	var out []string
	for _, s := range srcs {
		if pp, ok := s.(sources.PolicyPublisher); ok && pp.PublishesPolicy() {
			out = append(out, s.Name())
		}
	}
	return out
}

// New builds the bridge. It starts nothing and listens on nothing.
func New(c *config.Config, log *slog.Logger) (*App, error) {
	reg := prometheus.NewRegistry()
	if err := promreg.Register(reg, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, err
	}
	if err := promreg.Register(reg, buildInfoGauge(buildinfo.Get())); err != nil {
		return nil, err
	}
	if err := ApplyMemoryLimit(c, log, reg); err != nil {
		return nil, err
	}
	k, err := check(c, log, reg)
	if err != nil {
		return nil, err
	}
	for _, w := range k.warnings {
		log.Warn("config: " + w)
	}
	warnings := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "xdsbridge_config_warnings",
		Help: "Warnings of the config at start (logged at WARN, printed by validate): a services or policy file that does not exist yet, a policy for a service no static source publishes, a service name two sources publish.",
	})
	warnings.Set(float64(len(k.warnings)))
	if err := promreg.Register(reg, warnings); err != nil {
		return nil, err
	}
	srcs, perSource, perService, xdsTLS, adminTLS, token := k.srcs, k.perSource, k.perService, k.xdsTLS, k.adminTLS, k.token
	names := make([]string, len(srcs))
	for i, s := range srcs {
		names[i] = s.Name()
	}
	xopts := xds.Options{Logger: log, Metrics: reg, Authorization: authorizationOptions(c.XDS.Authorization), Limits: xds.Limits(c.XDS.Limits), Keepalive: xds.Keepalive{
		Time: c.XDS.Keepalive.Time.D(), Timeout: c.XDS.Keepalive.Timeout.D(), MinTime: c.XDS.Keepalive.MinTime.D(),
	}}
	if xdsTLS != nil {
		xopts.Creds = credentials.NewTLS(xdsTLS.ServerConfig())
		if xdsTLS.MTLS() {
			// Each stream open verifies its client's chain again, against
			// the client CA bundle as it is then.
			xopts.VerifyClient = xdsTLS.VerifyClient
		}
	}
	hdsSrv, fallback, err := buildHDS(c.HealthChecks.HDS, log, reg)
	if err != nil {
		return nil, err
	}
	if hdsSrv != nil {
		xopts.Services = hdsSrv.Register
	}
	var checks *healthcheck.Manager
	opts := bridge.Options{
		Sources:           names,
		Priority:          c.Priorities(),
		ServicesAndPolicy: ServicesAndPolicy(srcs),
		Quiet:             c.Debounce.Quiet.D(),
		MaxHold:           c.Debounce.Max.D(),
		Logger:            log,
		Metrics:           reg,
		MaxRetention:      c.HealthChecks.MaxRetention.D(),
		DefaultLocality:   DefaultLocalities(c),
		Limits:            translate.Limits(c.Limits),
		Egress:            egressOptions(c.Egress),
	}
	opts.GRPCCertificateProvider = c.XDS.CertificateProvider()
	if len(perSource)+len(perService) > 0 {
		checker := healthcheck.NewChecker(healthcheck.Options{Workers: c.HealthChecks.Workers, Logger: log, Metrics: reg})
		checks = healthcheck.NewManager(checker, perSource, perService)
		if hdsSrv != nil {
			checks.UseRemote(hdsSrv, fallback)
		}
		opts.HealthChecks = checks
	}
	cache, xs := xds.NewServing(xds.ServingConfig{Options: xopts})
	if e := opts.Egress; e != nil && e.VHDS {
		if err := cache.ServeVHDS(xds.VHDSOptions{RouteConfigName: e.RouteConfigName, Split: e.VHDSSplit, Metrics: reg}); err != nil {
			return nil, err
		}
	}
	if err := promreg.Register(reg, &syncStates{clients: xs.ClientStatuses, now: time.Now}); err != nil {
		return nil, err
	}
	loop := bridge.New(opts, cache)
	var files *fileout.Writer
	if fc := c.Outputs.Filesystem; fc != nil {
		cfc := *fc
		cfc.Dir = c.Path(fc.Dir)
		if files, err = fileout.New(cache, fileout.Config(cfc), log); err != nil {
			return nil, fmt.Errorf("outputs.filesystem.%w", err)
		}
		files.Register(reg)
	}
	a := &App{
		running:  runningSources{built: k.sourceMetrics},
		applied:  c,
		Files:    files,
		Token:    token,
		Checks:   checks,
		HDS:      hdsSrv,
		Config:   c,
		Log:      log,
		Registry: reg,
		Sources:  srcs,
		Loop:     loop,
		Cache:    cache,
		XDS:      xs,
		XDSTLS:   xdsTLS,
		AdminTLS: adminTLS,
		RESTTLS:  k.restTLS,
	}
	if err := a.buildREST(); err != nil {
		return nil, err
	}
	if err := a.reloads.init(reg, time.Now()); err != nil {
		return nil, err
	}
	return a, nil
}

// Listen binds the xDS and admin listeners (so tests can use port 0 and ask
// for the addresses before Run).
func (a *App) Listen() error {
	var err error
	if a.xdsLis, err = net.Listen("tcp", a.Config.XDS.Listen); err != nil {
		return fmt.Errorf("xds.listen: %w", err)
	}
	if a.adminLis, err = net.Listen("tcp", a.Config.Admin.Listen); err != nil {
		a.xdsLis.Close()
		return fmt.Errorf("admin.listen: %w", err)
	}
	if err := a.listenREST(); err != nil {
		a.xdsLis.Close()
		a.adminLis.Close()
		return err
	}
	return nil
}

// XDSAddr is the bound xDS address (after Listen).
func (a *App) XDSAddr() string { return a.xdsLis.Addr().String() }

// AdminAddr is the bound admin address (after Listen).
func (a *App) AdminAddr() string { return a.adminLis.Addr().String() }

// Run runs every part under one errgroup until ctx is done or a part fails.
// It calls Listen first if needed.
func (a *App) Run(ctx context.Context) error {
	if a.xdsLis == nil {
		if err := a.Listen(); err != nil {
			return err
		}
	}
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return a.Loop.Run(ctx) })
	if a.Checks != nil {
		g.Go(func() error { return a.Checks.Run(ctx, a.Loop.ChecksChanged) })
	} else if a.HDS != nil {
		// No check configured: the checkers that connect are given
		// nothing, but are served.
		g.Go(func() error { return a.HDS.Run(ctx) })
	}
	g.Go(func() error { return a.runSources(ctx) })
	for _, w := range []*certs.Watcher{a.XDSTLS, a.AdminTLS} {
		if w != nil {
			g.Go(func() error { return w.Run(ctx) })
		}
	}
	g.Go(func() error { return a.XDS.Run(ctx, a.xdsLis) })
	a.runREST(ctx, g)
	if a.Token != nil {
		g.Go(func() error { return a.Token.Run(ctx) })
	}
	if a.Files != nil {
		g.Go(func() error { return a.Files.Run(ctx) })
	}
	g.Go(func() error { return a.StatusSampler().Run(ctx) })
	srv := NewAdminServer(a.Config.Admin, a.AdminHandler())
	adminLis := a.adminLis
	if a.AdminTLS != nil {
		adminLis = tls.NewListener(adminLis, a.AdminTLS.ServerConfig())
		// Failed handshakes (scanners, plain-HTTP probes) are the
		// client's problem: logged at DEBUG, not on stderr.
		srv.ErrorLog = slog.NewLogLogger(a.Log.Handler(), slog.LevelDebug)
	}
	g.Go(func() error { return ServeAdmin(ctx, srv, adminLis, AdminTimeouts(a.Config.Admin).Shutdown, a.Log) })
	a.Log.Info("xdsbridge running", "xds", a.XDSAddr(), "admin", a.AdminAddr(), "sources", len(a.Sources))
	return g.Wait()
}

// buildInfoGauge is xdsbridge_build_info: 1, labelled with the running
// build.
func buildInfoGauge(in buildinfo.Info) prometheus.Collector {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "xdsbridge_build_info",
		Help: "Always 1; its labels name the running build: release version, commit (with -modified for a dirty work tree) and Go version.",
	}, []string{"version", "revision", "goversion"})
	g.WithLabelValues(in.Version, in.Commit(), in.GoVersion).Set(1)
	return g
}
