package policy

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestParseFileFull(t *testing.T) {
	data, err := os.ReadFile("testdata/full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	f, err := ParseFile(data)
	if err != nil {
		t.Fatal(err)
	}
	g := f.Services["greeter"]
	if g.Protocol != ProtocolGRPC || !g.Protocol.HTTP2() || g.ConnectTimeout.D() != 2*time.Second {
		t.Errorf("greeter: protocol %q, connect_timeout %v", g.Protocol, g.ConnectTimeout.D())
	}
	if len(g.Routes) != 3 || len(g.Routes[1].Match.Headers) != 6 || *g.Routes[1].Match.Fraction != 12.5 {
		t.Errorf("greeter routes: %+v", g.Routes)
	}
	if len(g.Subsets) != 3 || !g.Subsets["v1"].OnlyPassing {
		t.Errorf("greeter subsets: %+v", g.Subsets)
	}
	for name, want := range map[string]string{"greeter": "greeter", "legacy-billing": "legacy-*", "old-api": "old-api"} {
		if _, key, ok := f.For(name); !ok || key != want {
			t.Errorf("For(%q) = %q, %v; want %q", name, key, ok, want)
		}
	}
	if _, _, ok := f.For("web"); ok {
		t.Errorf("For(web): a policy; want none")
	}
}

func TestForMostSpecificPattern(t *testing.T) {
	f := &File{Services: map[string]Service{
		"*":          {Protocol: ProtocolHTTP},
		"api-*":      {Protocol: ProtocolHTTP2},
		"api-eu-*":   {Protocol: ProtocolGRPC},
		"api-??-web": {Protocol: ProtocolTCP},
		"api-eu-web": {},
	}}
	for name, want := range map[string]string{
		"billing":    "*",
		"api-us":     "api-*",
		"api-eu-x":   "api-eu-*",
		"api-us-web": "api-??-web", // 8 literal characters beat api-*'s 4
		"api-eu-web": "api-eu-web", // the name itself beats every pattern
	} {
		if _, key, _ := f.For(name); key != want {
			t.Errorf("For(%q) = %q; want %q", name, key, want)
		}
	}
}

// Every problem names its line and its field.
func TestParseFileErrors(t *testing.T) {
	for _, c := range []struct {
		name, doc string
		want      []string // substrings of the error, in order
	}{
		{"unknown field", "services:\n  web:\n    protocl: grpc\n", []string{`unknown field "protocl" in services.web`}},
		{"no services", "policy: {}\n", []string{`unknown field "policy"`}},
		{"empty", "", []string{"no services:"}},
		{"protocol", "services:\n  web:\n    protocol: h3\n", []string{`line 3, column 5: services.web.protocol: unknown protocol "h3"`}},
		{"connect timeout", "services:\n  web: {connect_timeout: 0.0001s}\n", []string{"line 2, column 9: services.web.connect_timeout:"}},
		{"lb policy", "services:\n  web:\n    load_balancer: {policy: fastest}\n", []string{`line 3, column 21: services.web.load_balancer.policy: unknown policy "fastest"`}},
		{"lb config of another policy", "services:\n  web:\n    load_balancer:\n      policy: round_robin\n      ring_hash: {minimum_ring_size: 4}\n", []string{"line 5, column 7: services.web.load_balancer.ring_hash: only with policy ring_hash"}},
		{"ring sizes", "services:\n  web:\n    load_balancer:\n      policy: ring_hash\n      ring_hash: {minimum_ring_size: 100, maximum_ring_size: 10}\n", []string{"minimum_ring_size 100 > maximum_ring_size 10"}},
		{"ring too large for every Envoy", "services:\n  web:\n    load_balancer:\n      policy: ring_hash\n      ring_hash: {minimum_ring_size: 8388608, maximum_ring_size: 8388608}\n", []string{"line 5, column 19: services.web.load_balancer.ring_hash.minimum_ring_size: 8388608: at most 131072 (every Envoy builds a ring"}},
		{"hash policy kinds", "services:\n  web:\n    load_balancer:\n      policy: maglev\n      hash_policies:\n        - {header: x-a, source_ip: true}\n", []string{"line 6, column 11: services.web.load_balancer.hash_policies[0]: give exactly one of header, cookie, source_ip and query_parameter (2 given)"}},
		{"hash policy without hashing", "services:\n  web:\n    load_balancer:\n      hash_policies: [{header: x-a}]\n", []string{`hash policies only matter to ring_hash and maglev`}},
		{"percent", "services:\n  web:\n    outlier_detection: {max_ejection_percent: 101}\n", []string{"services.web.outlier_detection.max_ejection_percent: 101 is not a percentage"}},
		{"sni", "services:\n  web:\n    tls: {sni: 'a b'}\n", []string{`services.web.tls.sni: "a b" is not a host name`}},
		{"subset name", "services:\n  web:\n    subsets:\n      -bad: {}\n", []string{`line 4, column 7: services.web.subsets.-bad: subset name "-bad"`}},
		{"subset filter syntax", "services:\n  web:\n    subsets:\n      v1: {filter: 'Service.Meta.version =='}\n", []string{`line 4, column 12: services.web.subsets.v1.filter: "Service.Meta.version ==": `}},
		{"subset filter selector", "services:\n  web:\n    subsets:\n      v1: {filter: 'Servce.Tags contains v1'}\n", []string{`line 4, column 12: services.web.subsets.v1.filter:`, `unknown selector "Servce.Tags"`}},
		{"default subset", "services:\n  web:\n    default_subset: v9\n", []string{`line 3, column 5: services.web.default_subset: no subset "v9" in subsets`}},
		{"own subset in a split", "services:\n  web:\n    subsets: {v1: {}}\n    split:\n      - {weight: 50, subset: v1}\n      - {weight: 50, subset: v2}\n", []string{`line 6, column 22: services.web.split[1].subset: no subset "v2" in subsets`}},
		{"another service's subset", "services:\n  web:\n    routes:\n      - match: {prefix: /}\n        destination: {service: api, subset: v3}\n  api:\n    subsets: {v1: {}}\n", []string{`line 5, column 9: services.web.routes[0].destination: service "api" has no subset "v3" (its policy is services.api)`}},
		{"redirect and failover", "services:\n  web:\n    redirect: {service: api}\n    failover: [{datacenter: dc2}]\n", []string{"line 3, column 5: services.web.redirect: a redirected service takes its target's subsets and failover"}},
		{"failover to nothing", "services:\n  web:\n    failover: [{subset: x}]\n", []string{"services.web.failover[0]: names no service and no datacenter"}},
		{"domain wildcard", "services:\n  web:\n    domains: [a.*.com]\n", []string{`line 3, column 15: services.web.domains[0]: "a.*.com": * only first or last`}},
		{"domain twice", "services:\n  web:\n    domains: [a.com, A.com]\n", []string{`services.web.domains[1]: "A.com" is domains[0] again`}},
		{"two path matchers", "services:\n  web:\n    routes:\n      - match: {prefix: /a, path: /a/b}\n", []string{"line 4, column 9: services.web.routes[0].match: give at most one of prefix, path and regex"}},
		{"path without slash", "services:\n  web:\n    routes:\n      - match: {path: a/b}\n", []string{`services.web.routes[0].match.path: "a/b": must start with /`}},
		{"regex", "services:\n  web:\n    routes:\n      - match: {regex: '(a'}\n", []string{`line 4, column 17: services.web.routes[0].match.regex: "(a": error parsing regexp`}},
		{"regex escape RE2 refuses", "services:\n  web:\n    routes:\n      - match: {regex: '/x\\x{100}'}\n", []string{`line 4, column 17: services.web.routes[0].match.regex: "/x\\x{100}": RE2 refuses it: invalid escape sequence: \x{100: Envoy would refuse the service's whole route configuration`}},
		{"regex over RE2's program size", "services:\n  web:\n    routes:\n      - match: {regex: '(?:a+?){33}'}\n", []string{`line 4, column 17: services.web.routes[0].match.regex: "(?:a+?){33}": its RE2 program has 102 instructions; Envoy refuses more than 100`}},
		{"header regex over RE2's program size", "services:\n  web:\n    routes:\n      - match:\n          headers: [{name: x, regex: '[a-z]{1,49}'}]\n", []string{`line 5, column 31: services.web.routes[0].match.headers[0].regex: "[a-z]{1,49}": its RE2 program has 101 instructions`}},
		{"query regex Go refuses", "services:\n  web:\n    routes:\n      - match:\n          query_parameters: [{name: q, regex: 'a\\C'}]\n", []string{`line 5, column 40: services.web.routes[0].match.query_parameters[0].regex: "a\\C": error parsing regexp: invalid escape sequence`}},
		{"methods over RE2's program size", "services:\n  web:\n    routes:\n      - match: {methods: [AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA, BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB, CCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCC, DDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDD]}\n", []string{`line 4, column 17: services.web.routes[0].match.methods: 4 methods: Envoy matches them with one regex, and its RE2 program has 1`}},
		{"case insensitive regex", "services:\n  web:\n    routes:\n      - match: {regex: /a, case_insensitive: true}\n", []string{"match.case_insensitive: only with prefix or path"}},
		{"header kinds", "services:\n  web:\n    routes:\n      - match:\n          headers:\n            - {name: x-a}\n            - {name: x-b, exact: a, prefix: b}\n", []string{
			"line 6, column 15: services.web.routes[0].match.headers[0]: give exactly one of exact, prefix, suffix, contains, regex, present and range (0 given)",
			"line 7, column 15: services.web.routes[0].match.headers[1]: give exactly one of", "(2 given)"}},
		{"header name", "services:\n  web:\n    routes:\n      - match:\n          headers: [{name: 'x a', present: true}]\n", []string{`services.web.routes[0].match.headers[0].name: "x a" is not a header name`}},
		{"header range", "services:\n  web:\n    routes:\n      - match:\n          headers: [{name: x, range: {start: 5, end: 5}}]\n", []string{"headers[0].range: start 5 >= end 5"}},
		{"method", "services:\n  web:\n    routes:\n      - match: {methods: [get]}\n", []string{`services.web.routes[0].match.methods[0]: "get" is not an HTTP method`}},
		{"fraction", "services:\n  web:\n    routes:\n      - match: {fraction: 100.5}\n", []string{"services.web.routes[0].match.fraction: 100.5 is not a percentage"}},
		{"fraction decimals", "services:\n  web:\n    routes:\n      - match: {fraction: 0.00001}\n", []string{"at most 4 decimals"}},
		{"destination and split", "services:\n  web:\n    routes:\n      - match: {}\n        destination: {service: a}\n        split: [{weight: 1, service: b}]\n", []string{"line 4, column 9: services.web.routes[0]: give destination or split, not both"}},
		{"split weights", "services:\n  web:\n    split: [{weight: 0, service: a}, {weight: 0, service: b}]\n", []string{"line 3, column 5: services.web.split: the weights add up to 0; they must add up to 100"}},
		{"split sum", "services:\n  web:\n    split: [{weight: 30, service: a}, {weight: 20, service: b}]\n", []string{"line 3, column 5: services.web.split: the weights add up to 50; they must add up to 100"}},
		{"split sum in hundredths", "services:\n  web:\n    routes:\n      - split: [{weight: 33.33, service: a}, {weight: 33.33, service: b}, {weight: 33.33, service: c}]\n", []string{"line 4, column 9: services.web.routes[0].split: the weights add up to 99.99; they must add up to 100"}},
		{"split weight out of range", "services:\n  web:\n    split:\n      - {weight: 150, service: a}\n      - {weight: -50, service: b}\n", []string{
			"line 4, column 10: services.web.split[0].weight: 150 is not a percentage (0..100)", "line 5, column 10: services.web.split[1].weight: -50 is not a percentage (0..100)"}},
		{"max ejection time below base", "services:\n  web:\n    outlier_detection: {base_ejection_time: 60s, max_ejection_time: 10s}\n", []string{"line 3, column 50: services.web.outlier_detection.max_ejection_time: 10s < base_ejection_time 1m0s (Envoy refuses a maximum below the base"}},
		{"max ejection time below the default base", "services:\n  web:\n    outlier_detection:\n      max_ejection_time: 10s\n", []string{"line 4, column 7: services.web.outlier_detection.max_ejection_time: 10s < base_ejection_time 30s"}},
		{"prefix rewrite newline", "services:\n  web:\n    routes:\n      - match: {prefix: /a}\n        prefix_rewrite: \"/a\\nb\"\n", []string{`line 5, column 9: services.web.routes[0].prefix_rewrite: "/a\nb": byte 2 (0x0a) cannot be in a request path: write it percent-encoded`}},
		{"prefix rewrite space", "services:\n  web:\n    routes:\n      - {match: {prefix: /a}, prefix_rewrite: '/a b'}\n", []string{`line 4, column 31: services.web.routes[0].prefix_rewrite: "/a b": byte 2 (0x20)`}},
		{"prefix rewrite relative", "services:\n  web:\n    routes:\n      - {match: {prefix: /a}, prefix_rewrite: b/}\n", []string{`services.web.routes[0].prefix_rewrite: "b/": must start with /`}},
		{"domain NUL", "services:\n  web:\n    domains: [\"a\\0b\"]\n", []string{`line 3, column 15: services.web.domains[0]: "a\x00b": not a host name`}},
		{"cookie name", "services:\n  web:\n    load_balancer:\n      policy: ring_hash\n      hash_policies: [{cookie: {name: 'a b'}}]\n", []string{`line 5, column 33: services.web.load_balancer.hash_policies[0].cookie.name: "a b" is not a cookie name`}},
		{"cookie path", "services:\n  web:\n    load_balancer:\n      policy: ring_hash\n      hash_policies: [{cookie: {name: a, ttl: 1s, path: '/a;b'}}]\n", []string{`hash_policies[0].cookie.path: "/a;b": byte 2 (';') cannot be in a Set-Cookie path`}},
		{"split decimals", "services:\n  web:\n    split: [{weight: 33.333, service: a}]\n", []string{"services.web.split[0].weight: 33.333: at most 2 decimals"}},
		{"retry without on", "services:\n  web:\n    retry: {num_retries: 2}\n", []string{"line 3, column 5: services.web.retry.retry_on: required"}},
		{"retry condition", "services:\n  web:\n    retry: {retry_on: [unavailable, aborted]}\n", []string{`line 3, column 37: services.web.retry.retry_on[1]: unknown condition "aborted"`}},
		{"num retries", "services:\n  web:\n    retry: {retry_on: [unavailable], num_retries: 0}\n", []string{"services.web.retry.num_retries: 0: want 1..100 (gRFC A44: at least 1)"}},
		{"back-off without base", "services:\n  web:\n    retry: {retry_on: [unavailable], max_interval: 1s}\n", []string{"services.web.retry.max_interval: needs base_interval"}},
		{"back-off order", "services:\n  web:\n    retry: {retry_on: [unavailable], base_interval: 1s, max_interval: 100ms}\n", []string{"services.web.retry.max_interval: 100ms < base_interval 1s"}},
		{"status codes", "services:\n  web:\n    retry: {retry_on: [5xx], status_codes: [503]}\n", []string{"services.web.retry.status_codes: only used with retriable-status-codes"}},
		{"bad pattern", "services:\n  'web-[':\n    protocol: http\n", []string{`line 2, column 3: services."web-[": bad pattern "web-["`}},
		{"dotted name", "services:\n  web.internal:\n    protocol: h9\n", []string{`line 3, column 5: services."web.internal".protocol: unknown protocol "h9"`}},
		{"key twice", "services:\n  web: {}\n  web: {}\n", []string{"web"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseFile([]byte(c.doc))
			if err == nil {
				t.Fatalf("no error; want %q", c.want)
			}
			msg, at := err.Error(), 0
			for _, w := range c.want {
				i := strings.Index(msg[at:], w)
				if i < 0 {
					t.Fatalf("error:\n%s\nwant (in order) %q", msg, c.want)
				}
				at += i + len(w)
			}
		})
	}
}

// Problems come sorted by line, at most MaxFileErrors of them.
func TestParseFileManyErrors(t *testing.T) {
	var b strings.Builder
	b.WriteString("services:\n")
	for i := 0; i < 30; i++ {
		b.WriteString("  web" + string(rune('a'+i%26)) + strings.Repeat("x", i/26) + ":\n    protocol: h9\n")
	}
	_, err := ParseFile([]byte(b.String()))
	if err == nil {
		t.Fatal("no error")
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != MaxFileErrors+1 || lines[MaxFileErrors] != "and 10 more" {
		t.Fatalf("%d lines, last %q:\n%s", len(lines), lines[len(lines)-1], err)
	}
	if !strings.HasPrefix(lines[0], "line 3, column 5: ") || !strings.HasPrefix(lines[1], "line 5, column 5: ") {
		t.Errorf("not in line order:\n%s", err)
	}
}

// The example policy file in examples/ is valid.
func TestExamplePolicyFile(t *testing.T) {
	data, err := os.ReadFile("../examples/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	f, err := ParseFile(data)
	if err != nil {
		t.Fatal(err)
	}
	if _, key, _ := f.For("legacy-billing"); key != "legacy*" {
		t.Errorf("legacy-billing's policy is %q; want legacy*", key)
	}
}

// A selector outside the host view is refused, not a subset that silently
// matches nothing (Consul's Node.Address, Service.Kind).
func TestFilterSelectorsOutsideTheView(t *testing.T) {
	for _, f := range []string{`Node.Address == "10.0.0.1"`, `Service.Kind == "typical"`, `Locality.Country == "x"`} {
		if _, err := CompileFilter(f); err == nil || !strings.Contains(err.Error(), "unknown selector") {
			t.Errorf("CompileFilter(%s): %v; want unknown selector", f, err)
		}
	}
	for _, f := range []string{`Service.Port == 8080`, `Service.Address == "10.0.0.1"`, `Service.Meta.version == "2"`, `"canary" in Service.Tags`, `Node.Meta.rack == r1`, `Metadata.app.version == "1"`} {
		if _, err := CompileFilter(f); err != nil {
			t.Errorf("CompileFilter(%s): %v", f, err)
		}
	}
}

// Keys are case-sensitive: `Services:` or `Protocol:` is not taken for
// `services:` or `protocol:`.
func TestParseFileKeysCaseSensitive(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"serviCes:\n  web: {protocol: http}\n", `unknown field "serviCes" (keys are case-sensitive: did you mean "services"?)`},
		{"services:\n  web: {Protocol: http}\n", `unknown field "Protocol" in services.web (keys are case-sensitive: did you mean "protocol"?)`},
	} {
		_, err := ParseFile([]byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.in, err, tc.want)
		}
	}
}

// TestFieldPathQuotesPatternKeys: a service key that is a pattern
// starting with a bracket is a key, quoted, not a list index.
func TestFieldPathQuotesPatternKeys(t *testing.T) {
	for _, tc := range []struct {
		path []string
		want string
	}{
		{[]string{"services", "[ab]*", "failover", "[0]"}, `services."[ab]*".failover[0]`},
		{[]string{"services", "web", "routes", "[12]", "match"}, `services.web.routes[12].match`},
		{[]string{"services", "[]"}, `services."[]"`},
	} {
		if got := FieldPath(tc.path); got != tc.want {
			t.Errorf("FieldPath(%q) = %s, want %s", tc.path, got, tc.want)
		}
	}
}
