package app

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"

	"golang.org/x/sync/errgroup"

	"github.com/xdsbridge/xdsbridge/xds"
)

// buildREST builds the REST-JSON polling handler (xds.rest), when
// configured; check loaded its TLS files (a.RESTTLS).
func (a *App) buildREST() error {
	rc := a.Config.XDS.REST
	if rc == nil {
		return nil
	}
	o := restOptions(rc)
	o.Metrics = a.Registry
	if a.RESTTLS != nil && a.RESTTLS.MTLS() {
		o.VerifyClient = a.RESTTLS.VerifyClient
	}
	a.REST = xds.NewREST(a.XDS, o)
	return nil
}

// listenREST binds the REST listener, when configured.
func (a *App) listenREST() error {
	if a.REST == nil {
		return nil
	}
	var err error
	if a.restLis, err = net.Listen("tcp", a.Config.XDS.REST.Listen); err != nil {
		return fmt.Errorf("xds.rest.listen: %w", err)
	}
	return nil
}

// RESTAddr is the bound REST address (after Listen); "" when not served.
func (a *App) RESTAddr() string {
	if a.restLis == nil {
		return ""
	}
	return a.restLis.Addr().String()
}

// runREST runs the REST listener and its TLS files' watcher in g.
func (a *App) runREST(ctx context.Context, g *errgroup.Group) {
	if a.REST == nil {
		return
	}
	var tc *tls.Config
	if a.RESTTLS != nil {
		tc = a.RESTTLS.ServerConfig()
		g.Go(func() error { return a.RESTTLS.Run(ctx) })
	}
	g.Go(func() error { return a.REST.Serve(ctx, a.restLis, tc) })
}
