package xds

// ServingConfig is one serving stack: the cache every client is answered
// from and the gRPC server in front of it. The zero value is the stack the
// bridge serves with by default.
type ServingConfig struct {
	// Options configure the server: logger, metrics, TLS, the per-client
	// limits its guard enforces, keepalive, authorization.
	Options
	// Cache are options of the cache, applied over its defaults
	// (DefaultTypes, DefaultMaxResponseBytes, DefaultRouteHold, make before
	// break on with DefaultMakeBeforeBreakSettle).
	Cache []Option
}

// NewServing returns the cache and the xDS server the bridge serves from.
// The app (internal/app), the benchmark (internal/load) and the tests that
// serve a full stack all build it here, so they serve alike; tests of the
// cache alone use NewCache. It starts nothing: publish into the cache, call
// MarkReady, and Run the server.
func NewServing(cfg ServingConfig) (*Cache, *Server) {
	c := NewCache(cfg.Cache...)
	return c, NewServer(c, cfg.Options)
}
