package xds

import (
	"context"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/peer"
)

// Closing the connection of a client whose certificate no longer holds.
//
// A stream refused at open because the connection's client certificate
// expired since the handshake, or because the client CA pool no longer
// verifies it (reasons "expired" and "untrusted", authorize.go), is not
// the end of it: the client (grpc-go, Envoy) opens its next stream on the
// same HTTP/2 connection, which PermissionDenied does not close, and the
// connection keeps the certificate of its handshake. A client that rotated
// its certificate (SPIRE, cert-manager) would be refused until something
// else closed the connection. So the server closes that connection,
// closeDelay after the refusal (time for the status to reach the client),
// once per connection: the client connects again, and the new handshake
// checks the certificate it holds now: a current one is served; one whose
// CA left the pool fails the handshake.
//
// gRPC has no per-connection close: Run's listener (acctListener) gives
// each connection it accepts its accounting, which holds the net.Conn.
// Closing it ends every stream of the connection, those opened before the
// refusal too; other connections are untouched.

// closeDelay is how long after a refusal its connection is closed.
const closeDelay = 250 * time.Millisecond

// acctListener gives each connection it accepts its accounting (connAcct,
// guard.go), which every stream of the connection finds through its peer's
// local address (connAcctOf): gRPC hands each stream the connection's
// LocalAddr (peer.Peer), through its TLS handshake too. A stats.Handler's
// TagConn could hand the accounting over as well, but gRPC then builds and
// reports a record of every message each way (allocations and clock reads
// per request and per response), which nothing here reads.
type acctListener struct{ net.Listener }

func (l acctListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return newAcctConn(c), nil
}

// acctConn is an accepted connection with its accounting, whose conn it is.
type acctConn struct {
	net.Conn
	local net.Addr // an *acctAddr
}

func newAcctConn(c net.Conn) *acctConn {
	ac := &acctConn{Conn: c}
	ca := newConnAcct()
	ca.conn = ac
	ac.local = &acctAddr{Addr: c.LocalAddr(), acct: ca}
	return ac
}

func (c *acctConn) LocalAddr() net.Addr { return c.local }

// acctAddr is an accepted connection's local address, as it was, with the
// connection's accounting.
type acctAddr struct {
	net.Addr
	acct *connAcct
}

// connAcctOf returns the accounting of the connection of the stream whose
// context ctx is (nil: not a connection of acctListener).
func connAcctOf(ctx context.Context) *connAcct {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil
	}
	if a, ok := p.LocalAddr.(*acctAddr); ok && a.Addr != nil {
		return a.acct
	}
	return nil
}

// closeConn closes, closeDelay from now, the connection of the stream whose
// context ctx is, refused for reason: once per connection. It reports
// whether it will.
func (s *Server) closeConn(ctx context.Context, reason string) bool {
	ca := connAcctOf(ctx)
	if ca == nil || ca.conn == nil || !ca.closing.CompareAndSwap(false, true) {
		return false
	}
	c := ca.conn
	time.AfterFunc(closeDelay, func() { c.Close() })
	s.connsClosed.WithLabelValues(reason).Inc()
	if ok, suppressed := s.closeLog.allow(time.Now()); ok {
		var addr string
		if p, _ := peer.FromContext(ctx); p != nil && p.Addr != nil {
			addr = p.Addr.String()
		}
		s.log.Info("closing the xDS connection: its client certificate no longer holds; the client reconnects, and the new handshake checks the certificate it has now",
			"reason", reason, "peer", addr, "closes_not_logged", suppressed)
	}
	return true
}

func newConnsClosedCounter() *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "xdsbridge_xds_connections_closed_total",
		Help: "xDS connections the server closed after refusing a stream because the client certificate expired (reason expired) or no longer verifies against xds.tls.client_ca_file (untrusted) since the connection's handshake, so that the client handshakes again.",
	}, []string{"reason"})
	c.WithLabelValues(deniedExpired)
	c.WithLabelValues(deniedUntrusted)
	return c
}
