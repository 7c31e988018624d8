package healthcheck

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// UserAgent is sent by the HTTP and gRPC probes.
const UserAgent = "xdsbridge-healthcheck"

// maxBody is how much of an HTTP response body a probe reads (and discards)
// before it closes the connection.
const maxBody = 4 << 10

// connectFault, when set, is the error that the connects of probes fail
// with instead of connecting. Tests set it to cause the local failures
// they cannot cause without changing the host (EADDRNOTAVAIL: no free
// ephemeral port).
var connectFault atomic.Pointer[syscall.Errno]

// faultControl is a net.Dialer's Control failing as connectFault says.
func faultControl(string, string, syscall.RawConn) error {
	if errno := connectFault.Load(); errno != nil {
		return os.NewSyscallError("connect", *errno)
	}
	return nil
}

// probers holds what the probes share: the dialers.
type probers struct {
	dialer *net.Dialer
	// tcpDialer's sockets reset when closed (SO_LINGER 0), also when the
	// probe's timeout cancels a connect the kernel has just completed.
	tcpDialer   *net.Dialer
	idleTimeout time.Duration
}

func newProbers(opts Options) *probers {
	return &probers{
		dialer: &net.Dialer{KeepAlive: -1, Control: faultControl}, // kept connections are used at every interval
		tcpDialer: &net.Dialer{KeepAlive: -1, Control: func(network, address string, c syscall.RawConn) error {
			if err := faultControl(network, address, c); err != nil {
				return err
			}
			var serr error
			err := c.Control(func(fd uintptr) {
				serr = syscall.SetsockoptLinger(int(fd), syscall.SOL_SOCKET, syscall.SO_LINGER, &syscall.Linger{Onoff: 1, Linger: 0})
			})
			return cmp.Or(err, serr)
		}},
		idleTimeout: opts.HTTPIdleTimeout,
	}
}

// probeTCP succeeds when a TCP connection to addr opens within ctx. The
// connection is then reset (SO_LINGER 0) rather than closed: an orderly
// close would leave the bridge's side of every probe in TIME_WAIT for a
// minute, which at thousands of probes a second fills the host's TIME_WAIT
// table and its ephemeral ports. The backend sees the connection reset.
func (p *probers) probeTCP(ctx context.Context, addr string) error {
	conn, err := p.tcpDialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return probeError(ctx, err)
	}
	conn.Close()
	return nil
}

// abort closes conn with a reset (SO_LINGER 0), leaving no TIME_WAIT.
func abort(conn net.Conn) {
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	conn.Close()
}

// httpConn is an HTTP/1.1 connection kept between the probes of a target,
// with the request its probes send.
type httpConn struct {
	net.Conn
	req      []byte
	lastUsed time.Time
}

var readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4<<10) }}

// probeHTTP sends GET path to addr and succeeds when the status is in the
// expected ranges before deadline; ctx ends the probe early (Run
// stopping). With reuse, it sends the request on conn (dialling one if conn
// is nil, idle too long or closed by the server meanwhile) and returns the
// connection to keep for the next probe, or nil. Without reuse it asks the
// server to close the connection (Connection: close), so that the
// TIME_WAIT is on the server's side, not the bridge's.
//
// A kept connection costs a socket and no goroutine between probes; the
// read buffer is borrowed only for the probe.
func (p *probers) probeHTTP(ctx context.Context, deadline time.Time, addr string, h *HTTPConfig, reuse bool, conn *httpConn) (*httpConn, error) {
	if conn != nil && p.idleTimeout > 0 && time.Since(conn.lastUsed) > p.idleTimeout {
		conn.Close()
		conn = nil
	}
	for {
		fresh := conn == nil
		if fresh {
			// Dialled with SO_LINGER 0, so that a connect the timeout
			// cuts short after the kernel completed it leaves no
			// TIME_WAIT; an open connection gets the default back.
			dctx, cancel := context.WithDeadline(ctx, deadline)
			c, err := p.tcpDialer.DialContext(dctx, "tcp", addr)
			if err != nil {
				err = probeError(dctx, err)
				cancel()
				return nil, err
			}
			cancel()
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(-1)
			}
			conn = &httpConn{Conn: c, req: httpRequest(addr, h, reuse)}
		}
		keep, answered, err := roundTrip(ctx, deadline, conn, h)
		keep = keep && reuse
		if !keep {
			if answered {
				conn.Close()
			} else {
				abort(conn.Conn)
			}
		}
		if err != nil && !fresh && !answered && ctx.Err() == nil && time.Now().Before(deadline) {
			// The server closed the kept connection between probes:
			// that says nothing of the host. Try once on a new one.
			conn = nil
			continue
		}
		if !keep {
			return nil, err
		}
		conn.lastUsed = time.Now()
		return conn, err
	}
}

// httpRequest is the GET a probe sends.
func httpRequest(addr string, h *HTTPConfig, reuse bool) []byte {
	host := h.Host
	if host == "" {
		host = addr
	}
	req := make([]byte, 0, 96+len(h.Path)+len(host))
	req = append(req, "GET "...)
	req = append(req, h.Path...)
	req = append(req, " HTTP/1.1\r\nHost: "...)
	req = append(req, host...)
	req = append(req, "\r\nUser-Agent: "+UserAgent+"\r\nAccept: */*\r\n"...)
	if !reuse {
		req = append(req, "Connection: close\r\n"...)
	}
	return append(req, "\r\n"...)
}

// roundTrip sends conn's request and reads the response. answered reports
// whether a response (its status line and headers) arrived; keep whether
// the connection can carry the next probe.
func roundTrip(ctx context.Context, deadline time.Time, conn *httpConn, h *HTTPConfig) (keep, answered bool, err error) {
	_ = conn.SetDeadline(deadline)
	// Run stopping (ctx cancelled) interrupts the probe.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	if _, err := conn.Write(conn.req); err != nil {
		return false, false, probeError(ctx, err)
	}
	br := readers.Get().(*bufio.Reader)
	br.Reset(conn)
	defer func() {
		br.Reset(nil)
		readers.Put(br)
	}()
	status, keep, err := readResponse(br)
	if err != nil {
		return false, false, probeError(ctx, err)
	}
	keep = keep && br.Buffered() == 0
	if !h.statusOK(status) {
		return keep, true, fmt.Errorf("status %d", status)
	}
	return keep, true, nil
}

// grpcConn opens a client connection for a target. It connects lazily (on
// the first RPC) and is reused while the target lives.
func (p *probers) grpcConn(addr string, g *GRPCConfig, timeout time.Duration) (*grpc.ClientConn, error) {
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUserAgent(UserAgent),
		grpc.WithConnectParams(grpc.ConnectParams{MinConnectTimeout: timeout}),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
			return p.dialer.DialContext(ctx, "tcp", a)
		}),
	}
	if g.Authority != "" {
		opts = append(opts, grpc.WithAuthority(g.Authority))
	}
	return grpc.NewClient("passthrough:///"+addr, opts...)
}

// probeGRPC calls grpc.health.v1.Health/Check. keep reports whether the
// connection is still worth reusing: after a transport-level failure it is
// dropped, so the next probe dials afresh instead of waiting out gRPC's
// reconnect backoff.
func (p *probers) probeGRPC(ctx context.Context, conn *grpc.ClientConn, g *GRPCConfig) (keep bool, err error) {
	// pr is set only once the call had a stream on a connection: its
	// status is then the server's (or its connection's), never the error
	// of the bridge's own dial.
	var pr peer.Peer
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: g.ServiceName}, grpc.Peer(&pr))
	if err != nil {
		if ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return false, probeError(ctx, err)
		}
		switch s := status.Convert(err); s.Code() {
		case codes.NotFound:
			return true, fmt.Errorf("service %q unknown to the server", g.ServiceName)
		case codes.Unimplemented:
			return true, errors.New("server does not implement grpc.health.v1")
		default:
			err := fmt.Errorf("%s: %s", s.Code(), s.Message())
			// gRPC keeps only the words of a dial's error: the bridge's
			// own shortage is known by them, in its own dial's error only
			// (a server's status may carry the same words of its own
			// shortage or its upstream's, which are the host's: a call
			// that reached a server has a peer).
			if _, dialErr, ok := strings.Cut(s.Message(), grpcDialError); ok && s.Code() == codes.Unavailable && pr.Addr == nil {
				for _, e := range localErrnos {
					if strings.Contains(dialErr, e.Error()) {
						err = errnoError{err, e}
						break
					}
				}
			}
			return false, err
		}
	}
	if st := resp.GetStatus(); st != healthpb.HealthCheckResponse_SERVING {
		return true, fmt.Errorf("status %s", st)
	}
	return true, nil
}

// grpcDialError starts the words of grpc-go's transport when its dial
// fails (internal/transport/http2_client.go).
const grpcDialError = "transport: Error while dialing"

// errnoError is an error worded as err that is errno (errors.Is).
type errnoError struct {
	err   error
	errno syscall.Errno
}

func (e errnoError) Error() string { return e.err.Error() }
func (e errnoError) Unwrap() error { return e.errno }

// probeError shortens dial and timeout errors for State.LastError.
func probeError(ctx context.Context, err error) error {
	// The connection's deadline is the probe's: an I/O timeout is the
	// probe's timeout, even when it fires a moment before ctx's.
	if errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		return errors.New("timeout")
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return fmt.Errorf("%s: %w", op.Op, op.Err)
	}
	return err
}
