package app

import (
	"testing"

	"github.com/xdsbridge/xdsbridge/config"
	"github.com/xdsbridge/xdsbridge/translate"
	"github.com/xdsbridge/xdsbridge/xds"
)

// FuzzConfigOptions feeds config documents to config.Parse and
// ResolveOptions. The options of a config they accept are within their
// packages' ranges, and an egress block gives Envoy a valid table and
// listener.
func FuzzConfigOptions(f *testing.F) {
	for _, s := range []string{
		"sources:\n  - name: static\n    file: {path: services.yaml}\n",
		"debounce: {quiet: 2s}\nlimits: {max_metadata_depth: 4, max_resource_bytes: 65536}\nsources: [{name: a, file: {}}]\n",
		"debounce: {max: 10ms}\nsources: [{name: a, file: {}}]\n",
		"limits: {max_resource_bytes: 1}\nsources: [{name: a, file: {}}]\n",
		"xds: {limits: {max_streams: 3, requests_per_second: 0.5}, rest: {listen: '127.0.0.1:0', max_wait: 1s, eds_config: {cluster_name: r}}}\nsources: [{name: a, file: {}}]\n",
		"xds: {tls: {cert_file: c, key_file: k, client_ca_file: ca}, authorization: {allow: [{dns: a, resources: ['web-*']}]}}\nsources: [{name: a, file: {}}]\n",
		"outputs: {filesystem: {dir: out, format: json, mode: watched_directory, debounce: 1s}}\nsources: [{name: a, file: {}}]\n",
		"egress: {route_config_name: r, listener: {name: l, address: '::1', port: 10000}, domain_suffixes: [.service.consul], include: {sources: [a], tags: [t], names: ['w*']}, fallback: web}\nsources: [{name: a, file: {}}]\n",
		"egress: {domain_suffixes: []}\nsources: [{name: a, file: {}}]\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := config.Parse(data, "/base", SourceTypeNames())
		if err != nil {
			return
		}
		if err := ResolveOptions(c); err != nil {
			return
		}
		if c.Debounce.Quiet <= 0 || c.Debounce.Max < c.Debounce.Quiet {
			t.Fatalf("debounce quiet %v max %v", c.Debounce.Quiet, c.Debounce.Max)
		}
		if err := translate.Limits(c.Limits).Check(); err != nil {
			t.Fatalf("limits pass ResolveOptions but not Check: %v", err)
		}
		if err := xds.Limits(c.XDS.Limits).Check(); err != nil {
			t.Fatalf("xds.limits pass ResolveOptions but not Check: %v", err)
		}
		// A resolved config is accepted again.
		again := *c
		if err := ResolveOptions(&again); err != nil {
			t.Fatalf("resolved options refused: %v", err)
		}
		if e := egressOptions(c.Egress); e != nil {
			rc, _ := e.RouteTable([]translate.EgressService{{Name: "web"}, {Name: "web.service.consul"}})
			if err := rc.ValidateAll(); err != nil {
				t.Fatalf("egress table: %v", err)
			}
			if e.Listener != nil {
				l, err := e.EgressListener()
				if err != nil {
					t.Fatal(err)
				}
				if err := l.ValidateAll(); err != nil {
					t.Fatalf("egress listener: %v", err)
				}
			}
		}
	})
}
