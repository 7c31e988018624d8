// Package file is the static-file source: services read from a YAML or JSON
// file and re-read whenever it changes, including editors' and Kubernetes'
// atomic rename-replace. A file that fails to parse is reported and the last
// valid content keeps being served.
//
// The policy-file source (NewPolicy, type policy_file) watches a traffic
// policy file (policy.ParseFile) the same way and publishes it with
// PublishPolicy.
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
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/xdsbridge/xdsbridge/config/decode"
	"github.com/xdsbridge/xdsbridge/policy"
	"github.com/xdsbridge/xdsbridge/sources"
)

// Config is the `file:` block of a source entry.
type Config struct {
	// Path of the services file; relative to the config file's directory.
	Path string `json:"path"`
	// Settle is how long to wait after a change before re-reading, so a
	// burst of writes is read once (default 20ms).
	Settle decode.Duration `json:"settle"`
	// MaxSettle bounds the hold: a stream of changes closer than Settle
	// is read at most MaxSettle after the first (default 10 × Settle).
	MaxSettle decode.Duration `json:"max_settle"`
	// MaxBytes caps the file's size; a larger file is refused (default
	// DefaultMaxBytes, 8 MiB).
	MaxBytes int64 `json:"max_bytes"`
	// StaleAfter bounds a read of the file (default 10s, 1s..1h): a read
	// or stat that does not return within it marks the source stale (the
	// last valid content stays served) and no other read starts until it
	// returns. The file is also stat'ed every StaleAfter/2 to confirm it
	// still answers.
	StaleAfter decode.Duration `json:"stale_after"`
}

// DefaultStaleAfter is stale_after's default.
const DefaultStaleAfter = 10 * time.Second

// Source watches one services file.
type Source struct {
	name   string
	path   string
	settle time.Duration
	// maxSettle bounds how long a stream of changes holds a reload back.
	maxSettle time.Duration
	max       int64
	log       *slog.Logger
	// policy: the file is a policy file (NewPolicy), not a services file.
	policy bool
	what   string // "services file" or "policy file", for logs
	// staleAfter bounds each read and stat (stale_after).
	staleAfter time.Duration
	// readFn and statFn read and stat the file (tests replace them).
	readFn func(ctx context.Context, path string, max int64) ([]byte, error)
	statFn func(path string) error
	// stuck is closed when a read that did not return within staleAfter
	// returns; nil when none is stuck. Owned by Run.
	stuck chan struct{}

	mu      sync.Mutex
	lastErr string
	loaded  time.Time
	count   int

	watchErr      string
	watchGaps     int
	watchLost     time.Time
	watchRestored time.Time
}

var (
	_ sources.Source        = (*Source)(nil)
	_ sources.StaticClaimer = (*Source)(nil)
	_ sources.Debugger      = (*Source)(nil)
)

// New is the sources.Factory of the file source.
func New(name string, raw json.RawMessage, env sources.Env) (sources.Source, error) {
	return newFileSource(name, raw, env, false)
}

// NewPolicy is the sources.Factory of the policy-file source: its `path`
// is a policy file (README "Policy"), watched as a services file is; it
// claims no service.
func NewPolicy(name string, raw json.RawMessage, env sources.Env) (sources.Source, error) {
	return newFileSource(name, raw, env, true)
}

func newFileSource(name string, raw json.RawMessage, env sources.Env, isPolicy bool) (sources.Source, error) {
	var c Config
	if err := decode.JSONStrict(raw, &c); err != nil {
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
	if err := decode.CheckRange("settle", settle, 0, 10*time.Second); err != nil {
		return nil, err
	}
	if settle == 0 {
		settle = 20 * time.Millisecond
	}
	maxSettle := c.MaxSettle.D()
	if maxSettle == 0 {
		maxSettle = 10 * settle
	}
	if maxSettle < settle {
		return nil, fmt.Errorf("max_settle: %v is less than settle (%v)", maxSettle, settle)
	}
	if c.MaxBytes < 0 {
		return nil, fmt.Errorf("max_bytes: %d is negative", c.MaxBytes)
	}
	max := c.MaxBytes
	if max == 0 {
		max = DefaultMaxBytes
	}
	staleAfter := c.StaleAfter.D()
	if staleAfter == 0 {
		staleAfter = DefaultStaleAfter
	}
	if err := decode.CheckRange("stale_after", staleAfter, time.Second, time.Hour); err != nil {
		return nil, err
	}
	log := env.Logger
	if log == nil {
		log = slog.Default()
	}
	what := "services file"
	if isPolicy {
		what = "policy file"
	}
	return &Source{name: name, path: p, settle: settle, maxSettle: maxSettle, max: max, log: log.With("source", name), policy: isPolicy, what: what,
		staleAfter: staleAfter, readFn: readFile, statFn: statFile}, nil
}

// Name implements sources.Source.
func (s *Source) Name() string { return s.name }

// Path is the watched file's path.
func (s *Source) Path() string { return s.path }

// ClaimedNames reads the file and returns its service names; an invalid
// file is an error. A file that does not exist yet claims nothing: the
// source waits for it (not yet synced), as Run does.
func (s *Source) ClaimedNames() ([]string, error) {
	if s.policy {
		_, _, _, err := s.PolicyFile()
		return nil, err
	}
	svcs, err := s.load(context.Background())
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

// load reads and parses the file once.
func (s *Source) load(ctx context.Context) ([]sources.Service, error) {
	data, err := readFile(ctx, s.path, s.max)
	if err != nil {
		return nil, err
	}
	svcs, err := ParseContext(ctx, data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.path, err)
	}
	return svcs, nil
}

// PolicyFile reads and parses the policy file of a policy-file source
// once, and returns it with its content and path. A file that does not
// exist yet is nil, nil (the source waits for it, as Run does); a
// services-file source has no policy file.
func (s *Source) PolicyFile() (f *policy.File, data []byte, path string, err error) {
	if !s.policy {
		return nil, nil, "", nil
	}
	data, err = readFile(context.Background(), s.path, s.max)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, s.path, nil
	}
	if err != nil {
		return nil, nil, s.path, err
	}
	if f, err = policy.ParseFile(data); err != nil {
		return nil, nil, s.path, fmt.Errorf("%s: %w", s.path, err)
	}
	return f, data, s.path, nil
}

// ConfigWarnings reports a file that does not exist (yet), by its
// absolute path: allowed (the source waits for it, unsynced), but nothing
// is served from the source until it appears.
func (s *Source) ConfigWarnings() []string {
	if _, err := os.Stat(s.path); !errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	p, err := filepath.Abs(s.path)
	if err != nil {
		p = s.path
	}
	return []string{fmt.Sprintf("%s %s does not exist (yet): it may appear later; until it does, this source serves nothing and the bridge is not ready", s.what, p)}
}

// Run publishes the file's services and again after every change.
func (s *Source) Run(ctx context.Context, sink sources.Sink) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("file source %s: %w", s.name, err)
	}
	defer w.Close()
	// Watch the directory, not the file: rename-replace swaps the inode, and
	// Kubernetes swaps a symlink beside it.
	dir := filepath.Dir(s.path)
	if err := w.Add(dir); err != nil {
		return fmt.Errorf("file source %s: watching %s: %w", s.name, dir, err)
	}

	var last []byte
	failed := false
	reload := func() error {
		data, err := s.bounded(ctx, func() ([]byte, error) { return s.readFn(ctx, s.path, s.max) })
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, errStuck) {
			s.setErr(err)
			if !failed {
				s.log.Warn(s.what+" does not answer reads; serving its last valid content", "error", err)
				sink.Fail(ctx, s.name, err)
			}
			failed = true
			return nil
		}
		// Unchanged content is not published again, unless a failure was
		// reported since: then the publish is what clears it (a broken file
		// reverted to its last valid content).
		if err == nil && last != nil && !failed && bytes.Equal(data, last) {
			sources.Confirm(ctx, sink, s.name, time.Now())
			return nil
		}
		var svcs []sources.Service
		var pol *policy.File
		if err == nil {
			if s.policy {
				pol, err = policy.ParseFile(data)
			} else {
				svcs, err = ParseContext(ctx, data)
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err != nil {
				err = fmt.Errorf("%s: %w", s.path, err)
			}
		}
		if err != nil {
			s.setErr(err)
			switch {
			case last != nil:
				s.log.Warn(s.what+" rejected; serving its last valid content", "error", err)
			case errors.Is(err, fs.ErrNotExist):
				s.log.Warn(s.what+" does not exist (yet); nothing is served from this source until it appears", "path", s.path)
			default:
				s.log.Warn(s.what+" rejected; nothing is served from this source until it is valid (it never was)", "error", err)
			}
			sink.Fail(ctx, s.name, err)
			failed = true
			return nil
		}
		last, failed = data, false
		if s.policy {
			s.setLoaded(len(pol.Services))
			return sink.PublishPolicy(ctx, sources.PolicyUpdate{Source: s.name, Policy: pol})
		}
		s.setLoaded(len(svcs))
		return sink.Publish(ctx, sources.Update{Source: s.name, Services: svcs})
	}
	if err := reload(); err != nil {
		return nil // ctx done
	}

	// The settle timer is re-armed by each relevant event, but holds a
	// reload back at most maxSettle after the first one.
	settle := time.NewTimer(time.Hour)
	settle.Stop()
	defer settle.Stop()
	var deadline time.Time
	arm := func() {
		now := time.Now()
		if deadline.IsZero() {
			deadline = now.Add(s.maxSettle)
		}
		settle.Reset(min(s.settle, deadline.Sub(now)))
	}

	// The directory deleted (or renamed away) loses its watch: the parent
	// is watched for its return and adding it is retried with backoff.
	parent := filepath.Dir(dir)
	watching := true
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	backoff := time.Duration(0)
	lose := func() {
		_ = w.Remove(dir)
		watching = false
		s.setWatch(false, fmt.Errorf("directory %s removed or renamed; waiting for it to return", dir))
		if parent != dir {
			_ = w.Add(parent)
		}
		backoff = 10 * time.Millisecond
		retry.Reset(backoff)
	}
	restore := func() {
		if err := w.Add(dir); err != nil {
			backoff = min(2*backoff, time.Second)
			retry.Reset(backoff)
			return
		}
		retry.Stop()
		if parent != dir {
			_ = w.Remove(parent)
		}
		watching = true
		s.setWatch(true, nil)
		s.log.Info("watching the "+s.what+"'s directory again", "dir", dir)
		arm()
	}
	// The file is stat'ed every staleAfter/2: a successful stat confirms
	// the state (while the last read succeeded), one that does not return
	// marks the source stale.
	confirm := time.NewTicker(s.staleAfter / 2)
	defer confirm.Stop()
	relevant := s.chain()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.stuck:
			// The stuck read returned: read again (a failure was reported,
			// so even unchanged content is published, clearing it).
			s.stuck = nil
			s.log.Info(s.what + " answers reads again")
			if err := reload(); err != nil {
				return nil
			}
		case <-confirm.C:
			if s.stuck != nil || failed {
				continue
			}
			_, err := s.bounded(ctx, func() ([]byte, error) { return nil, s.statFn(s.path) })
			switch {
			case ctx.Err() != nil:
				return nil
			case errors.Is(err, errStuck):
				s.setErr(err)
				s.log.Warn(s.what+" does not answer; serving its last valid content", "error", err)
				sink.Fail(ctx, s.name, err)
				failed = true
			case err == nil:
				sources.Confirm(ctx, sink, s.name, time.Now())
			default:
				// Gone or unreadable: the reload reports it.
				arm()
			}
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			switch {
			case filepath.Clean(ev.Name) == dir:
				if watching && ev.Op&(fsnotify.Remove|fsnotify.Rename) != 0 {
					s.log.Warn(s.what+" directory removed; watching for its return", "dir", dir)
					lose()
					arm() // reports the file gone
				} else if !watching && ev.Op&(fsnotify.Create|fsnotify.Rename) != 0 {
					restore()
				}
			case !watching || ev.Op == fsnotify.Chmod || filepath.Dir(ev.Name) != dir:
			case relevant[filepath.Base(ev.Name)]:
				arm()
			}
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			s.log.Warn("file watch error", "error", err)
			arm()
		case <-retry.C:
			if !watching {
				restore()
			}
		case <-settle.C:
			deadline = time.Time{}
			if err := reload(); err != nil {
				return nil
			}
			relevant = s.chain()
		}
	}
}

// errStuck is the error of a read or stat that did not return within
// stale_after.
var errStuck = errors.New("the filesystem does not answer")

// bounded runs fn (a read or stat of the file) in a goroutine of its own
// and waits for it at most staleAfter. If it does not return by then, or
// an earlier one is still stuck, the error wraps errStuck; no other is
// started until the stuck one returns, which closes s.stuck. Called by
// Run only.
func (s *Source) bounded(ctx context.Context, fn func() ([]byte, error)) ([]byte, error) {
	if s.stuck != nil {
		return nil, fmt.Errorf("%s: an earlier read has not returned for over %s (stale_after): %w", s.path, s.staleAfter, errStuck)
	}
	type result struct {
		data []byte
		err  error
	}
	res := make(chan result, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		data, err := fn()
		res <- result{data, err}
	}()
	t := time.NewTimer(s.staleAfter)
	defer t.Stop()
	select {
	case r := <-res:
		return r.data, r.err
	case <-t.C:
		s.stuck = done
		return nil, fmt.Errorf("%s: a read did not return within %s (stale_after): %w", s.path, s.staleAfter, errStuck)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// statFile stats path (following symlinks).
func statFile(path string) error {
	_, err := os.Stat(path)
	return err
}

// chain is the names in the file's directory whose change can change what
// path reads: the file's own name and, when it is a symlink, the first
// element of each link target inside the directory (Kubernetes' `..data`
// and the timestamped directory it points to).
func (s *Source) chain() map[string]bool {
	dir := filepath.Dir(s.path)
	names := map[string]bool{filepath.Base(s.path): true}
	p := s.path
	for range 40 {
		target, err := os.Readlink(p)
		if err != nil {
			break
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(p), target)
		}
		rel, err := filepath.Rel(dir, target)
		if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			break
		}
		first, _, _ := strings.Cut(rel, string(filepath.Separator))
		names[first] = true
		next := filepath.Join(dir, first)
		if next == p {
			break
		}
		p = next
	}
	return names
}

func (s *Source) setWatch(ok bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ok {
		s.watchErr = ""
		s.watchRestored = time.Now()
		return
	}
	s.watchErr = err.Error()
	s.watchLost = time.Now()
	s.watchGaps++
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
		// watch is "ok", or "lost" while the directory is gone;
		// watch_gaps counts the losses, watch_lost_at is the last.
		"watch":             map[bool]string{true: "lost", false: "ok"}[s.watchErr != ""],
		"watch_error":       s.watchErr,
		"watch_gaps":        s.watchGaps,
		"watch_lost_at":     s.watchLost,
		"watch_restored_at": s.watchRestored,
	}
}
