package app

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xdsbridge/xdsbridge/config"
	promreg "github.com/xdsbridge/xdsbridge/internal/metrics"
)

// Admin bearer token rules (config admin.token_file).
const (
	// MinAdminTokenBytes is the shortest token accepted.
	MinAdminTokenBytes = 16
	// MaxAdminTokenBytes is the longest token accepted (the file is not
	// read past it).
	MaxAdminTokenBytes = 4096
	// DefaultTokenReloadInterval is how often the token file is re-read.
	// The file is tiny, so it is simply read again and its digest
	// compared: a rename, a symlink swap (Kubernetes secrets) or an
	// in-place write are all seen, whatever the file system's mtime
	// granularity.
	DefaultTokenReloadInterval = 10 * time.Second
)

// AdminToken guards /debug/* with a bearer token read from a file. Only
// the token's SHA-256 digest is kept; the token and the Authorization
// header are never logged. Safe for concurrent use.
type AdminToken struct {
	path     string
	log      *slog.Logger
	interval time.Duration

	digest atomic.Pointer[[sha256.Size]byte]

	unauthorized *prometheus.CounterVec
	reloadErrors prometheus.Counter

	mu      sync.Mutex // serializes reloads
	lastErr string     // last reload error logged, to log each failure once
}

// AdminTokenFromConfig reads admin.token_file (relative to the config's
// directory). It returns nil, nil when no token file is configured. The
// metrics are registered on reg when it is not nil.
func AdminTokenFromConfig(c *config.Config, log *slog.Logger, reg prometheus.Registerer) (*AdminToken, error) {
	if c.Admin.TokenFile == "" {
		return nil, nil
	}
	return NewAdminToken(c.Path(c.Admin.TokenFile), log, reg)
}

// NewAdminToken reads the token file; errors name admin.token_file.
func NewAdminToken(path string, log *slog.Logger, reg prometheus.Registerer) (*AdminToken, error) {
	if log == nil {
		log = slog.Default()
	}
	t := &AdminToken{
		path:     path,
		log:      log,
		interval: DefaultTokenReloadInterval,
		unauthorized: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "xdsbridge_admin_unauthorized_total",
			Help: "Admin /debug/* requests refused with 401, by reason (missing: no bearer token; invalid: a wrong one).",
		}, []string{"reason"}),
		reloadErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "xdsbridge_admin_token_reload_errors_total",
			Help: "Re-reads of admin.token_file that failed; the last good token stays in use.",
		}),
	}
	d, err := readAdminToken(path)
	if err != nil {
		return nil, err
	}
	t.digest.Store(&d)
	for _, r := range []string{"missing", "invalid"} {
		t.unauthorized.WithLabelValues(r)
	}
	if err := promreg.Register(reg, t.unauthorized, t.reloadErrors); err != nil {
		return nil, fmt.Errorf("admin.token_file: %w", err)
	}
	return t, nil
}

// readAdminToken reads and checks a token file and returns the token's
// digest. A trailing newline (\n or \r\n, possibly repeated) is trimmed.
// Errors name the field and the path, never the token.
func readAdminToken(path string) ([sha256.Size]byte, error) {
	var zero [sha256.Size]byte
	// Stat before Open: opening a FIFO would block the reload loop.
	fi, err := os.Stat(path)
	if err != nil {
		return zero, fmt.Errorf("admin.token_file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return zero, fmt.Errorf("admin.token_file: %s: not a regular file (%s)", path, fi.Mode().Type())
	}
	f, err := os.Open(path)
	if err != nil {
		return zero, fmt.Errorf("admin.token_file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxAdminTokenBytes+3))
	if err != nil {
		return zero, fmt.Errorf("admin.token_file: %s: %w", path, err)
	}
	tok := strings.TrimRight(string(b), "\r\n")
	switch {
	case tok == "":
		return zero, fmt.Errorf("admin.token_file: %s: empty (want a token of at least %d bytes)", path, MinAdminTokenBytes)
	case len(tok) > MaxAdminTokenBytes:
		return zero, fmt.Errorf("admin.token_file: %s: the token is longer than %d bytes", path, MaxAdminTokenBytes)
	}
	for i, r := range tok {
		if unicode.IsSpace(r) {
			return zero, fmt.Errorf("admin.token_file: %s: whitespace inside the token at byte %d (only a trailing newline is trimmed)", path, i)
		}
		if r < 0x21 || r > 0x7e {
			return zero, fmt.Errorf("admin.token_file: %s: byte %d of the token is not printable ASCII (an HTTP header carries only 0x21-0x7e)", path, i)
		}
	}
	if len(tok) < MinAdminTokenBytes {
		return zero, fmt.Errorf("admin.token_file: %s: the token is %d bytes; at least %d are needed", path, len(tok), MinAdminTokenBytes)
	}
	return sha256.Sum256([]byte(tok)), nil
}

// Reload re-reads the token file. A file that does not load (missing,
// empty, invalid) keeps the last good token and is logged at WARN once
// per distinct failure, and counted. A new token is logged at INFO
// (without the token).
func (t *AdminToken) Reload() {
	t.mu.Lock()
	defer t.mu.Unlock()
	d, err := readAdminToken(t.path)
	if err != nil {
		t.reloadErrors.Inc()
		if msg := err.Error(); msg != t.lastErr {
			t.log.Warn("admin token file did not load; the last good token stays in use", "error", msg)
			t.lastErr = msg
		}
		return
	}
	if t.lastErr != "" {
		t.lastErr = ""
		t.log.Info("admin token file loads again", "path", t.path)
	}
	if old := t.digest.Load(); *old != d {
		t.digest.Store(&d)
		t.log.Info("admin token changed; the new one is in use", "path", t.path)
	}
}

// Run re-reads the token file every interval until ctx is done.
func (t *AdminToken) Run(ctx context.Context) error {
	tick := time.NewTicker(t.interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			t.Reload()
		}
	}
}

// errNoBearer is a request without a bearer token.
var errNoBearer = errors.New("no bearer token")

// bearer extracts the token of an "Authorization: Bearer <token>" header
// (the scheme is case-insensitive, RFC 7235).
func bearer(r *http.Request) (string, error) {
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", errNoBearer
	}
	tok = strings.TrimLeft(tok, " ")
	if tok == "" {
		return "", errNoBearer
	}
	return tok, nil
}

// Valid reports whether tok is the current token. The comparison is of
// SHA-256 digests in constant time, so neither the token's bytes nor its
// length leak through timing.
func (t *AdminToken) Valid(tok string) bool {
	d := sha256.Sum256([]byte(tok))
	return subtle.ConstantTimeCompare(d[:], t.digest.Load()[:]) == 1
}

// Guard wraps h: a request without the current bearer token gets 401 with
// WWW-Authenticate: Bearer, and is counted. A nil AdminToken guards
// nothing.
func (t *AdminToken) Guard(h http.Handler) http.Handler {
	if t == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, err := bearer(r)
		switch {
		case err != nil:
			t.refuse(w, "missing", `Bearer realm="xdsbridge admin"`)
		case !t.Valid(tok):
			t.refuse(w, "invalid", `Bearer realm="xdsbridge admin", error="invalid_token"`)
		default:
			h.ServeHTTP(w, r)
		}
	})
}

func (t *AdminToken) refuse(w http.ResponseWriter, reason, challenge string) {
	t.unauthorized.WithLabelValues(reason).Inc()
	w.Header().Set("WWW-Authenticate", challenge)
	http.Error(w, "unauthorized: /debug/* needs Authorization: Bearer <the token in admin.token_file>", http.StatusUnauthorized)
}
