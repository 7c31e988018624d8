// Command xdsbridge serves service registries to Envoy and gRPC clients over
// xDS (delta and state-of-the-world ADS).
//
//	xdsbridge                       run on the embedded default config
//	xdsbridge -config FILE          run on FILE
//	xdsbridge validate -config FILE check FILE, its sources' files and its TLS files
//	xdsbridge dump -config FILE     print the resources it would serve
//	xdsbridge dump -out DIR         write them as Envoy's files (outputs.filesystem layout)
package main

import (
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/xdsbridge/xdsbridge/config"
	"github.com/xdsbridge/xdsbridge/healthcheck"
	"github.com/xdsbridge/xdsbridge/internal/app"
	"github.com/xdsbridge/xdsbridge/internal/fsout"
)

//go:embed default.yaml
var defaultConfig []byte

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "xdsbridge:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	cmd := "serve"
	if len(args) > 0 && (args[0] == "validate" || args[0] == "dump" || args[0] == "serve") {
		cmd, args = args[0], args[1:]
	}
	fs := flag.NewFlagSet("xdsbridge "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "config file (YAML or JSON); default: the embedded default (file source on examples/services.yaml)")
	format := fs.String("format", "yaml", "dump: output format, yaml or json")
	timeout := fs.Duration("timeout", 30*time.Second, "dump: how long to wait for every source's first sync")
	out := fs.String("out", "", "dump: write the files of outputs.filesystem into this directory, once, instead of printing (-format yaml, json or proto)")
	mode := fs.String("mode", "", "dump -out: path or watched_directory (default: outputs.filesystem.mode, else path)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	cfg, err := loadConfig(*cfgPath)
	if err != nil {
		return err
	}
	switch cmd {
	case "validate":
		if _, err := app.BuildSources(cfg, app.NewLogger(cfg.Logging, io.Discard), nil); err != nil {
			return err
		}
		if _, _, err := healthcheck.FromConfig(cfg); err != nil {
			return err
		}
		// Loads xds.tls and admin.tls as run does; a certificate near its
		// expiry is logged at WARN.
		if _, _, err := app.BuildTLS(cfg, app.NewLogger(cfg.Logging, stderr), nil); err != nil {
			return err
		}
		if _, err := app.AdminTokenFromConfig(cfg, nil, nil); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "config ok")
		return nil
	case "dump":
		return dump(cfg, *format, *timeout, stdout, stderr, *out, *mode)
	}
	log := app.NewLogger(cfg.Logging, stderr)
	a, err := app.New(cfg, log)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err = a.Run(ctx)
	log.Info("xdsbridge stopped")
	return err
}

func loadConfig(path string) (*config.Config, error) {
	if path != "" {
		return config.Load(path, app.SourceTypeNames())
	}
	wd, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	return config.Parse(defaultConfig, wd, app.SourceTypeNames())
}

// dump runs the sources until they synced, without serving, and prints the
// resources.
func dump(cfg *config.Config, format string, timeout time.Duration, stdout, stderr io.Writer, outDir, mode string) error {
	var files fsout.Config
	if outDir != "" {
		files = fsout.DumpConfig(cfg.Outputs.Filesystem, outDir, format, mode)
		if err := files.Check(); err != nil {
			return fmt.Errorf("-%w", err) // "-format: ...", "-mode: ..."
		}
	} else if format != "yaml" && format != "json" {
		return fmt.Errorf("-format: %q is not yaml or json", format)
	}
	cfg.Outputs.Filesystem = nil // dump writes once, below
	cfg.XDS.Listen, cfg.Admin.Listen = "127.0.0.1:0", "127.0.0.1:0"
	a, err := app.New(cfg, app.NewLogger(cfg.Logging, stderr))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	for !a.Cache.Ready() {
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
		res, err := fsout.WriteDir(a.Cache, files, nil)
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
