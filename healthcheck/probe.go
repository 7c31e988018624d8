package healthcheck

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// UserAgent is sent by the HTTP and gRPC probes.
const UserAgent = "xdsbridge-healthcheck"

// maxBody is how much of an HTTP response body a probe reads (and discards)
// before it closes the connection.
const maxBody = 4 << 10

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
		dialer: &net.Dialer{KeepAlive: -1}, // kept connections are used at every interval
		tcpDialer: &net.Dialer{KeepAlive: -1, Control: func(_, _ string, c syscall.RawConn) error {
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

// httpConn is an HTTP/1.1 connection kept between the probes of a target.
type httpConn struct {
	net.Conn
	lastUsed time.Time
}

var readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4<<10) }}

// probeHTTP sends GET path to addr and succeeds when the status is in the
// expected ranges. With reuse, it sends the request on conn (dialling one
// if conn is nil, idle too long or closed by the server meanwhile) and
// returns the connection to keep for the next probe, or nil. Without reuse
// it asks the server to close the connection (Connection: close), so that
// the TIME_WAIT is on the server's side, not the bridge's.
//
// A kept connection costs a socket and no goroutine between probes; the
// read buffer is borrowed only for the probe.
func (p *probers) probeHTTP(ctx context.Context, addr string, h *HTTPConfig, reuse bool, conn *httpConn) (*httpConn, error) {
	if conn != nil && p.idleTimeout > 0 && time.Since(conn.lastUsed) > p.idleTimeout {
		conn.Close()
		conn = nil
	}
	for {
		fresh := conn == nil
		if fresh {
			c, err := p.dialer.DialContext(ctx, "tcp", addr)
			if err != nil {
				return nil, probeError(ctx, err)
			}
			conn = &httpConn{Conn: c}
		}
		keep, answered, err := roundTrip(ctx, conn, addr, h, reuse)
		if !keep {
			if answered {
				conn.Close()
			} else {
				abort(conn)
			}
		}
		if err != nil && !fresh && !answered && ctx.Err() == nil {
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

// roundTrip sends one GET on conn and reads the response. answered reports
// whether a response (at least its status line) arrived; keep whether the
// connection can carry the next probe.
func roundTrip(ctx context.Context, conn net.Conn, addr string, h *HTTPConfig, reuse bool) (keep, answered bool, err error) {
	if d, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(d)
	}
	// Run stopping (ctx cancelled) interrupts the probe.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	host := h.Host
	if host == "" {
		host = addr
	}
	req := make([]byte, 0, 128)
	req = append(req, "GET "...)
	req = append(req, h.Path...)
	req = append(req, " HTTP/1.1\r\nHost: "...)
	req = append(req, host...)
	req = append(req, "\r\nUser-Agent: "+UserAgent+"\r\nAccept: */*\r\n"...)
	if !reuse {
		req = append(req, "Connection: close\r\n"...)
	}
	req = append(req, "\r\n"...)
	if _, err := conn.Write(req); err != nil {
		return false, false, probeError(ctx, err)
	}
	br := readers.Get().(*bufio.Reader)
	br.Reset(conn)
	defer func() {
		br.Reset(nil)
		readers.Put(br)
	}()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return false, false, probeError(ctx, err)
	}
	// Read (and discard) up to maxBody of the body; a longer body, or one
	// that ends only with the connection, leaves the connection unusable.
	n, rerr := io.CopyN(io.Discard, resp.Body, maxBody+1)
	resp.Body.Close()
	keep = reuse && rerr == io.EOF && n <= maxBody && !resp.Close && br.Buffered() == 0
	if !h.statusOK(resp.StatusCode) {
		return keep, true, fmt.Errorf("status %d", resp.StatusCode)
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
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: g.ServiceName})
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
			return false, fmt.Errorf("%s: %s", s.Code(), s.Message())
		}
	}
	if st := resp.GetStatus(); st != healthpb.HealthCheckResponse_SERVING {
		return true, fmt.Errorf("status %s", st)
	}
	return true, nil
}

// probeError shortens dial and timeout errors for State.LastError.
func probeError(ctx context.Context, err error) error {
	// The connection's deadline is the probe's: an I/O timeout is the
	// probe's timeout, even when it fires a moment before ctx's.
	if errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		return errors.New("timeout")
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return fmt.Errorf("%s: %v", op.Op, op.Err)
	}
	return err
}
