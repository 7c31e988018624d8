// Command xdsbridge serves service registries to Envoy and gRPC clients over
// xDS (delta and state-of-the-world ADS).
//
//	xdsbridge [run] [-config FILE]  serve (run is the default; serve is an alias)
//	xdsbridge validate -config FILE check FILE, its sources' files and its TLS files
//	xdsbridge dump -config FILE     print the resources it would serve
//	xdsbridge dump -out DIR         write them as Envoy's files (outputs.filesystem layout)
//	xdsbridge status                each connected client's sync status (admin listener)
//	xdsbridge status -node N        that client's resources and versions
//	xdsbridge status hosts SERVICE  why each host of SERVICE is (not) served
//	xdsbridge status sources        each source, names two sources publish, the reload state
//	xdsbridge reload                reload a running bridge's config (as SIGHUP does)
//	xdsbridge healthcheck           exit 0 if a running bridge is ready (/readyz), else 1
//	xdsbridge version               the version, commit, commit date and Go version
//	xdsbridge help                  the commands and their flags
package main

import (
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/xdsbridge/xdsbridge/config"
	"github.com/xdsbridge/xdsbridge/config/decode"
	"github.com/xdsbridge/xdsbridge/fileout"
	"github.com/xdsbridge/xdsbridge/internal/app"
	"github.com/xdsbridge/xdsbridge/internal/buildinfo"
)

//go:embed default.yaml
var defaultConfig []byte

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "xdsbridge:", err)
		os.Exit(1)
	}
}

// commands are the subcommands, in the order help lists them.
var commands = []struct{ name, args, summary string }{
	{"run", "[-config FILE]", "serve xDS and the admin listener (the default command; serve is an alias)"},
	{"validate", "[-config FILE]", "check the config, its sources' files, its TLS files and admin token file, and exit"},
	{"dump", "[-config FILE] [-format yaml|json] [-out DIR]", "print the resources the config serves (or write Envoy's files), without serving"},
	{"status", "[-admin ADDR] [-node N] | hosts [SERVICE] | sources", "a running bridge's clients and their sync status (-node: one client's resources; hosts: why each host is served or not; sources: each source, the services two sources publish and the config reload state)"},
	{"reload", "[-admin ADDR] [-config FILE]", "make a running bridge read its config file again (as SIGHUP does) and print what it applied or why it refused it"},
	{"healthcheck", "[-config FILE] [-admin ADDR]", "GET /readyz of a running bridge's admin listener: exit 0 when ready, 1 otherwise (for container health checks)"},
	{"version", "", "print the version, commit, commit date, Go version and platform (also -version, --version)"},
}

// cmdFlags are the flags of every command; each command's flag set
// defines those it takes.
type cmdFlags struct {
	config, format, out, mode *string
	timeout                   *time.Duration
	status                    statusFlags
}

func newFlagSet(cmd string, stderr io.Writer) (*flag.FlagSet, *cmdFlags) {
	fs := flag.NewFlagSet("xdsbridge "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	f := &cmdFlags{}
	if cmd != "version" {
		f.config = fs.String("config", "", "config file (YAML or JSON); default: the embedded default (file source on examples/services.yaml)")
	}
	switch cmd {
	case "dump":
		f.format = fs.String("format", "yaml", "output format, yaml or json")
		f.timeout = fs.Duration("timeout", 30*time.Second, "how long to wait for every source's first sync")
		f.out = fs.String("out", "", "write the files of outputs.filesystem into this directory, once, instead of printing (-format yaml, json or proto)")
		f.mode = fs.String("mode", "", "with -out: path or watched_directory (default: outputs.filesystem.mode, else path)")
	case "status", "reload":
		f.status.define(fs)
	case "healthcheck":
		f.status.defineConn(fs, 5*time.Second)
	}
	fs.Usage = func() {
		for _, c := range commands {
			if c.name == cmd || (cmd == "serve" && c.name == "run") {
				fmt.Fprintf(fs.Output(), "Usage: xdsbridge %s %s\n  %s\n", cmd, c.args, c.summary)
			}
		}
		fs.PrintDefaults()
	}
	return fs, f
}

// usage lists the commands, one line each, and each one's flags.
func usage(w io.Writer) {
	fmt.Fprint(w, "Usage: xdsbridge [COMMAND] [FLAGS]\n\nCommands:\n")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-11s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, "  help        this help\n")
	for _, c := range commands {
		fmt.Fprintf(w, "\n%s\n", strings.TrimSpace("xdsbridge "+c.name+" "+c.args))
		fs, _ := newFlagSet(c.name, w)
		fs.PrintDefaults()
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	cmd := "run"
	if len(args) > 0 {
		switch args[0] {
		case "help", "-h", "-help", "--help":
			usage(stdout)
			return nil
		case "-version", "--version":
			cmd, args = "version", args[1:]
		case "run", "serve", "validate", "dump", "status", "reload", "healthcheck", "version":
			cmd, args = args[0], args[1:]
		default:
			if len(args[0]) > 0 && args[0][0] != '-' {
				usage(stderr)
				if looksLikeConfig(args[0]) {
					return fmt.Errorf("unknown command %q (to serve this config: xdsbridge run -config %s)", args[0], args[0])
				}
				names := []string{"help", "serve"}
				for _, c := range commands {
					names = append(names, c.name)
				}
				if near := decode.Suggest(args[0], names); near != "" {
					return fmt.Errorf("unknown command %q (did you mean %q?)", args[0], near)
				}
				return fmt.Errorf("unknown command %q", args[0])
			}
		}
	}
	fs, f := newFlagSet(cmd, stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	switch cmd {
	case "status":
		return status(fs, f, stdout)
	case "reload":
		return reload(fs, f, stdout)
	}
	if fs.NArg() > 0 {
		// `xdsbridge run bridge.yaml`: the config is a flag, and a
		// positional argument would be easy to take for it silently.
		if fs.NArg() == 1 && f.config != nil && *f.config == "" {
			return fmt.Errorf("unexpected argument %q: use -config %s", fs.Arg(0), fs.Arg(0))
		}
		return fmt.Errorf("unexpected arguments %q (the config file is given with -config FILE)", fs.Args())
	}
	switch cmd {
	case "version":
		_, err := fmt.Fprint(stdout, buildinfo.Get())
		return err
	case "healthcheck":
		return probeReady(f, stdout)
	}
	cfg, err := loadConfig(*f.config)
	if err != nil {
		return err
	}
	switch cmd {
	case "validate":
		// The check run makes at start; a certificate near its expiry is
		// logged at WARN.
		warnings, err := app.Check(cfg, dumpLogger(cfg.Logging, stderr))
		if err != nil {
			return err
		}
		for _, w := range warnings {
			fmt.Fprintln(stderr, "warning:", w)
		}
		fmt.Fprintln(stdout, "config ok")
		return nil
	case "dump":
		return dump(cfg, *f.format, *f.timeout, stdout, stderr, *f.out, *f.mode)
	}
	// SIGHUP is caught from here on: one that arrives while the app is
	// being built (a reload sent right after start) is applied once it
	// runs, instead of ending the process.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	log := app.NewLogger(cfg.Logging, stderr)
	a, err := app.New(cfg, log)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err = serve(ctx, a, *f.config, hup)
	log.Info("xdsbridge stopped")
	return err
}

// serve runs the app until ctx is done; a reload (a signal on hup, POST
// /debug/reload) reads configPath again ("": the embedded default).
func serve(ctx context.Context, a *app.App, configPath string, hup <-chan os.Signal) error {
	a.LoadConfig = func() (*config.Config, error) { return loadConfig(configPath) }
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go reloadOnHangup(ctx, a, hup)
	return a.Run(ctx)
}

// reloadOnHangup reloads the config on each signal of hup until ctx is
// done (the reload logs and counts its outcome).
func reloadOnHangup(ctx context.Context, a *app.App, hup <-chan os.Signal) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			_, _ = a.Reload()
		}
	}
}

// looksLikeConfig reports whether a command-line word is more likely a
// config file than a mistyped command: a YAML or JSON name, or a file.
func looksLikeConfig(arg string) bool {
	switch strings.ToLower(filepath.Ext(arg)) {
	case ".yaml", ".yml", ".json":
		return true
	}
	fi, err := os.Stat(arg)
	return err == nil && fi.Mode().IsRegular()
}

// loadConfig reads the config file (the embedded default without one)
// and fills in the defaults of every block (app.ResolveOptions).
func loadConfig(path string) (*config.Config, error) {
	var cfg *config.Config
	var err error
	if path != "" {
		cfg, err = config.Load(path, app.SourceTypeNames())
	} else {
		var wd string
		if wd, err = os.Getwd(); err != nil {
			return nil, err
		}
		cfg, err = config.Parse(defaultConfig, wd, app.SourceTypeNames())
	}
	if err != nil {
		return nil, err
	}
	if err := app.ResolveOptions(cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}

// dump runs the sources until they synced, without serving, and prints the
// resources.
func dump(cfg *config.Config, format string, timeout time.Duration, stdout, stderr io.Writer, outDir, mode string) error {
	var files fileout.Config
	if outDir != "" {
		files = fileout.DumpConfig((*fileout.Config)(cfg.Outputs.Filesystem), outDir, format, mode)
		if err := files.Check(); err != nil {
			return fmt.Errorf("-%w", err) // "-format: ...", "-mode: ..."
		}
	} else if format != "yaml" && format != "json" {
		return fmt.Errorf("-format: %q is not yaml or json", format)
	}
	cfg.Outputs.Filesystem = nil // dump writes once, below
	cfg.XDS.Listen, cfg.Admin.Listen = "127.0.0.1:0", "127.0.0.1:0"
	// Not the serving log lines (listening, sources synced, published):
	// only warnings and errors, on stderr.
	a, err := app.New(cfg, dumpLogger(cfg.Logging, stderr))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	for !a.Cache.Ready() {
		// A source that failed before its first sync (a services file
		// that does not exist) is not waited for until the timeout.
		for _, st := range a.Loop.Sources() {
			if !st.Synced && st.LastError != "" {
				cancel()
				<-done
				return fmt.Errorf("source %s has not synced: %s", st.Name, st.LastError)
			}
		}
		select {
		case err := <-done:
			return fmt.Errorf("stopped before every source synced: %v", err)
		case <-ctx.Done():
			<-done
			return errors.New("timed out waiting for every source's first sync")
		case <-time.After(10 * time.Millisecond):
		}
	}
	if outDir != "" {
		defer func() { cancel(); <-done }()
		res, err := fileout.WriteDir(a.Cache, files, nil)
		if err != nil {
			return fmt.Errorf("-out: %w", err)
		}
		fmt.Fprintf(stdout, "wrote %d files to %s\n", len(res.Written), outDir)
		return nil
	}
	out := app.Resources(a.Cache, "", "")
	cancel()
	<-done
	b, err := jsonMarshal(out)
	if err != nil {
		return err
	}
	if format == "yaml" {
		if b, err = yaml.JSONToYAML(b); err != nil {
			return err
		}
	}
	_, err = stdout.Write(b)
	return err
}

// dumpLogger is the config's logger at WARN at least.
func dumpLogger(c config.Logging, w io.Writer) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(c.Level))
	if lvl < slog.LevelWarn {
		c.Level = "warn"
	}
	return app.NewLogger(c, w)
}
