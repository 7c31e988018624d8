package fileout

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/xdsbridge/xdsbridge/config/decode"
)

// Config is the `outputs.filesystem` block of the bridge's config.
type Config struct {
	// Dir is the directory the files are written to (created if missing;
	// relative to the config file). Required.
	Dir string `json:"dir"`
	// Format is the files' encoding, which Envoy picks by extension:
	// yaml (.yaml, default), json (.json) or proto (binary, .pb).
	Format string `json:"format"`
	// Mode is how a file is replaced: "path" (default) writes a temporary
	// file in the same directory and renames it over the old one, for
	// Envoy's path_config_source.path; "watched_directory" swaps a
	// Kubernetes-style ..data symlink to a new timestamped directory, for
	// path_config_source.watched_directory.
	Mode string `json:"mode"`
	// Debounce is how long after a change of the served resources the
	// files are written, so a burst of changes is one write (default
	// 100ms; 1ms..1m).
	Debounce decode.Duration `json:"debounce"`
	// EnvoyDir is the directory as Envoy sees it (a shared volume mounted
	// elsewhere), used in the clusters' eds_config paths. Default: Dir,
	// made absolute.
	EnvoyDir string `json:"envoy_dir"`
}

// Modes and formats.
const (
	ModePath             = "path"
	ModeWatchedDirectory = "watched_directory"

	FormatYAML  = "yaml"
	FormatJSON  = "json"
	FormatProto = "proto"

	DefaultDebounce = 100 * time.Millisecond
	MinDebounce     = time.Millisecond
	MaxDebounce     = time.Minute
)

// WithDefaults returns c with the defaults of absent fields filled in.
func (c Config) WithDefaults() Config {
	if c.Format == "" {
		c.Format = FormatYAML
	}
	if c.Mode == "" {
		c.Mode = ModePath
	}
	if c.Debounce == 0 {
		c.Debounce = decode.Duration(DefaultDebounce)
	}
	return c
}

// Check validates c (after WithDefaults). An error starts with the name
// of the field at fault ("format: ..."), for the caller to prefix with
// where the block is ("outputs.filesystem.").
func (c Config) Check() error {
	if c.Dir == "" {
		return fmt.Errorf("dir: missing")
	}
	switch c.Format {
	case FormatYAML, FormatJSON, FormatProto:
	default:
		return fmt.Errorf("format: %q is not one of yaml, json, proto", c.Format)
	}
	switch c.Mode {
	case ModePath, ModeWatchedDirectory:
	default:
		return fmt.Errorf("mode: %q is not one of path, watched_directory", c.Mode)
	}
	if c.EnvoyDir != "" && !filepath.IsAbs(c.EnvoyDir) {
		return fmt.Errorf("envoy_dir: %q is not an absolute path", c.EnvoyDir)
	}
	return decode.CheckRange("debounce", c.Debounce.D(), MinDebounce, MaxDebounce)
}

// Ext is the file extension of a format, as Envoy reads it.
func Ext(format string) string {
	switch format {
	case FormatJSON:
		return ".json"
	case FormatProto:
		return ".pb"
	}
	return ".yaml"
}

// DumpConfig is the config of `xdsbridge dump -out DIR`: the config's
// filesystem block if any (its envoy_dir and debounce), with dir, format
// and mode (when not empty) from the command line.
func DumpConfig(base *Config, dir, format, mode string) Config {
	var c Config
	if base != nil {
		c = *base
	}
	c.Dir, c.Format = dir, format
	if mode != "" {
		c.Mode = mode
	}
	return c.WithDefaults()
}
