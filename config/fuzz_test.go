package config

import "testing"

// FuzzParse feeds config documents to Parse. A config that parses has its
// defaults applied and passes its own checks (the blocks other packages
// own: internal/app FuzzConfigOptions).
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"sources:\n  - name: static\n    file: {path: services.yaml}\n",
		"xds: {listen: 127.0.0.1:0}\nadmin: {listen: 127.0.0.1:0, write_timeout: 5s, idle_timeout: 30}\ndebounce: {quiet: 10ms, max: 1s}\nlogging: {format: json, level: DEBUG}\nlimits: {max_metadata_depth: 4, max_resource_bytes: 65536}\ndefault_locality: {region: r}\nhealth_checks: {workers: 4, max_retention: 1m, services: {web: {http: {path: /}}}}\nsources:\n  - name: c\n    consul: {address: 127.0.0.1:8500}\n    default_locality: {zone: z}\n    health_check: {tcp: {}}\n  - name: d\n    dns: {hosts: []}\n",
		`{"sources": [{"name": "a", "file": {}}, {"name": "a", "file": {}}]}`,
		`{"sources": [{"name": "a", "file": {}, "dns": {}}]}`,
		`{"sources": [{"name": "a", "nope": {}}]}`,
		"debounce: {quiet: 2s, max: 1s}\nsources: [{name: a, file: {}}]\n",
		"debounce: {quiet: -1}\nsources: [{name: a, file: {}}]\n",
		"limits: {max_resource_bytes: 1}\nsources: [{name: a, file: {}}]\n",
		"egress: {route_config_name: r, listener: {name: l, address: '::1', port: 10000}, domain_suffixes: [.service.consul], include: {sources: [a], tags: [t], names: ['w*']}, fallback: web}\nsources: [{name: a, file: {}}]\n",
		"egress: {domain_suffixes: []}\nsources: [{name: a, file: {}}]\n",
		"unknown: 1\n",
		"",
	} {
		f.Add([]byte(s))
	}
	known := []string{"file", "consul", "dns"}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, "/base", known)
		if err != nil {
			if c != nil {
				t.Fatal("a config with an error")
			}
			return
		}
		if c.XDS.Listen == "" || c.Admin.Listen == "" || c.Logging.Format == "" || c.Logging.Level == "" {
			t.Fatalf("defaults not applied: %+v", c)
		}
		if c.Debounce.Quiet < 0 || c.Debounce.Max < 0 {
			t.Fatalf("debounce quiet %v max %v", c.Debounce.Quiet, c.Debounce.Max)
		}
		if len(c.Sources) == 0 {
			t.Fatal("no sources")
		}
		names := map[string]bool{}
		for _, s := range c.Sources {
			if s.Name == "" || names[s.Name] {
				t.Fatalf("source name %q empty or twice", s.Name)
			}
			names[s.Name] = true
			ok := false
			for _, k := range known {
				ok = ok || s.Type == k
			}
			if !ok {
				t.Fatalf("source %q of unknown type %q", s.Name, s.Type)
			}
		}
		// What Parse accepts, it accepts again once re-encoded.
		if _, err := c.Sources[0].MarshalJSON(); err != nil {
			t.Fatalf("re-encoding source: %v", err)
		}
	})
}
