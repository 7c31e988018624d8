package xds

import (
	"context"
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/stats"
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
// gRPC has no per-connection close: Run wraps its listener (connTracker)
// to know the net.Conn of every connection by its remote address, and
// TagConn (connStats) hands each connection's accounting its net.Conn.
// Closing it ends every stream of the connection, those opened before the
// refusal too; other connections are untouched.

// closeDelay is how long after a refusal its connection is closed.
const closeDelay = 250 * time.Millisecond

// connTracker is a listener that knows its accepted connections (until
// they are closed) by their remote address.
type connTracker struct {
	net.Listener
	mu    sync.Mutex
	conns map[string][]*trackedConn
}

func newConnTracker(lis net.Listener) *connTracker {
	return &connTracker{Listener: lis, conns: map[string][]*trackedConn{}}
}

func (t *connTracker) Accept() (net.Conn, error) {
	c, err := t.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, t: t, key: addrKey(c.RemoteAddr())}
	t.mu.Lock()
	t.conns[tc.key] = append(t.conns[tc.key], tc)
	t.mu.Unlock()
	return tc, nil
}

// lookup returns the open connection whose remote address is addr; nil if
// none, or if more than one has that address (as unnamed unix sockets do).
func (t *connTracker) lookup(addr net.Addr) net.Conn {
	t.mu.Lock()
	defer t.mu.Unlock()
	if cs := t.conns[addrKey(addr)]; len(cs) == 1 {
		return cs[0]
	}
	return nil
}

func (t *connTracker) remove(tc *trackedConn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	cs := t.conns[tc.key]
	for i, c := range cs {
		if c == tc {
			cs = append(cs[:i], cs[i+1:]...)
			break
		}
	}
	if len(cs) == 0 {
		delete(t.conns, tc.key)
	} else {
		t.conns[tc.key] = cs
	}
}

// len is the number of connections tracked.
func (t *connTracker) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, cs := range t.conns {
		n += len(cs)
	}
	return n
}

func addrKey(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.Network() + " " + a.String()
}

// trackedConn leaves its tracker when closed (by gRPC: the connection
// ended, its handshake failed, the server stopped; or by closeConn).
type trackedConn struct {
	net.Conn
	t    *connTracker
	key  string
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() { c.t.remove(c) })
	return c.Conn.Close()
}

// connStats is the server's stats.Handler: the guard's, whose TagConn also
// gives the connection's accounting its net.Conn.
type connStats struct {
	*guard
	conns *connTracker
}

func (h connStats) TagConn(ctx context.Context, info *stats.ConnTagInfo) context.Context {
	ctx = h.guard.TagConn(ctx, info)
	if ca, _ := ctx.Value(connKey{}).(*connAcct); ca != nil && info != nil {
		ca.conn = h.conns.lookup(info.RemoteAddr)
	}
	return ctx
}

// closeConn closes, closeDelay from now, the connection of the stream whose
// context ctx is, refused for reason: once per connection. It reports
// whether it will.
func (s *Server) closeConn(ctx context.Context, reason string) bool {
	ca, _ := ctx.Value(connKey{}).(*connAcct)
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
