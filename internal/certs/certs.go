// Package certs serves a listener's TLS certificate, key and client CA
// bundle from files, reloaded when they change on disk.
//
// A Watcher loads the files at once (New: an error names the config field),
// then Run polls them every reload interval, comparing their content (not
// their modification time, so an atomic rename or a Kubernetes-style
// symlink swap is seen like an in-place write). A change that loads is
// swapped in for every new handshake; existing connections keep the
// session they negotiated, so streams survive a rotation. A change that
// does not load (a certificate written before its key, say) is logged at
// WARN and counted, and the last good certificate stays in use until the
// files change again. Key material is never logged.
package certs

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xdsbridge/xdsbridge/config"
	promreg "github.com/xdsbridge/xdsbridge/internal/metrics"
)

// Options configure a Watcher beyond its config.
type Options struct {
	Logger *slog.Logger
	// Metrics is where the watcher registers its collectors (shared by
	// every watcher on the same registerer); nil for none.
	Metrics prometheus.Registerer
	// NextProtos are the ALPN protocols offered; default ["h2"] (gRPC).
	NextProtos []string
}

// Watcher holds the current certificate and client CA pool of one
// listener. Create it with New, keep it current with Run.
type Watcher struct {
	field    string // "xds.tls"
	listener string // "xds"
	cert     string // resolved paths
	key      string
	ca       string
	interval time.Duration
	minVer   uint16
	protos   []string
	log      *slog.Logger
	m        *metrics

	cur atomic.Pointer[state]

	mu       sync.Mutex // serializes polls
	lastFail [32]byte   // content (or error) of the last change that did not load

	// verified caches VerifyClient's successes, by leaf (a connection's
	// certificate is one *x509.Certificate for the connection's life).
	vmu      sync.Mutex
	verified map[*x509.Certificate]verifiedChain
	verifies atomic.Int64 // chain verifications done (tests)
}

// verifiedChain is a chain VerifyClient verified against the pool of
// state, valid until the first NotAfter of the chain it built.
type verifiedChain struct {
	state *state
	chain []*x509.Certificate // as presented (the same pointers)
	until time.Time
}

// maxVerified bounds the cache of verified chains; when full it is
// emptied (a connection's next stream verifies again).
const maxVerified = 8192

// state is one loaded set of files.
type state struct {
	sum  [32]byte
	leaf *x509.Certificate
	cfg  *tls.Config // the per-handshake config
	// warned is how far expiry was reported: 0 not, 1 soon, 2 expired.
	// Under Watcher.mu (or before the state is published).
	warned int
}

// New loads the files of t (paths resolved against c's directory) for the
// listener whose config field is field ("xds.tls", "admin.tls"). Errors
// name the field: a missing or unreadable file, a file without PEM, a key
// that does not match the certificate, a client_ca_file without
// certificates, an expired certificate. A certificate near its expiry is
// logged at WARN.
func New(c *config.Config, t *config.TLS, field string, opts Options) (*Watcher, error) {
	if t == nil {
		return nil, fmt.Errorf("%s: not set", field)
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	w := &Watcher{
		field:    field,
		listener: strings.TrimSuffix(field, ".tls"),
		cert:     c.Path(t.CertFile),
		key:      c.Path(t.KeyFile),
		ca:       c.Path(t.ClientCAFile),
		interval: t.ReloadInterval.D(),
		minVer:   tls.VersionTLS12,
		protos:   opts.NextProtos,
		log:      log,
	}
	if w.interval <= 0 {
		w.interval = config.DefaultTLSReloadInterval
	}
	switch t.MinVersion {
	case "", "1.2":
	case "1.3":
		w.minVer = tls.VersionTLS13
	default:
		return nil, fmt.Errorf("%s.min_version: %q is not one of 1.2, 1.3", field, t.MinVersion)
	}
	if len(w.protos) == 0 {
		w.protos = []string{"h2"}
	}
	files, sum, err := w.read()
	if err != nil {
		return nil, err
	}
	s, err := w.load(files, sum, time.Now())
	if err != nil {
		return nil, err
	}
	w.cur.Store(s)
	w.m = newMetrics(opts.Metrics)
	w.m.expiry.WithLabelValues(w.listener).Set(float64(s.leaf.NotAfter.Unix()))
	// Both results exist from the start, so a rate over them is defined.
	w.m.reloads.WithLabelValues(w.listener, "success")
	w.m.reloads.WithLabelValues(w.listener, "error")
	return w, nil
}

// MTLS reports whether client certificates are required (client_ca_file set).
func (w *Watcher) MTLS() bool { return w.ca != "" }

// Certificate returns the leaf certificate in use.
func (w *Watcher) Certificate() *x509.Certificate { return w.cur.Load().leaf }

// VerifyClient verifies a client certificate chain, as the client
// presented it (leaf first, then its intermediates), against the client CA
// pool current now, for client authentication, as a handshake would. The
// xDS server calls it at every stream open (xds.Options.VerifyClient): a
// connection verified at its handshake by a CA since taken out of
// client_ca_file opens no more streams (and is closed when it tries).
// Without a client_ca_file it refuses every chain.
func (w *Watcher) VerifyClient(chain []*x509.Certificate) error {
	st := w.cur.Load()
	pool := st.cfg.ClientCAs
	if pool == nil {
		return fmt.Errorf("%s.client_ca_file is not set", w.field)
	}
	if len(chain) == 0 {
		return errors.New("no client certificate")
	}
	// A connection opens many streams over its life: its chain is
	// verified once per pool (a reload verifies it again) and until a
	// certificate of the chain expires, not at every stream open.
	now := time.Now()
	w.vmu.Lock()
	v, ok := w.verified[chain[0]]
	w.vmu.Unlock()
	if ok && v.state == st && now.Before(v.until) && slices.Equal(v.chain, chain) {
		return nil
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	w.verifies.Add(1)
	chains, err := chain[0].Verify(x509.VerifyOptions{
		Roots:         pool,
		Intermediates: inter,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		CurrentTime:   now,
	})
	if err != nil {
		return err
	}
	until := chain[0].NotAfter
	for _, c := range chains[0] {
		if c.NotAfter.Before(until) {
			until = c.NotAfter
		}
	}
	w.vmu.Lock()
	if w.verified == nil || len(w.verified) >= maxVerified {
		w.verified = map[*x509.Certificate]verifiedChain{}
	}
	w.verified[chain[0]] = verifiedChain{state: st, chain: slices.Clone(chain), until: until}
	w.vmu.Unlock()
	return nil
}

// ServerConfig returns a server TLS config whose every handshake uses the
// certificate and client CA pool current at that moment (through
// GetConfigForClient). With a client CA file, clients must present a
// certificate that chains to it.
func (w *Watcher) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: w.minVer,
		NextProtos: append([]string(nil), w.protos...),
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			// A clone: callers (grpc's credentials) may adjust it.
			return w.cur.Load().cfg.Clone(), nil
		},
	}
}

// Run polls the files every reload interval until ctx is done, swapping in
// changes that load. It returns nil when ctx is done.
func (w *Watcher) Run(ctx context.Context) error {
	leaf := w.Certificate()
	mode := "tls"
	if w.MTLS() {
		mode = "mtls"
	}
	w.log.Info("listener tls", "listener", w.listener, "mode", mode, "subject", leaf.Subject.String(), "not_after", leaf.NotAfter.UTC(), "reload_interval", w.interval)
	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			w.poll()
		}
	}
}

// poll reads the files and swaps in their content when it changed and
// loads. It reports whether a new certificate was swapped in.
func (w *Watcher) poll() bool { return w.pollAt(time.Now()) }

func (w *Watcher) pollAt(now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	files, sum, err := w.read()
	if err == nil && sum == w.cur.Load().sum {
		w.lastFail = [32]byte{}
		w.checkExpiry(w.cur.Load(), now)
		return false
	}
	var s *state
	if err == nil {
		s, err = w.load(files, sum, now)
	}
	if err != nil {
		// Report a failing state once; it is retried at every poll, and
		// the next change of the files reloads.
		key := sum
		if files == nil {
			key = sha256.Sum256([]byte(err.Error()))
		}
		if key != w.lastFail {
			w.lastFail = key
			w.m.reloads.WithLabelValues(w.listener, "error").Inc()
			w.log.Warn("tls reload failed, keeping the last good certificate", "listener", w.listener, "err", err)
		}
		return false
	}
	w.lastFail = [32]byte{}
	w.cur.Store(s)
	w.m.reloads.WithLabelValues(w.listener, "success").Inc()
	w.m.expiry.WithLabelValues(w.listener).Set(float64(s.leaf.NotAfter.Unix()))
	w.log.Info("tls reloaded", "listener", w.listener, "subject", s.leaf.Subject.String(), "not_after", s.leaf.NotAfter.UTC(), "serial", s.leaf.SerialNumber.String())
	return true
}

type fileSet struct{ cert, key, ca []byte }

// read reads the files (through any symlinks) and hashes their content.
func (w *Watcher) read() (*fileSet, [32]byte, error) {
	var f fileSet
	var err error
	if f.cert, err = readFile(w.field+".cert_file", w.cert); err != nil {
		return nil, [32]byte{}, err
	}
	if f.key, err = readFile(w.field+".key_file", w.key); err != nil {
		return nil, [32]byte{}, err
	}
	if w.ca != "" {
		if f.ca, err = readFile(w.field+".client_ca_file", w.ca); err != nil {
			return nil, [32]byte{}, err
		}
	}
	h := sha256.New()
	for _, b := range [][]byte{f.cert, f.key, f.ca} {
		fmt.Fprintf(h, "%d:", len(b))
		h.Write(b)
	}
	var sum [32]byte
	h.Sum(sum[:0])
	return &f, sum, nil
}

func readFile(field, path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s: %s does not exist", field, path)
		}
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	if len(b) > maxFileSize {
		return nil, fmt.Errorf("%s: %s is larger than %d MiB", field, path, maxFileSize>>20)
	}
	return b, nil
}

// maxFileSize bounds what is read of each file (a CA bundle of a few
// hundred certificates is well under it).
const maxFileSize = 4 << 20

// expiringSoon is the fraction of a certificate's lifetime left under which
// it is logged at WARN.
const expiringSoon = 0.2

// load parses a file set. No error includes key content.
func (w *Watcher) load(f *fileSet, sum [32]byte, now time.Time) (*state, error) {
	certF, keyF, caF := w.field+".cert_file", w.field+".key_file", w.field+".client_ca_file"
	if !hasBlock(f.cert, func(t string) bool { return t == "CERTIFICATE" }) {
		return nil, fmt.Errorf("%s: %s holds no PEM certificate", certF, w.cert)
	}
	if !hasBlock(f.key, func(t string) bool { return strings.HasSuffix(t, "PRIVATE KEY") }) {
		return nil, fmt.Errorf("%s: %s holds no PEM private key", keyF, w.key)
	}
	pair, err := tls.X509KeyPair(f.cert, f.key)
	if err != nil {
		if _, perr := parseKey(f.key); perr != nil {
			return nil, fmt.Errorf("%s: %s: the private key does not parse", keyF, w.key)
		}
		if _, cerr := x509.ParseCertificate(firstCert(f.cert)); cerr != nil {
			return nil, fmt.Errorf("%s: %s: %v", certF, w.cert, cerr)
		}
		return nil, fmt.Errorf("%s: does not match %s", keyF, certF)
	}
	leaf := pair.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, fmt.Errorf("%s: %s: %v", certF, w.cert, err)
		}
	}
	if now.After(leaf.NotAfter) {
		return nil, fmt.Errorf("%s: %s expired at %s", certF, w.cert, leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	cfg := &tls.Config{
		// No session resumption: a resumed session would skip the
		// verification of the client certificate against the CA pool
		// current at that handshake. xDS connections are long-lived.
		SessionTicketsDisabled: true,
		MinVersion:             w.minVer,
		NextProtos:             append([]string(nil), w.protos...),
		Certificates:           []tls.Certificate{pair},
	}
	if w.ca != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(f.ca) {
			return nil, fmt.Errorf("%s: %s holds no PEM certificate", caF, w.ca)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	st := &state{sum: sum, leaf: leaf, cfg: cfg}
	w.checkExpiry(st, now)
	return st, nil
}

// checkExpiry logs, once per certificate, that it expires soon (WARN: less
// than a fifth of its lifetime left) or that it expired (ERROR: new
// handshakes fail until the files are replaced).
func (w *Watcher) checkExpiry(s *state, now time.Time) {
	leaf := s.leaf
	switch {
	case now.After(leaf.NotAfter):
		if s.warned < 2 {
			s.warned = 2
			w.log.Error("tls certificate expired; new handshakes fail until it is replaced", "field", w.field+".cert_file", "listener", w.listener, "subject", leaf.Subject.String(), "not_after", leaf.NotAfter.UTC())
		}
	case float64(leaf.NotAfter.Sub(now)) < expiringSoon*float64(leaf.NotAfter.Sub(leaf.NotBefore)):
		if s.warned < 1 {
			s.warned = 1
			w.log.Warn("tls certificate expires soon", "field", w.field+".cert_file", "listener", w.listener, "subject", leaf.Subject.String(), "not_after", leaf.NotAfter.UTC())
		}
	}
}

func hasBlock(b []byte, want func(string) bool) bool {
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return false
		}
		if want(blk.Type) {
			return true
		}
	}
}

func firstCert(b []byte) []byte {
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return nil
		}
		if blk.Type == "CERTIFICATE" {
			return blk.Bytes
		}
	}
}

func parseKey(b []byte) (any, error) {
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return nil, errors.New("no key")
		}
		if !strings.HasSuffix(blk.Type, "PRIVATE KEY") {
			continue
		}
		if k, err := x509.ParsePKCS8PrivateKey(blk.Bytes); err == nil {
			return k, nil
		}
		if k, err := x509.ParsePKCS1PrivateKey(blk.Bytes); err == nil {
			return k, nil
		}
		if k, err := x509.ParseECPrivateKey(blk.Bytes); err == nil {
			return k, nil
		}
		return nil, errors.New("unparsable key")
	}
}

type metrics struct {
	reloads *prometheus.CounterVec
	expiry  *prometheus.GaugeVec
}

// newMetrics registers the collectors on reg, or reuses those another
// watcher registered there.
func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "xdsbridge_tls_reloads_total",
			Help: "Changes of a listener's TLS files seen, by result (success: swapped in; error: did not load, the last good stays).",
		}, []string{"listener", "result"}),
		expiry: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "xdsbridge_tls_certificate_expiry_timestamp_seconds",
			Help: "NotAfter of the certificate a listener serves, as a Unix time.",
		}, []string{"listener"}),
	}
	var err error
	if m.reloads, err = promreg.Shared(reg, m.reloads); err != nil {
		panic(err)
	}
	if m.expiry, err = promreg.Shared(reg, m.expiry); err != nil {
		panic(err)
	}
	return m
}
