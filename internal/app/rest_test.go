package app

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/xdsbridge/xdsbridge/config"
	"github.com/xdsbridge/xdsbridge/internal/testcerts"
)

// restApp starts the app with xds.rest over mTLS (reloaded every
// 100ms), certificates in a temp dir (certApp).
func restApp(t *testing.T) (a *App, ca *testcerts.CA, dir string) {
	t.Helper()
	return certApp(t, `
xds:
  listen: "127.0.0.1:0"
  rest:
    listen: "127.0.0.1:0"
    tls: {cert_file: rest.crt, key_file: rest.key, client_ca_file: ca.pem, reload_interval: 100ms}
admin: {listen: "127.0.0.1:0"}
logging: {level: error}
sources:
  - name: static
    file: {path: services.yaml}
`, "rest")
}

// restPoll POSTs an empty DiscoveryRequest for clusters over TLS.
func restPoll(a *App, cfg *tls.Config) (int, string, error) {
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}}
	resp, err := hc.Post("https://"+a.RESTAddr()+"/v3/discovery:clusters", "application/json", strings.NewReader("{}"))
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// TestRESTOverMTLS: the REST listener takes the TLS options of the
// other listeners: a client without a certificate of the client CA is
// refused at the handshake, and a rotation of the server certificate and
// client CA is picked up without a restart.
func TestRESTOverMTLS(t *testing.T) {
	a, ca, dir := restApp(t)
	ca2 := testcerts.NewCA(t, "ca2")
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	roots.AddCert(ca2.Cert)
	c1 := clientCert(t, ca)
	// A keep-alive connection of the old CA, open across the rotation.
	kept := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "localhost", Certificates: []tls.Certificate{c1}}}}
	defer kept.CloseIdleConnections()
	keptPoll := func() (int, error) {
		resp, err := kept.Post("https://"+a.RESTAddr()+"/v3/discovery:clusters", "application/json", strings.NewReader("{}"))
		if err != nil {
			return 0, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	if code, err := keptPoll(); err != nil || code != 200 {
		t.Fatalf("kept connection: %d %v", code, err)
	}

	code, body, err := restPoll(a, &tls.Config{RootCAs: roots, ServerName: "localhost", Certificates: []tls.Certificate{c1}})
	if err != nil || code != 200 || !strings.Contains(strings.ReplaceAll(body, " ", ""), `"name":"web"`) {
		t.Fatalf("with a client certificate: %d %q %v", code, body, err)
	}
	if _, _, err := restPoll(a, &tls.Config{RootCAs: roots, ServerName: "localhost"}); err == nil {
		t.Fatal("served a client without a certificate")
	}
	mfs, err := a.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	expiry := false
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				expiry = expiry || mf.GetName() == "xdsbridge_tls_certificate_expiry_timestamp_seconds" && l.GetValue() == "xds.rest" && m.GetGauge().GetValue() > 0
			}
		}
	}
	if !expiry {
		t.Error(`no xdsbridge_tls_certificate_expiry_timestamp_seconds{listener="xds.rest"}`)
	}

	// Rotate: a server certificate from ca2, and only ca2 for clients.
	next := ca2.Server(t)
	next.Write(t, dir, "rest")
	ca2.WriteCA(t, dir, "ca.pem")
	deadline := time.Now().Add(10 * time.Second)
	for !a.RESTTLS.Certificate().Equal(next.Cert) {
		if time.Now().After(deadline) {
			t.Fatal("rotation not loaded")
		}
		time.Sleep(20 * time.Millisecond)
	}
	only2 := x509.NewCertPool()
	only2.AddCert(ca2.Cert)
	c2 := clientCert(t, ca2)
	if code, body, err := restPoll(a, &tls.Config{RootCAs: only2, ServerName: "localhost", Certificates: []tls.Certificate{c2}}); err != nil || code != 200 {
		t.Fatalf("after rotation, new CA: %d %q %v", code, body, err)
	}
	if _, _, err := restPoll(a, &tls.Config{RootCAs: roots, ServerName: "localhost", Certificates: []tls.Certificate{c1}}); err == nil {
		t.Fatal("after rotation, a client of the old CA was served")
	}
	// The connection verified by the old CA before the rotation is
	// refused at its next request.
	if code, err := keptPoll(); err != nil || code != http.StatusForbidden {
		t.Fatalf("kept connection of the old CA after rotation: %d %v, want 403", code, err)
	}
}

// TestRESTShutdownEndsHeldPolls: a poll held when the bridge stops
// ends with the bridge, answered 304 (it used to get an empty 200, which
// Envoy would count as a rejected update); Run returns without waiting
// out max_wait.
func TestRESTShutdownEndsHeldPolls(t *testing.T) {
	dir := t.TempDir()
	writeWebServices(t, dir)
	cfg, err := config.Parse([]byte(`
xds: {listen: "127.0.0.1:0", rest: {listen: "127.0.0.1:0", max_wait: 60s}}
admin: {listen: "127.0.0.1:0"}
logging: {level: error}
sources: [{name: static, file: {path: services.yaml}}]
`), dir, SourceTypeNames())
	if err != nil {
		t.Fatal(err)
	}
	a, done, cancel := runApp(t, cfg)
	defer cancel()
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	var version string
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := hc.Post("http://"+a.RESTAddr()+"/v3/discovery:clusters", "application/json", strings.NewReader("{}"))
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				_, rest, _ := strings.Cut(strings.ReplaceAll(string(b), " ", ""), `"versionInfo":"`)
				version, _, _ = strings.Cut(rest, `"`)
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no first answer: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	polled := make(chan error, 1)
	go func() {
		resp, err := hc.Post("http://"+a.RESTAddr()+"/v3/discovery:clusters", "application/json", strings.NewReader(`{"version_info":"`+version+`"}`))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusNotModified {
				err = fmt.Errorf("answered %s", resp.Status)
			}
		}
		polled <- err
	}()
	deadline = time.Now().Add(10 * time.Second)
	for a.REST == nil || !restPollHeld(t, a) {
		if time.Now().After(deadline) {
			t.Fatal("the poll was not held")
		}
		time.Sleep(10 * time.Millisecond)
	}
	start := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s of shutdown with a poll held")
	}
	// 304 (nothing changed), or the connection closed: never an empty 200.
	perr := <-polled
	if perr != nil && strings.Contains(perr.Error(), "answered") {
		t.Fatalf("held poll at shutdown: %v, want 304 or the connection closed", perr)
	}
	t.Logf("stopped %v after cancel with a poll held (max_wait 60s); the poll: %v (nil: 304)", time.Since(start), perr)
}

// restPollHeld reports whether a REST poll is held.
func restPollHeld(t *testing.T, a *App) bool {
	t.Helper()
	mfs, err := a.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "xdsbridge_xds_rest_held_polls" {
			return mf.GetMetric()[0].GetGauge().GetValue() > 0
		}
	}
	return false
}
