package xds

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// authorizing registers services on the xDS gRPC server (Options.Services)
// with each of their calls and streams authorized as an xDS stream is at
// open: by xds.authorization, else by the client CA bundle as it is now
// (VerifyClient); a refusal is counted and logged as an xDS stream's.
type authorizing struct {
	gs *grpc.Server
	s  *Server
}

func (r authorizing) RegisterService(desc *grpc.ServiceDesc, impl any) {
	d := *desc
	d.Streams = make([]grpc.StreamDesc, len(desc.Streams))
	for i, sd := range desc.Streams {
		h := sd.Handler
		sd.Handler = func(srv any, stream grpc.ServerStream) error {
			if err := r.s.authorizeCall(stream.Context(), desc.ServiceName); err != nil {
				return err
			}
			return h(srv, stream)
		}
		d.Streams[i] = sd
	}
	d.Methods = make([]grpc.MethodDesc, len(desc.Methods))
	for i, md := range desc.Methods {
		h := md.Handler
		md.Handler = func(srv any, ctx context.Context, dec func(any) error, in grpc.UnaryServerInterceptor) (any, error) {
			if err := r.s.authorizeCall(ctx, desc.ServiceName); err != nil {
				return nil, err
			}
			return h(srv, ctx, dec, in)
		}
		d.Methods[i] = md
	}
	r.gs.RegisterService(&d, impl)
}

// authorizeCall decides a call of a service registered by
// Options.Services as open decides an xDS stream.
func (s *Server) authorizeCall(ctx context.Context, service string) error {
	var reason string
	var err error
	switch {
	case s.authz != nil:
		_, _, reason, err = s.authz.authorize(ctx, time.Now(), s.verifyClient)
	case s.verifyClient != nil:
		reason, err = s.recheck(ctx, time.Now())
	}
	if err == nil {
		return nil
	}
	s.denied.WithLabelValues(reason).Inc()
	if ok, suppressed := s.denyLog.allow(time.Now()); ok {
		var addr string
		if p, _ := peer.FromContext(ctx); p != nil && p.Addr != nil {
			addr = p.Addr.String()
		}
		s.log.Warn("xDS client refused", "reason", reason, "peer", addr, "service", service,
			"error", status.Convert(err).Message(), "denials_not_logged", suppressed)
	}
	if reason == deniedExpired || reason == deniedUntrusted {
		s.closeConn(ctx, reason)
	}
	return err
}
