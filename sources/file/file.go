// Package file is the static-file source: services read from a YAML or JSON
// file and re-read whenever it changes, including editors' and Kubernetes'
// atomic rename-replace. A file that fails to parse is reported and the last
// valid content keeps being served.
package file

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/xdsbridge/xdsbridge/config"
	"github.com/xdsbridge/xdsbridge/sources"
)

// Config is the `file:` block of a source entry.
type Config struct {
	// Path of the services file; relative to the config file's directory.
	Path string `json:"path"`
	// Settle is how long to wait after a change before re-reading, so a
	// burst of writes is read once (default 20ms).
	Settle config.Duration `json:"settle"`
}

// Source watches one services file.
type Source struct {
	name   string
	path   string
	settle time.Duration
	log    *slog.Logger

	mu      sync.Mutex
	lastErr string
	loaded  time.Time
	count   int
}

var (
	_ sources.Source        = (*Source)(nil)
	_ sources.StaticClaimer = (*Source)(nil)
	_ sources.Debugger      = (*Source)(nil)
)

// New is the sources.Factory of the file source.
func New(name string, raw json.RawMessage, env sources.Env) (sources.Source, error) {
	var c Config
	if err := config.DecodeJSONStrict(raw, &c); err != nil {
		return nil, err
	}
	if c.Path == "" {
		return nil, errors.New("path: missing")
	}
	p := c.Path
	if !filepath.IsAbs(p) && env.BaseDir != "" {
		p = filepath.Join(env.BaseDir, p)
	}
	settle := c.Settle.D()
	if err := config.CheckRange("settle", settle, 0, 10*time.Second); err != nil {
		return nil, err
	}
	if settle == 0 {
		settle = 20 * time.Millisecond
	}
	log := env.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Source{name: name, path: p, settle: settle, log: log.With("source", name)}, nil
}

// Name implements sources.Source.
func (s *Source) Name() string { return s.name }

// Path is the watched file's path.
func (s *Source) Path() string { return s.path }

// ClaimedNames reads the file and returns its service names; an invalid
// file is an error. A file that does not exist yet claims nothing: the
// source waits for it (not yet synced), as Run does.
func (s *Source) ClaimedNames() ([]string, error) {
	svcs, err := s.load()
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	names := make([]string, len(svcs))
	for i, svc := range svcs {
		names[i] = svc.Name
	}
	return names, nil
}

// Load reads and parses the file once.
func (s *Source) load() ([]sources.Service, error) {
	data, err := os.ReadFile(s.path)
	if err != nil {
		return nil, err
	}
	svcs, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.path, err)
	}
	return svcs, nil
}

// Services reads and parses the file once, for `xdsbridge dump` and tests.
func (s *Source) Services() ([]sources.Service, error) { return s.load() }

// Run publishes the file's services and again after every change.
func (s *Source) Run(ctx context.Context, sink sources.Sink) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("file source %s: %w", s.name, err)
	}
	defer w.Close()
	// Watch the directory, not the file: rename-replace swaps the inode, and
	// Kubernetes swaps a symlink beside it.
	if err := w.Add(filepath.Dir(s.path)); err != nil {
		return fmt.Errorf("file source %s: watching %s: %w", s.name, filepath.Dir(s.path), err)
	}

	var last []byte
	failed := false
	reload := func() error {
		data, err := os.ReadFile(s.path)
		// Unchanged content is not published again, unless a failure was
		// reported since: then the publish is what clears it (a broken file
		// reverted to its last valid content).
		if err == nil && last != nil && !failed && bytes.Equal(data, last) {
			return nil
		}
		var svcs []sources.Service
		if err == nil {
			svcs, err = Parse(data)
			if err != nil {
				err = fmt.Errorf("%s: %w", s.path, err)
			}
		}
		if err != nil {
			s.setErr(err)
			s.log.Warn("services file rejected; serving its last valid content", "error", err)
			sink.Fail(ctx, s.name, err)
			failed = true
			return nil
		}
		last, failed = data, false
		s.setLoaded(len(svcs))
		return sink.Publish(ctx, sources.Update{Source: s.name, Services: svcs})
	}
	if err := reload(); err != nil {
		return nil // ctx done
	}

	settle := time.NewTimer(time.Hour)
	settle.Stop()
	defer settle.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if ev.Op == fsnotify.Chmod {
				continue
			}
			settle.Reset(s.settle)
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			s.log.Warn("file watch error", "error", err)
			settle.Reset(s.settle)
		case <-settle.C:
			if err := reload(); err != nil {
				return nil
			}
		}
	}
}

func (s *Source) setErr(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastErr = err.Error()
}

func (s *Source) setLoaded(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastErr = ""
	s.loaded = time.Now()
	s.count = n
}

// DebugInfo implements sources.Debugger.
func (s *Source) DebugInfo() any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return map[string]any{
		"path":       s.path,
		"services":   s.count,
		"loaded_at":  s.loaded,
		"last_error": s.lastErr,
	}
}
