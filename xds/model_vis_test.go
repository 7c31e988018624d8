package xds_test

// Visibility in the model: some clients connect with a certificate that
// xds.authorization maps to resource patterns, so that for them the
// world is the filtered one: they must hold exactly what is served and
// visible within their interest, never receive a hidden name, and be told
// of a hidden name only that it does not exist, and only in answer to a
// request that names it (a change to it sends them nothing). Every
// history runs over mTLS (bufconn), each client class on its own
// connection.

import (
	"crypto/tls"
	"crypto/x509"
	"math/rand/v2"
	"os"
	"path"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/credentials"

	"github.com/xdsbridge/xdsbridge/internal/testcerts"
	"github.com/xdsbridge/xdsbridge/xds"
)

// modelVis are the visibility classes: 0 sees everything; the others see
// the names matching their patterns.
var modelVis = [][]string{nil, {"s[0-3]"}, {"s[13579]"}}

// visName is how a class is written in a history ("sees s[0-3]").
func visName(v int) string { return strings.Join(modelVis[v], ",") }

func parseVis(s string) (int, bool) {
	for i := range modelVis {
		if i > 0 && visName(i) == s {
			return i, true
		}
	}
	return 0, false
}

func sees(v int, name string) bool {
	if v == 0 {
		return true
	}
	for _, p := range modelVis[v] {
		if ok, _ := path.Match(p, name); ok {
			return true
		}
	}
	return false
}

// The model's authorization: class i>0 by its exact URI, class 0 by the
// trust domain (after them: the first rule that matches decides).
var modelAuthz = func() *xds.Authorization {
	a := &xds.Authorization{}
	for i := 1; i < len(modelVis); i++ {
		// The barrier's listeners (model_run_test.go) are seen by all.
		a.Allow = append(a.Allow, xds.AuthRule{URI: visURI(i), Resources: append([]string{"barrier-*"}, modelVis[i]...)})
	}
	a.Allow = append(a.Allow, xds.AuthRule{SPIFFETrustDomain: "model.test"})
	return a
}()

func visURI(i int) string { return "spiffe://model.test/vis/" + string(rune('0'+i)) }

type modelCreds struct {
	server  credentials.TransportCredentials
	clients []credentials.TransportCredentials // per class
}

var (
	modelTLSOnce sync.Once
	modelTLS     *modelCreds
)

// setupModelTLS makes the model's CA and certificates, once per process.
func setupModelTLS(t testing.TB) {
	modelTLSOnce.Do(func() {
		ca := testcerts.NewCA(t, "model CA")
		pool := x509.NewCertPool()
		pool.AddCert(ca.Cert)
		pair := func(l testcerts.Leaf) tls.Certificate {
			c, err := tls.X509KeyPair(l.CertPEM, l.KeyPEM)
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
		m := &modelCreds{server: credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{pair(ca.Server(t))},
			ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13})}
		for i := range modelVis {
			cert := pair(ca.Issue(t, testcerts.LeafOptions{CommonName: "model client", URIs: []string{visURI(i)}}))
			m.clients = append(m.clients, credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: "localhost",
				Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}))
		}
		modelTLS = m
	})
	if modelTLS == nil {
		t.Fatal("model TLS setup failed")
	}
}

// genVis gives some clients of a history a visibility class, from its own
// generator (the history of a seed is otherwise as it was before
// visibility). XDSBRIDGE_MODEL_NOVIS=1: none (triage).
func genVis(h *mhistory) {
	if os.Getenv("XDSBRIDGE_MODEL_NOVIS") != "" {
		return
	}
	rng := rand.New(rand.NewPCG(h.seed, 0x766973))
	for i := range h.clients {
		if rng.IntN(3) == 0 {
			h.clients[i].vis = 1 + rng.IntN(len(modelVis)-1)
		}
	}
}

// hiddenAsked notes that the client named hidden name n in a request: it
// may be told once that n does not exist.
func (ts *tstate) hiddenAsked(c *mclient, n string) {
	if n != "*" && !sees(c.vis, n) {
		ts.hiddenOK[n]++
	}
}

// hiddenSubscribed notes that the client subscribed to name n: if it is
// hidden, the client may be told once more that n does not exist, and
// must be told so at least once after this request.
func (ts *tstate) hiddenSubscribed(c *mclient, n string) {
	ts.hiddenAsked(c, n)
	if n != "*" && !sees(c.vis, n) {
		ts.hiddenOwed[n] = true
	}
}
