package certs

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/xdsbridge/xdsbridge/config"
	"github.com/xdsbridge/xdsbridge/config/decode"
	"github.com/xdsbridge/xdsbridge/internal/logbuf"
	"github.com/xdsbridge/xdsbridge/internal/testcerts"
)

// files is a listener's TLS files in a temp dir, with relative paths in
// the config (resolved against the config's directory).
type files struct {
	dir string
	cfg *config.Config
	tls *config.TLS
}

func newFiles(t *testing.T, server testcerts.Leaf, clientCA *testcerts.CA) *files {
	t.Helper()
	dir := t.TempDir()
	server.Write(t, dir, "server")
	f := &files{dir: dir, cfg: &config.Config{BaseDir: dir}, tls: &config.TLS{CertFile: "server.crt", KeyFile: "server.key", ReloadInterval: decode.Duration(time.Hour), MinVersion: "1.2"}}
	if clientCA != nil {
		clientCA.WriteCA(t, dir, "ca.pem")
		f.tls.ClientCAFile = "ca.pem"
	}
	return f
}

func (f *files) watcher(t *testing.T, log io.Writer, reg prometheus.Registerer) *Watcher {
	t.Helper()
	w, err := New(f.cfg, f.tls, "xds.tls", Options{Logger: slog.New(slog.NewTextHandler(log, nil)), Metrics: reg})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestNewErrorsNameTheField(t *testing.T) {
	ca := testcerts.NewCA(t, "ca")
	good := ca.Server(t)
	other := ca.Server(t)
	expired := ca.Issue(t, testcerts.LeafOptions{CommonName: "old", NotAfter: time.Now().Add(-time.Minute)})
	cases := []struct {
		name  string
		setup func(f *files)
		want  string
	}{
		{"missing cert", func(f *files) { f.tls.CertFile = "nope.crt" }, "xds.tls.cert_file: " + "DIR/nope.crt does not exist"},
		{"missing key", func(f *files) { f.tls.KeyFile = "nope.key" }, "xds.tls.key_file: DIR/nope.key does not exist"},
		{"missing ca", func(f *files) { f.tls.ClientCAFile = "nope.pem" }, "xds.tls.client_ca_file: DIR/nope.pem does not exist"},
		{"cert not pem", func(f *files) { testcerts.WriteFile(t, filepath.Join(f.dir, "server.crt"), []byte("hello")) }, "xds.tls.cert_file: DIR/server.crt holds no PEM certificate"},
		{"key not pem", func(f *files) { testcerts.WriteFile(t, filepath.Join(f.dir, "server.key"), good.CertPEM) }, "xds.tls.key_file: DIR/server.key holds no PEM private key"},
		{"key mismatch", func(f *files) { testcerts.WriteFile(t, filepath.Join(f.dir, "server.key"), other.KeyPEM) }, "xds.tls.key_file: does not match xds.tls.cert_file"},
		{"ca without certificate", func(f *files) {
			testcerts.WriteFile(t, filepath.Join(f.dir, "ca.pem"), []byte("-----BEGIN JUNK-----\naGVsbG8=\n-----END JUNK-----\n"))
		}, "xds.tls.client_ca_file: DIR/ca.pem holds no PEM certificate"},
		{"ca too large", func(f *files) {
			testcerts.WriteFile(t, filepath.Join(f.dir, "ca.pem"), bytes.Repeat(ca.PEM, maxFileSize/len(ca.PEM)+1))
		}, "xds.tls.client_ca_file: DIR/ca.pem is larger than 4 MiB"},
		{"expired", func(f *files) { expired.Write(t, f.dir, "server") }, "xds.tls.cert_file: DIR/server.crt expired at "},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFiles(t, good, ca)
			c.setup(f)
			_, err := New(f.cfg, f.tls, "xds.tls", Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err == nil {
				t.Fatal("New passed")
			}
			want := strings.ReplaceAll(c.want, "DIR", f.dir)
			if !strings.HasPrefix(err.Error(), want) {
				t.Errorf("error %q, want prefix %q", err, want)
			}
			for _, k := range [][]byte{good.KeyPEM, other.KeyPEM, expired.KeyPEM} {
				if keyLeaks(err.Error(), k) {
					t.Errorf("error %q holds key material", err)
				}
			}
		})
	}
}

// keyLeaks reports whether s holds a line of the key's PEM body.
func keyLeaks(s string, keyPEM []byte) bool {
	for _, line := range strings.Split(string(keyPEM), "\n") {
		if len(line) > 16 && !strings.HasPrefix(line, "-----") && strings.Contains(s, line) {
			return true
		}
	}
	return false
}

func TestExpiringSoonWarns(t *testing.T) {
	ca := testcerts.NewCA(t, "ca")
	// Valid from an hour ago for 65 minutes: 5 minutes (8%) left.
	soon := ca.Issue(t, testcerts.LeafOptions{CommonName: "soon", NotAfter: time.Now().Add(5 * time.Minute)})
	var log logbuf.Buffer
	w := newFiles(t, soon, nil).watcher(t, &log, nil)
	if !strings.Contains(log.String(), "level=WARN") || !strings.Contains(log.String(), "field=xds.tls.cert_file") {
		t.Errorf("no expiry warning naming the field:\n%s", log.String())
	}
	w.poll()
	w.poll()
	if n := strings.Count(log.String(), "level=WARN"); n != 1 {
		t.Errorf("%d warnings, want 1 per certificate:\n%s", n, log.String())
	}
	// Polls after it expired (files unchanged) report that once.
	w.pollAt(time.Now().Add(10 * time.Minute))
	w.pollAt(time.Now().Add(11 * time.Minute))
	if n := strings.Count(log.String(), "level=ERROR msg=\"tls certificate expired"); n != 1 {
		t.Errorf("%d expiry errors, want 1:\n%s", n, log.String())
	}
	log = logbuf.Buffer{}
	newFiles(t, ca.Server(t), nil).watcher(t, &log, nil)
	if strings.Contains(log.String(), "WARN") {
		t.Errorf("warning for a fresh certificate:\n%s", log.String())
	}
}

// echoServer serves TLS on loopback with the watcher's config, echoing
// what each connection sends.
func echoServer(t *testing.T, w *Watcher) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tl := tls.NewListener(lis, w.ServerConfig())
	var wg sync.WaitGroup
	t.Cleanup(func() { tl.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := tl.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				c.SetDeadline(time.Now().Add(20 * time.Second))
				io.Copy(c, c)
			}()
		}
	}()
	return lis.Addr().String()
}

// dial connects and round-trips one message; it returns the connection
// (open) and the certificate the server presented.
func dial(t *testing.T, addr string, roots *x509.CertPool, client *testcerts.Leaf) (*tls.Conn, *x509.Certificate, error) {
	t.Helper()
	cfg := &tls.Config{RootCAs: roots, ServerName: "localhost", NextProtos: []string{"h2"}}
	if client != nil {
		pair, err := tls.X509KeyPair(client.CertPEM, client.KeyPEM)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return nil, nil, err
	}
	if err := roundTrip(c); err != nil {
		c.Close()
		return nil, nil, err
	}
	t.Cleanup(func() { c.Close() })
	return c, c.ConnectionState().PeerCertificates[0], nil
}

// roundTrip sends a message and reads it back; a refused client
// certificate shows here under TLS 1.3.
func roundTrip(c *tls.Conn) error {
	c.SetDeadline(time.Now().Add(5 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write([]byte("ping")); err != nil {
		return err
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil {
		return err
	}
	if string(buf) != "ping" {
		return io.ErrUnexpectedEOF
	}
	return nil
}

func pool(cas ...*testcerts.CA) *x509.CertPool {
	p := x509.NewCertPool()
	for _, ca := range cas {
		p.AddCert(ca.Cert)
	}
	return p
}

func TestMTLSRefusesClients(t *testing.T) {
	ca, other := testcerts.NewCA(t, "ca"), testcerts.NewCA(t, "other")
	w := newFiles(t, ca.Server(t), ca).watcher(t, io.Discard, nil)
	if !w.MTLS() {
		t.Fatal("MTLS false with client_ca_file")
	}
	addr := echoServer(t, w)
	good := ca.Issue(t, testcerts.LeafOptions{CommonName: "envoy"})
	if _, _, err := dial(t, addr, pool(ca), &good); err != nil {
		t.Fatalf("good client: %v", err)
	}
	if _, _, err := dial(t, addr, pool(ca), nil); err == nil {
		t.Error("client without certificate accepted")
	}
	foreign := other.Issue(t, testcerts.LeafOptions{CommonName: "envoy"})
	if _, _, err := dial(t, addr, pool(ca), &foreign); err == nil {
		t.Error("client with a certificate from another CA accepted")
	}
}

// A rotation of the server certificate and of the client CA is seen by
// new handshakes; a connection made before keeps working.
func TestRotationSeenByNewHandshakes(t *testing.T) {
	ca1, ca2 := testcerts.NewCA(t, "ca1"), testcerts.NewCA(t, "ca2")
	f := newFiles(t, ca1.Server(t), ca1)
	reg := prometheus.NewRegistry()
	var log logbuf.Buffer
	w := f.watcher(t, &log, reg)
	addr := echoServer(t, w)
	client1 := ca1.Issue(t, testcerts.LeafOptions{CommonName: "c1"})
	client2 := ca2.Issue(t, testcerts.LeafOptions{CommonName: "c2"})
	old, cert1, err := dial(t, addr, pool(ca1), &client1)
	if err != nil {
		t.Fatal(err)
	}
	if w.poll() {
		t.Fatal("poll without change reloaded")
	}

	// Rotate to ca2: new server certificate and new client CA.
	server2 := ca2.Server(t)
	server2.Write(t, f.dir, "server")
	ca2.WriteCA(t, f.dir, "ca.pem")
	if !w.poll() {
		t.Fatalf("rotation not loaded:\n%s", log.String())
	}
	_, cert2, err := dial(t, addr, pool(ca2), &client2)
	if err != nil {
		t.Fatalf("new handshake after rotation: %v", err)
	}
	if cert2.SerialNumber.Cmp(server2.Cert.SerialNumber) != 0 || cert2.Equal(cert1) {
		t.Errorf("new handshake got %v, want the rotated certificate", cert2.Subject)
	}
	if _, _, err := dial(t, addr, pool(ca1, ca2), &client1); err == nil {
		t.Error("client of the old CA accepted after the CA rotated")
	}
	if err := roundTrip(old); err != nil {
		t.Errorf("connection made before the rotation: %v", err)
	}
	if got := testutil.ToFloat64(w.m.reloads.WithLabelValues("xds", "success")); got != 1 {
		t.Errorf("reloads success = %v, want 1", got)
	}
	if got := testutil.ToFloat64(w.m.expiry.WithLabelValues("xds")); got != float64(server2.Cert.NotAfter.Unix()) {
		t.Errorf("expiry = %v, want %v", got, server2.Cert.NotAfter.Unix())
	}
	if !strings.Contains(log.String(), "tls reloaded") {
		t.Errorf("no reload logged:\n%s", log.String())
	}
}

// A certificate written before its key does not load: the last good stays
// (and serves), the failure is logged once and counted, and the key's
// arrival loads the pair.
func TestBrokenRotationKeepsLastGood(t *testing.T) {
	ca := testcerts.NewCA(t, "ca")
	first := ca.Server(t)
	f := newFiles(t, first, nil)
	reg := prometheus.NewRegistry()
	var log logbuf.Buffer
	w := f.watcher(t, &log, reg)
	addr := echoServer(t, w)

	next := ca.Server(t)
	testcerts.WriteFile(t, filepath.Join(f.dir, "server.crt"), next.CertPEM)
	for range 3 {
		if w.poll() {
			t.Fatal("a certificate without its key loaded")
		}
	}
	if _, got, err := dial(t, addr, pool(ca), nil); err != nil || !got.Equal(first.Cert) {
		t.Fatalf("after a broken rotation: %v, serving %v", err, got)
	}
	if got := testutil.ToFloat64(w.m.reloads.WithLabelValues("xds", "error")); got != 1 {
		t.Errorf("reloads error = %v, want 1 (the same failure counted once)", got)
	}
	l := log.String()
	if strings.Count(l, "level=WARN") != 1 || !strings.Contains(l, "xds.tls.key_file: does not match xds.tls.cert_file") {
		t.Errorf("want one WARN naming the fields:\n%s", l)
	}
	for _, k := range [][]byte{first.KeyPEM, next.KeyPEM} {
		if keyLeaks(l, k) {
			t.Errorf("key material logged:\n%s", l)
		}
	}

	// A file that disappears for a moment is a failure too.
	os.Remove(filepath.Join(f.dir, "server.key"))
	if w.poll() {
		t.Fatal("loaded without a key file")
	}
	testcerts.WriteFile(t, filepath.Join(f.dir, "server.key"), next.KeyPEM)
	if !w.poll() {
		t.Fatalf("the completed rotation did not load:\n%s", log.String())
	}
	if _, got, err := dial(t, addr, pool(ca), nil); err != nil || !got.Equal(next.Cert) {
		t.Fatalf("after the completed rotation: %v, serving %v", err, got)
	}
	if got := testutil.ToFloat64(w.m.reloads.WithLabelValues("xds", "error")); got != 2 {
		t.Errorf("reloads error = %v, want 2", got)
	}
}

// Kubernetes mounts a secret as name -> ..data/name, with ..data a
// symlink swapped atomically to a new directory on update.
func TestSymlinkSwap(t *testing.T) {
	ca := testcerts.NewCA(t, "ca")
	dir := t.TempDir()
	write := func(version string, l testcerts.Leaf) {
		vdir := filepath.Join(dir, version)
		if err := os.Mkdir(vdir, 0o700); err != nil {
			t.Fatal(err)
		}
		l.Write(t, vdir, "tls")
		if err := os.Symlink(version, filepath.Join(dir, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	first, second := ca.Server(t), ca.Server(t)
	write("..v1", first)
	for _, n := range []string{"tls.crt", "tls.key"} {
		if err := os.Symlink(filepath.Join("..data", n), filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
	cfg := &config.Config{BaseDir: dir}
	w, err := New(cfg, &config.TLS{CertFile: "tls.crt", KeyFile: "tls.key", ReloadInterval: decode.Duration(time.Hour)}, "admin.tls", Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if !w.Certificate().Equal(first.Cert) {
		t.Fatal("not the first certificate")
	}
	write("..v2", second)
	if !w.poll() || !w.Certificate().Equal(second.Cert) {
		t.Fatal("symlink swap not loaded")
	}
}

// Run polls on its own; it stops with its context.
func TestRunReloads(t *testing.T) {
	ca := testcerts.NewCA(t, "ca")
	f := newFiles(t, ca.Server(t), nil)
	f.tls.ReloadInterval = decode.Duration(config.MinTLSReloadInterval)
	var log logbuf.Buffer
	w := f.watcher(t, &log, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	next := ca.Server(t)
	next.Write(t, f.dir, "server")
	deadline := time.Now().Add(10 * time.Second)
	for !w.Certificate().Equal(next.Cert) {
		if time.Now().After(deadline) {
			t.Fatalf("not reloaded:\n%s", log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "listener=xds mode=tls") {
		t.Errorf("start not logged:\n%s", log.String())
	}
}

// Two watchers share the collectors of one registry.
func TestMetricsShared(t *testing.T) {
	ca := testcerts.NewCA(t, "ca")
	reg := prometheus.NewRegistry()
	f := newFiles(t, ca.Server(t), nil)
	f.watcher(t, io.Discard, reg)
	if _, err := New(f.cfg, f.tls, "admin.tls", Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: reg}); err != nil {
		t.Fatal(err)
	}
	n, err := testutil.GatherAndCount(reg, "xdsbridge_tls_certificate_expiry_timestamp_seconds")
	if err != nil || n != 2 {
		t.Errorf("expiry series = %d, %v; want 2", n, err)
	}
}

// issueWith signs a certificate for key with ca: an intermediate CA when
// isCA, else a leaf with the extended key usages.
func issueWith(t *testing.T, ca *testcerts.CA, name string, isCA bool, eku ...x509.ExtKeyUsage) *testcerts.CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  isCA,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           eku,
	}
	if isCA {
		tmpl.KeyUsage |= x509.KeyUsageCertSign
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testcerts.CA{Cert: cert, Key: key}
}

// VerifyClient verifies a chain as presented against the client CA pool
// loaded last, for client authentication: a rotation of client_ca_file
// takes the old CA's clients out at once.
func TestVerifyClientUsesCurrentPool(t *testing.T) {
	ca1, ca2 := testcerts.NewCA(t, "ca1"), testcerts.NewCA(t, "ca2")
	f := newFiles(t, ca1.Server(t), ca1)
	w := f.watcher(t, io.Discard, nil)
	leaf1 := ca1.Issue(t, testcerts.LeafOptions{CommonName: "c1"}).Cert
	leaf2 := ca2.Issue(t, testcerts.LeafOptions{CommonName: "c2"}).Cert
	inter := issueWith(t, ca1, "intermediate", true)
	viaInter := inter.Issue(t, testcerts.LeafOptions{CommonName: "c3"}).Cert
	serverOnly := issueWith(t, ca1, "server only", false, x509.ExtKeyUsageServerAuth).Cert

	for _, tc := range []struct {
		name  string
		chain []*x509.Certificate
		ok    bool
	}{
		{"leaf of the CA", []*x509.Certificate{leaf1}, true},
		{"leaf of another CA", []*x509.Certificate{leaf2}, false},
		{"leaf and its intermediate", []*x509.Certificate{viaInter, inter.Cert}, true},
		{"leaf without its intermediate", []*x509.Certificate{viaInter}, false},
		{"server authentication only", []*x509.Certificate{serverOnly}, false},
		{"no certificate", nil, false},
	} {
		if err := w.VerifyClient(tc.chain); (err == nil) != tc.ok {
			t.Errorf("%s: VerifyClient = %v, want ok %v", tc.name, err, tc.ok)
		}
	}

	ca2.WriteCA(t, f.dir, "ca.pem")
	if !w.poll() {
		t.Fatal("client CA rotation not loaded")
	}
	if err := w.VerifyClient([]*x509.Certificate{leaf1}); err == nil {
		t.Error("a client of the CA rotated away still verifies")
	}
	if err := w.VerifyClient([]*x509.Certificate{leaf2}); err != nil {
		t.Errorf("a client of the new CA: %v", err)
	}

	noCA := newFiles(t, ca1.Server(t), nil).watcher(t, io.Discard, nil)
	if err := noCA.VerifyClient([]*x509.Certificate{leaf1}); err == nil || !strings.Contains(err.Error(), "xds.tls.client_ca_file") {
		t.Errorf("without client_ca_file: %v, want an error naming it", err)
	}
}

// A connection's chain is verified once per client CA pool, not at every
// stream open; a reload, or a certificate of the chain expiring, verifies
// it again.
func TestVerifyClientCachesPerPool(t *testing.T) {
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "ca")
	ca.Server(t).Write(t, dir, "s")
	ca.WriteCA(t, dir, "ca.pem")
	c := &config.Config{BaseDir: dir}
	w, err := New(c, &config.TLS{CertFile: "s.crt", KeyFile: "s.key", ClientCAFile: "ca.pem", ReloadInterval: decode.Duration(time.Second)}, "xds.tls", Options{})
	if err != nil {
		t.Fatal(err)
	}
	leaf := ca.Issue(t, testcerts.LeafOptions{URIs: []string{"spiffe://td/a"}}).Cert
	for range 100 {
		if err := w.VerifyClient([]*x509.Certificate{leaf}); err != nil {
			t.Fatal(err)
		}
	}
	if n := w.verifies.Load(); n != 1 {
		t.Fatalf("100 stream opens verified the chain %d times, want 1", n)
	}
	// A reload (same CA, new files) verifies it again; a CA taken out
	// refuses it at once.
	other := testcerts.NewCA(t, "other")
	testcerts.WriteFile(t, filepath.Join(dir, "ca.pem"), append(append([]byte{}, ca.PEM...), other.PEM...))
	if !w.poll() {
		t.Fatal("the new CA bundle was not loaded")
	}
	if err := w.VerifyClient([]*x509.Certificate{leaf}); err != nil || w.verifies.Load() != 2 {
		t.Fatalf("after a reload: %v, %d verifications, want 2", err, w.verifies.Load())
	}
	testcerts.WriteFile(t, filepath.Join(dir, "ca.pem"), other.PEM)
	w.poll()
	if err := w.VerifyClient([]*x509.Certificate{leaf}); err == nil {
		t.Fatal("a chain whose CA left the bundle still verifies (from the cache)")
	}
	// A certificate that expires is not served from the cache past its
	// NotAfter.
	testcerts.WriteFile(t, filepath.Join(dir, "ca.pem"), ca.PEM)
	w.poll()
	short := ca.Issue(t, testcerts.LeafOptions{NotAfter: time.Now().Add(2 * time.Second)}).Cert // whole seconds
	if err := w.VerifyClient([]*x509.Certificate{short}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(short.NotAfter) + 100*time.Millisecond)
	if err := w.VerifyClient([]*x509.Certificate{short}); err == nil {
		t.Fatal("an expired certificate still verifies (from the cache)")
	}
}
