package e2e

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xdsbridge/xdsbridge/config"
	"github.com/xdsbridge/xdsbridge/config/decode"
	"github.com/xdsbridge/xdsbridge/internal/testcerts"
)

// The SPIFFE IDs of the examples (examples/certs/README.md):
// xdsbridge-mtls.yaml allows the trust domain prod.example.org, and the
// partner's payments namespace for the "api" services only.
const (
	envoyID    = "spiffe://prod.example.org/ns/edge/sa/envoy"
	clientID   = "spiffe://prod.example.org/ns/shop/sa/client"
	partnerID  = "spiffe://partner.example.org/ns/payments/sa/client"
	strangerID = "spiffe://other.example.org/ns/edge/sa/envoy"
)

// writeCert writes a certificate and its key as the examples name them:
// dir/name.pem and dir/name-key.pem.
func writeCert(t *testing.T, dir, name string, l testcerts.Leaf) {
	t.Helper()
	testcerts.WriteFile(t, filepath.Join(dir, name+".pem"), l.CertPEM)
	testcerts.WriteFile(t, filepath.Join(dir, name+"-key.pem"), l.KeyPEM)
}

// bridgeCert is the bridge's server certificate: the name Envoy checks
// (xdsbridge.example.org) and the address grpc-go dials (127.0.0.1).
func bridgeCert(t *testing.T, ca *testcerts.CA) testcerts.Leaf {
	return ca.Issue(t, testcerts.LeafOptions{
		CommonName: "xdsbridge",
		DNS:        []string{"xdsbridge.example.org", "localhost"},
		IPs:        []net.IP{net.IPv4(127, 0, 0, 1)},
	})
}

func spiffeCert(t *testing.T, ca *testcerts.CA, id string) testcerts.Leaf {
	return ca.Issue(t, testcerts.LeafOptions{CommonName: id[strings.LastIndex(id, "/")+1:], URIs: []string{id}})
}

// mtlsBridge is the bridge of examples/xdsbridge-mtls.yaml, run from a
// temp dir whose certs/ holds the bridge's certificate and the client CAs.
type mtlsBridge struct {
	*bridge
	certs string // the certs/ dir of the config
}

func startMTLSBridge(t *testing.T, ca *testcerts.CA, services string, edit func(*config.Config)) *mtlsBridge {
	t.Helper()
	dir := t.TempDir()
	certs := filepath.Join(dir, "certs")
	if err := os.Mkdir(certs, 0o755); err != nil {
		t.Fatal(err)
	}
	writeCert(t, certs, "xdsbridge", bridgeCert(t, ca))
	ca.WriteCA(t, certs, "ca.pem")
	if err := os.WriteFile(filepath.Join(dir, "services.yaml"), []byte(services), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile(filepath.Join(repoRoot(t), "examples", "xdsbridge-mtls.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return &mtlsBridge{bridge: startBridgeConfig(t, dir, string(cfg), edit), certs: certs}
}

// envoyCerts makes the certs/ dir of examples/envoy-mtls.yaml: Envoy's
// certificate and key, and the CAs it trusts for the bridge.
func envoyCerts(t *testing.T, leaf testcerts.Leaf, trusted ...*testcerts.CA) string {
	t.Helper()
	dir := t.TempDir()
	writeCert(t, dir, "envoy", leaf)
	testcerts.WriteFile(t, filepath.Join(dir, "ca.pem"), caBundle(trusted...))
	return dir
}

func caBundle(cas ...*testcerts.CA) []byte {
	var b []byte
	for _, ca := range cas {
		b = append(b, ca.PEM...)
	}
	return b
}

// metricSum returns the sum of every sample of a bridge metric (any
// labels); 0 when /metrics has none.
func metricSum(t *testing.T, br *bridge, name string) float64 {
	t.Helper()
	return metricSumWith(t, br, name)
}

// metricSumWith sums the samples of a bridge metric whose line contains
// each of labels (e.g. `result="SERVFAIL"`); 0 when there is none.
func metricSumWith(t *testing.T, br *bridge, name string, labels ...string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + br.app.AdminAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest != "" && rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		match := true
		for _, l := range labels {
			match = match && strings.Contains(rest, l)
		}
		if !match {
			continue
		}
		f := strings.Fields(rest[strings.LastIndex(rest, "}")+1:])
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		sum += v
	}
	return sum
}

// metricLines returns the /metrics lines of a metric, for failure messages.
func metricLines(t *testing.T, br *bridge, name string) string {
	t.Helper()
	resp, err := http.Get("http://" + br.app.AdminAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), name) {
			out = append(out, sc.Text())
		}
	}
	return strings.Join(out, "\n")
}

// errRefused: the server refused the client's certificate.
var errRefused = errors.New("client certificate refused")

// probeTLS opens a new TLS connection to the bridge's xDS port, as a
// client presenting leaf and trusting roots, and returns the certificate
// the server presented. It returns errRefused if the server refuses leaf
// (with TLS 1.3 the alert arrives after the client's side of the
// handshake, so it reads until the server's HTTP/2 settings or an alert).
func probeTLS(addr string, leaf testcerts.Leaf, roots ...*testcerts.CA) (*x509.Certificate, error) {
	pool := x509.NewCertPool()
	for _, ca := range roots {
		pool.AddCert(ca.Cert)
	}
	kp, err := tls.X509KeyPair(leaf.CertPEM, leaf.KeyPEM)
	if err != nil {
		return nil, err
	}
	d := &net.Dialer{Timeout: 2 * time.Second}
	conn, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{
		RootCAs:      pool,
		Certificates: []tls.Certificate{kp},
		ServerName:   "xdsbridge.example.org",
		NextProtos:   []string{"h2"},
	})
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	server := conn.ConnectionState().PeerCertificates[0]
	// The client preface, then wait for the server's first frame.
	if _, err := conn.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")); err != nil {
		return server, refused(err)
	}
	conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := conn.Read(make([]byte, 64)); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return server, nil // no alert: accepted
		}
		return server, refused(err)
	}
	return server, nil
}

func refused(err error) error {
	var alert tls.AlertError
	if errors.As(err, &alert) || strings.Contains(err.Error(), "remote error: tls") {
		return fmt.Errorf("%w: %v", errRefused, err)
	}
	return err
}

// TestEnvoyMTLS: a real Envoy (examples/envoy-mtls.yaml) over mTLS delta
// ADS to the bridge of examples/xdsbridge-mtls.yaml follows a change of
// the services file.
func TestEnvoyMTLS(t *testing.T) {
	ca := testcerts.NewCA(t, "example CA")
	bs := startBackends(t, 2)
	br := startMTLSBridge(t, ca, servicesYAML("web", bs[0]), nil)
	ev := startEnvoyCerts(t, "envoy-mtls.yaml", br.app.XDSAddr(), envoyCerts(t, spiffeCert(t, ca, envoyID), ca))
	ev.waitTraffic(t, "b1")
	br.writeServices(t, servicesYAML("web", bs[1]))
	ev.waitTraffic(t, "b2")
	ev.assertNoRejections(t)
	if n := ev.Stats(t, "ssl.handshake")["cluster.xdsbridge.ssl.handshake"]; n < 1 {
		t.Errorf("Envoy's xdsbridge cluster made %d TLS handshakes, want at least 1", n)
	}
	if n := br.app.XDS.NACKs(); n != 0 {
		t.Fatalf("bridge counted %d NACKs", n)
	}
	if n := metricSum(t, br.bridge, "xdsbridge_xds_clients_denied_total"); n != 0 {
		t.Fatalf("an allowed Envoy was denied:\n%s", metricLines(t, br.bridge, "xdsbridge_xds_clients_denied_total"))
	}
}

// TestEnvoyMTLSDeniedSAN: an Envoy whose certificate comes from the
// trusted CA, but whose SPIFFE ID is of a trust domain no rule allows,
// gets no clusters, and the bridge counts the denial.
func TestEnvoyMTLSDeniedSAN(t *testing.T) {
	ca := testcerts.NewCA(t, "example CA")
	bs := startBackends(t, 1)
	br := startMTLSBridge(t, ca, servicesYAML("web", bs[0]), nil)
	// Envoy is ready once CDS arrives or its initial fetch times out
	// (default 15 s): shorten that wait.
	ev := startEnvoyCerts(t, "envoy-mtls.yaml", br.app.XDSAddr(), envoyCerts(t, spiffeCert(t, ca, strangerID), ca),
		"  cds_config:\n", "  cds_config:\n    initial_fetch_timeout: 1s\n")
	waitFor(t, 15*time.Second, "the bridge to count the denied Envoy", func() error {
		if n := metricSum(t, br.bridge, "xdsbridge_xds_clients_denied_total"); n < 1 {
			return fmt.Errorf("xdsbridge_xds_clients_denied_total = %v", n)
		}
		return nil
	})
	// Envoy's TLS handshake succeeded (the certificate is valid), so the
	// refusal came from authorization, after which it retries; give it a
	// moment to get anything it would get.
	if n := ev.Stats(t, "ssl.handshake")["cluster.xdsbridge.ssl.handshake"]; n < 1 {
		t.Errorf("Envoy made %d TLS handshakes with the bridge, want at least 1", n)
	}
	time.Sleep(time.Second)
	st := ev.Stats(t, "cluster_manager")
	if st["cluster_manager.active_clusters"] != 1 || st["cluster_manager.cds.update_success"] != 0 {
		body, _ := ev.Get("/clusters")
		t.Fatalf("a denied Envoy got clusters: active_clusters %d, cds.update_success %d\n%.2000s",
			st["cluster_manager.active_clusters"], st["cluster_manager.cds.update_success"], body)
	}
	if _, err := ev.hit(1); err == nil {
		t.Fatal("a request through the denied Envoy succeeded")
	}
	t.Logf("denied: %s", metricLines(t, br.bridge, "xdsbridge_xds_clients_denied_total"))
}

// TestEnvoyMTLSRestricted: an Envoy matched by the example's restricted
// rule (resources: api, api-*) gets, from its wildcard CDS subscription,
// only those clusters, with their endpoints; then a new api-* service
// too, and never web.
func TestEnvoyMTLSRestricted(t *testing.T) {
	ca := testcerts.NewCA(t, "example CA")
	bs := startBackends(t, 3)
	svcs := func(extra string) string {
		return servicesYAML("web", bs[0]) + fmt.Sprintf("  api:\n    endpoints: [{address: 127.0.0.1, port: %d}]\n  apix:\n    endpoints: [{address: 127.0.0.1, port: %d}]\n%s", bs[1].port, bs[2].port, extra)
	}
	br := startMTLSBridge(t, ca, svcs(""), nil)
	ev := startEnvoyCerts(t, "envoy-mtls.yaml", br.app.XDSAddr(), envoyCerts(t, spiffeCert(t, ca, partnerID), ca))
	waitFor(t, 10*time.Second, "Envoy to get cluster api with its endpoint", func() error {
		if got := ev.clusterHosts(t, "api"); !slices.Equal(got, hostsOf(bs[1])) {
			return fmt.Errorf("api hosts %v", got)
		}
		return nil
	})
	br.writeServices(t, svcs(fmt.Sprintf("  api-v2:\n    endpoints: [{address: 127.0.0.1, port: %d}]\n", bs[2].port)))
	waitFor(t, 10*time.Second, "Envoy to get cluster api-v2 with its endpoint", func() error {
		if got := ev.clusterHosts(t, "api-v2"); !slices.Equal(got, hostsOf(bs[2])) {
			return fmt.Errorf("api-v2 hosts %v", got)
		}
		return nil
	})
	if got := envoyClusters(t, ev); strings.Join(got, ",") != "api,api-v2" {
		t.Fatalf("Envoy's dynamic clusters %v, want only api and api-v2 (not web, apix)", got)
	}
	if _, err := ev.hit(1); err == nil {
		t.Fatal("a request routed to web succeeded: the partner's Envoy has web")
	}
	ev.assertNoRejections(t)
}

// envoyClusters lists the clusters in Envoy's /clusters but its static
// xdsbridge.
func envoyClusters(t *testing.T, ev *envoy) []string {
	t.Helper()
	body, err := ev.Get("/clusters")
	if err != nil {
		t.Fatal(err)
	}
	set := map[string]bool{}
	for _, line := range strings.Split(body, "\n") {
		if name, _, ok := strings.Cut(line, "::"); ok && name != "xdsbridge" {
			set[name] = true
		}
	}
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// TestEnvoyMTLSRotation rotates the bridge's server certificate to one
// from a new CA, and its client CA bundle from old to old+new to new,
// under a connected Envoy: Envoy keeps its connection and ADS stream, is
// sent nothing again, and still gets later changes; new connections see
// the new certificate and the new client CAs.
func TestEnvoyMTLSRotation(t *testing.T) {
	oldCA, newCA := testcerts.NewCA(t, "old CA"), testcerts.NewCA(t, "new CA")
	bs := startBackends(t, 3)
	br := startMTLSBridge(t, oldCA, servicesYAML("web", bs[0]), func(c *config.Config) {
		c.XDS.TLS.ReloadInterval = decode.Duration(100 * time.Millisecond)
	})
	// Envoy already trusts both CAs for the bridge (its static bootstrap
	// is not reloaded); its own certificate is from the old one.
	ev := startEnvoyCerts(t, "envoy-mtls.yaml", br.app.XDSAddr(), envoyCerts(t, spiffeCert(t, oldCA, envoyID), oldCA, newCA))
	ev.waitTraffic(t, "b1")
	addr := br.app.XDSAddr()
	oldClient, newClient := spiffeCert(t, oldCA, clientID), spiffeCert(t, newCA, clientID)

	// What must not move while only the certificates change.
	const filter = `^(control_plane\.connected_state|cluster\.xdsbridge\.upstream_cx_total|cluster_manager\.cds\.(update_attempt|update_success|version)|cluster\.web\.(update_attempt|update_success|version))$`
	before := ev.Stats(t, filter)
	if before["control_plane.connected_state"] != 1 || before["cluster.xdsbridge.upstream_cx_total"] != 1 {
		t.Fatalf("before rotation: %v", before)
	}
	if len(before) != 8 {
		t.Fatalf("Envoy stats %v: want the 8 that filter %s names", before, filter)
	}
	if _, err := probeTLS(addr, newClient, oldCA); !errors.Is(err, errRefused) {
		t.Fatalf("before rotation, a client certificate from the new CA: %v, want refused", err)
	}
	unchanged := func(step string) {
		t.Helper()
		if after := ev.Stats(t, filter); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Fatalf("%s: Envoy's connection or xDS state moved without a change:\nbefore %v\nafter  %v", step, before, after)
		}
	}

	// 1. A server certificate from the new CA, and clients of both CAs.
	newServer := bridgeCert(t, newCA)
	testcerts.WriteFile(t, filepath.Join(br.certs, "ca.pem"), caBundle(oldCA, newCA))
	writeCert(t, br.certs, "xdsbridge", newServer)
	waitFor(t, 10*time.Second, "new connections to get the new certificate and accept both CAs", func() error {
		got, err := probeTLS(addr, newClient, oldCA, newCA)
		if err != nil {
			return err
		}
		if !got.Equal(newServer.Cert) {
			return fmt.Errorf("server presented %s (serial %s), not the new certificate", got.Issuer.CommonName, got.SerialNumber)
		}
		if _, err := probeTLS(addr, oldClient, newCA); err != nil {
			return fmt.Errorf("a client of the old CA: %w", err)
		}
		return nil
	})
	time.Sleep(500 * time.Millisecond) // several reload intervals
	unchanged("after the new server certificate")

	// 2. Clients of the new CA only. Established connections stay.
	testcerts.WriteFile(t, filepath.Join(br.certs, "ca.pem"), newCA.PEM)
	waitFor(t, 10*time.Second, "a client certificate of the old CA to be refused", func() error {
		if _, err := probeTLS(addr, oldClient, newCA); !errors.Is(err, errRefused) {
			return fmt.Errorf("a client of the old CA: %v, want refused", err)
		}
		return nil
	})
	if _, err := probeTLS(addr, newClient, newCA); err != nil {
		t.Fatalf("a client of the new CA: %v", err)
	}
	time.Sleep(500 * time.Millisecond)
	unchanged("after the new client CA")

	// A change still reaches Envoy, on the same connection.
	br.writeServices(t, servicesYAML("web", bs[1], bs[2]))
	ev.waitTraffic(t, "b2", "b3")
	after := ev.Stats(t, filter)
	if after["cluster.xdsbridge.upstream_cx_total"] != 1 || after["control_plane.connected_state"] != 1 {
		t.Fatalf("after the change: %v", after)
	}
	ev.assertNoRejections(t)
}

// rewriteExample returns examples/<name> with each pair's first string
// (which must be there) replaced by its second.
func rewriteExample(t *testing.T, name string, pairs ...string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "examples", name))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(pairs); i += 2 {
		if !bytes.Contains(b, []byte(pairs[i])) {
			t.Fatalf("examples/%s has no %q", name, pairs[i])
		}
		b = bytes.ReplaceAll(b, []byte(pairs[i]), []byte(pairs[i+1]))
	}
	return b
}
