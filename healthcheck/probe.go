package healthcheck

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
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

// probers holds what the probes share: one dialer and one HTTP transport for
// all targets.
type probers struct {
	dialer    *net.Dialer
	transport *http.Transport
	client    *http.Client
}

func newProbers(opts Options) *probers {
	d := &net.Dialer{KeepAlive: -1} // probe connections are short-lived
	tr := &http.Transport{
		Proxy:               nil, // never through an environment proxy
		DialContext:         d.DialContext,
		DisableCompression:  true,
		DisableKeepAlives:   !opts.HTTPKeepAlive,
		MaxIdleConns:        0, // no global bound; one per host below
		MaxIdleConnsPerHost: 1,
		IdleConnTimeout:     opts.HTTPIdleTimeout,
	}
	// HTTP/1.1 only: probes are plain-text and never negotiate h2.
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetHTTP1(true)
	return &probers{
		dialer:    d,
		transport: tr,
		client: &http.Client{
			Transport: tr,
			// Redirects are not followed: a 3xx is judged by expected_statuses.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}
}

// probeTCP succeeds when a TCP connection to addr opens within ctx.
func (p *probers) probeTCP(ctx context.Context, addr string) error {
	conn, err := p.dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return probeError(ctx, err)
	}
	conn.Close()
	return nil
}

// probeHTTP sends GET path to addr and succeeds when the status is in the
// expected ranges.
func (p *probers) probeHTTP(ctx context.Context, addr string, h *HTTPConfig) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+h.Path, nil)
	if err != nil {
		return err
	}
	if h.Host != "" {
		req.Host = h.Host
	}
	req.Header.Set("User-Agent", UserAgent)
	resp, err := p.client.Do(req)
	if err != nil {
		return probeError(ctx, err)
	}
	_, _ = io.CopyN(io.Discard, resp.Body, maxBody)
	resp.Body.Close()
	if !h.statusOK(resp.StatusCode) {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
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
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return errors.New("timeout")
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return fmt.Errorf("%s: %v", op.Op, op.Err)
	}
	return err
}
