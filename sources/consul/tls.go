package consul

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/consul/api"
)

// tlsSettings is the client TLS of the source, loaded at New so that a
// mis-set CA or certificate is an error at start naming the field, and
// the same material is used at run time (api.NewHttpClient does not load
// the files again when the transport already has a TLS config).
type tlsSettings struct {
	config *tls.Config
	// Field names for errors and hints, each with where its value came
	// from when that is the environment: "tls.ca_file (from CONSUL_CACERT)".
	caField, caPathField, certField, keyField, serverNameField string
	// The paths in use (empty: not set).
	caFile, caPath, certFile, keyFile string
}

// tlsField names a TLS field; set tells whether the config set it (else the
// value, if any, came from env).
func tlsField(name string, set bool, env string) string {
	if set {
		return "tls." + name
	}
	return "tls." + name + " (from " + env + ")"
}

// loadTLS builds the client TLS config from the effective settings (the
// config over the CONSUL_* environment), as api.SetupTLSConfig would, but
// with errors naming the field: ca_file and ca_path must be PEM holding
// certificates, cert_file and key_file a matching pair. As in the Consul
// API, ca_file wins over ca_path when both are set (both are checked).
func loadTLS(c TLS, t api.TLSConfig) (*tlsSettings, error) {
	s := &tlsSettings{
		config:          &tls.Config{InsecureSkipVerify: t.InsecureSkipVerify},
		caField:         tlsField("ca_file", c.CAFile != "", "CONSUL_CACERT"),
		caPathField:     tlsField("ca_path", c.CAPath != "", "CONSUL_CAPATH"),
		certField:       tlsField("cert_file", c.CertFile != "", "CONSUL_CLIENT_CERT"),
		keyField:        tlsField("key_file", c.KeyFile != "", "CONSUL_CLIENT_KEY"),
		serverNameField: tlsField("server_name", c.ServerName != "", "CONSUL_TLS_SERVER_NAME"),
		caFile:          t.CAFile,
		caPath:          t.CAPath,
		certFile:        t.CertFile,
		keyFile:         t.KeyFile,
	}
	if t.Address != "" {
		server := t.Address
		if strings.LastIndex(server, ":") > strings.LastIndex(server, "]") {
			host, _, err := net.SplitHostPort(server)
			if err != nil {
				return nil, fmt.Errorf("%s: %q: %v", s.serverNameField, t.Address, err)
			}
			server = host
		}
		s.config.ServerName = server
	}
	if t.CertFile != "" && t.KeyFile != "" {
		cert, err := loadKeyPair(s.certField, t.CertFile, s.keyField, t.KeyFile)
		if err != nil {
			return nil, err
		}
		s.config.Certificates = []tls.Certificate{cert}
	}
	var filePool, pathPool *x509.CertPool
	if t.CAFile != "" {
		certs, err := loadCAFile(s.caField, t.CAFile)
		if err != nil {
			return nil, err
		}
		filePool = poolOf(certs)
	}
	if t.CAPath != "" {
		certs, err := loadCAPath(s.caPathField, t.CAPath)
		if err != nil {
			return nil, err
		}
		pathPool = poolOf(certs)
	}
	switch {
	case filePool != nil:
		s.config.RootCAs = filePool
	case pathPool != nil:
		s.config.RootCAs = pathPool
	}
	return s, nil
}

func poolOf(certs []*x509.Certificate) *x509.CertPool {
	p := x509.NewCertPool()
	for _, c := range certs {
		p.AddCert(c)
	}
	return p
}

// parseCerts reads the certificates of a PEM file: not PEM at all, a
// certificate block that does not parse, or no certificate block are
// errors "<field>: <path>: ...".
func parseCerts(field, path string, b []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	blocks := 0
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		blocks++
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: certificate %d: %v", field, path, len(certs)+1, err)
		}
		certs = append(certs, c)
	}
	switch {
	case blocks == 0:
		return nil, fmt.Errorf("%s: %s: not PEM (no -----BEGIN block found)", field, path)
	case len(certs) == 0:
		return nil, fmt.Errorf("%s: %s: no certificates found (no CERTIFICATE block)", field, path)
	}
	return certs, nil
}

// maxPEMFile bounds what is read of a CA, certificate or key file.
const maxPEMFile = 4 << 20

// readPEMFile reads a regular file (symlinks followed) of at most
// maxPEMFile bytes; a device, a FIFO or a directory is an error, so a
// mistyped path neither blocks nor reads without end.
func readPEMFile(field, path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %s: not a regular file (%s)", field, path, fi.Mode().Type())
	}
	b, err := io.ReadAll(io.LimitReader(f, maxPEMFile+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", field, path, err)
	}
	if len(b) > maxPEMFile {
		return nil, fmt.Errorf("%s: %s: larger than %d MiB", field, path, maxPEMFile>>20)
	}
	return b, nil
}

func loadCAFile(field, path string) ([]*x509.Certificate, error) {
	b, err := readPEMFile(field, path)
	if err != nil {
		return nil, err
	}
	return parseCerts(field, path, b)
}

// loadCAPath reads every file under dir (recursively, as the Consul API
// does); each must hold certificates, and there must be at least one. A
// symlink to a file is read; a symlink to a directory is skipped (the
// ..data links of a Kubernetes volume point into a directory the walk
// reads anyway).
func loadCAPath(field, dir string) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		if d.Type()&fs.ModeSymlink != 0 {
			if fi, err := os.Stat(p); err == nil && fi.IsDir() {
				return nil
			}
		}
		c, err := loadCAFile(field, p)
		if err != nil {
			return err
		}
		certs = append(certs, c...)
		return nil
	})
	if err != nil {
		if strings.HasPrefix(err.Error(), field+": ") {
			return nil, err
		}
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	if len(certs) == 0 {
		return nil, fmt.Errorf("%s: %s: no certificates found (no files)", field, dir)
	}
	return certs, nil
}

// loadKeyPair loads the client certificate and its key; errors name the
// field at fault, or both when the key does not match the certificate.
func loadKeyPair(certField, certPath, keyField, keyPath string) (tls.Certificate, error) {
	certPEM, err := readPEMFile(certField, certPath)
	if err != nil {
		return tls.Certificate{}, err
	}
	if _, err := parseCerts(certField, certPath, certPEM); err != nil {
		return tls.Certificate{}, err
	}
	keyPEM, err := readPEMFile(keyField, keyPath)
	if err != nil {
		return tls.Certificate{}, err
	}
	if !hasKeyBlock(keyPEM) {
		return tls.Certificate{}, fmt.Errorf("%s: %s: no private key found (no PEM block of type ... PRIVATE KEY)", keyField, keyPath)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		msg := strings.TrimPrefix(err.Error(), "tls: ")
		return tls.Certificate{}, fmt.Errorf("%s, %s: %s, %s: %s", certField, keyField, certPath, keyPath, msg)
	}
	return cert, nil
}

func hasKeyBlock(b []byte) bool {
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return false
		}
		if blk.Type == "PRIVATE KEY" || strings.HasSuffix(blk.Type, " PRIVATE KEY") {
			return true
		}
	}
}

// tlsProblem is a TLS failure against the agent explained: what failed and
// the field to check.
type tlsProblem struct {
	field string // the setting to check, e.g. "tls.ca_file"
	hint  string // what is wrong, in words
}

// diagnose explains a request error that is a TLS failure against the
// agent: its certificate not trusted (unknown authority, wrong name,
// expired), the agent refusing the source's client certificate (or its
// absence), or an agent that does not speak TLS. Other errors: nil.
func (s *tlsSettings) diagnose(err error) *tlsProblem {
	var (
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		record   tls.RecordHeaderError
		opErr    *net.OpError
	)
	caWhere := func() string {
		switch {
		case s.caFile != "":
			return fmt.Sprintf("%s (%s)", s.caField, s.caFile)
		case s.caPath != "":
			return fmt.Sprintf("%s (%s)", s.caPathField, s.caPath)
		}
		return "the system roots (no tls.ca_file or tls.ca_path)"
	}
	caField := func() string {
		switch {
		case s.caFile != "":
			return s.caField
		case s.caPath != "":
			return s.caPathField
		}
		return "tls.ca_file"
	}
	switch {
	case errors.As(err, &unknown):
		return &tlsProblem{caField(), "the agent's certificate is not signed by a CA in " + caWhere()}
	case errors.As(err, &hostname):
		return &tlsProblem{"tls.server_name", fmt.Sprintf("the agent's certificate is not valid for the name %s (%v); set tls.server_name to a name it holds, or use that name in address", hostname.Host, hostname)}
	case errors.As(err, &invalid):
		return &tlsProblem{caField(), fmt.Sprintf("the agent's certificate does not verify against %s: %v", caWhere(), invalid)}
	case errors.As(err, &record), strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		return &tlsProblem{"scheme", "the agent does not answer TLS (a plain http agent?); check scheme and address"}
	}
	alert := ""
	if errors.As(err, &opErr) && opErr.Op == "remote error" && opErr.Err != nil {
		alert = opErr.Err.Error()
	} else if _, a, ok := strings.Cut(err.Error(), "remote error: "); ok {
		alert = a // the chain was flattened on the way (HTTP/2)
	}
	if !strings.HasPrefix(alert, "tls: ") || !refusedCert(alert) {
		return nil
	}
	if s.certFile == "" {
		return &tlsProblem{"tls.cert_file", "the agent refused the handshake (" + alert + "): it wants a client certificate and none is set; set tls.cert_file and tls.key_file"}
	}
	if alert == "tls: certificate required" {
		// A Go client sends no certificate when the agent's list of
		// acceptable CAs does not hold its issuer.
		return &tlsProblem{"tls.cert_file", fmt.Sprintf("the agent wants a client certificate signed by a CA it trusts, and the one in %s (%s) is not, so none was sent (%s)", s.certField, s.certFile, alert)}
	}
	return &tlsProblem{"tls.cert_file", fmt.Sprintf("the agent refused the client certificate in %s (%s): %s; check that it is signed by a CA the agent trusts and is not expired", s.certField, s.certFile, alert)}
}

// refusedCert tells whether a TLS alert is a peer refusing a certificate:
// bad_certificate, unsupported_certificate, certificate_revoked,
// certificate_expired, certificate_unknown, unknown_ca,
// certificate_required, access_denied.
func refusedCert(alert string) bool {
	for _, a := range []string{"bad certificate", "unsupported certificate", "revoked certificate", "expired certificate", "unknown certificate", "unknown certificate authority", "certificate required", "access denied"} {
		if strings.HasPrefix(alert, "tls: "+a) {
			return true
		}
	}
	return false
}
