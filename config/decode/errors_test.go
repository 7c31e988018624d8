package decode

import (
	"errors"
	"fmt"
	"testing"
)

type errDoc struct {
	Address  string                   `json:"address"`
	Listen   string                   `json:"listen" want:"host:port"`
	Port     uint32                   `json:"port"`
	Weight   float64                  `json:"weight"`
	Count    int                      `json:"count"`
	Small    int8                     `json:"small"`
	Enabled  bool                     `json:"enabled"`
	Tags     []string                 `json:"tags"`
	Wait     Duration                 `json:"wait"`
	Services map[string]errDocService `json:"services"`
}

type errDocService struct {
	Retry struct {
		NumRetries uint32 `json:"num_retries"`
	} `json:"retry"`
}

// Every error of Strict names the line, the column and the field's full
// path, and says what was expected in YAML terms: never a Go type or
// "JSON".
func TestStrictErrorsInYAMLTerms(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"listen: 18000\n", `line 1, column 1: listen: expected host:port, got 18000`},
		{"port: 4294967296\n", `line 1, column 1: port: expected a whole number from 0 to 4294967295, got 4294967296`},
		{"port: -1\n", `line 1, column 1: port: expected a whole number from 0 to 4294967295, got -1`},
		{"port: 2.5\n", `line 1, column 1: port: expected a whole number from 0 to 4294967295, got 2.5`},
		{"count: lots\n", `line 1, column 1: count: expected a whole number, got a string`},
		{"small: 200\n", `line 1, column 1: small: expected a whole number from -128 to 127, got 200`},
		{"weight: [1]\n", `line 1, column 1: weight: expected a number, got a list`},
		{"enabled: {a: 1}\n", `line 1, column 1: enabled: expected true or false, got a mapping`},
		{"tags: x\n", `line 1, column 1: tags: expected a list, got a string`},
		{"address: [a]\n", `line 1, column 1: address: expected a string, got a list`},
		{"services: [web]\n", `line 1, column 1: services: expected a mapping, got a list`},
		{"- listen: x\n", `line 1, column 1: expected a mapping, got a list`},
		{"wait: [1]\n", `line 1, column 1: wait: invalid duration: expected a duration like 5s (or a number of seconds), got a list`},
		{"wait: soon\n", `line 1, column 1: wait: invalid duration "soon" (expected a duration like 5s, 1m30s or 250ms)`},
		// The path through a map key, not the struct fields alone
		// (services.retry.num_retries).
		{"services:\n  web:\n    retry: {num_retries: 4294967296}\n", `line 3, column 13: services.web.retry.num_retries: expected a whole number from 0 to 4294967295, got 4294967296`},
		// Numbers that are not finite, with their line (the conversion to
		// JSON failed with "json: unsupported value: NaN").
		{"weight: .nan\n", `line 1, column 1: weight: expected a finite number, got .nan`},
		{"port: 80\nweight: -.Inf\n", `line 2, column 1: weight: expected a finite number, got -.Inf`},
		{"services:\n  web:\n    retry: {num_retries: .inf}\n", `line 3, column 13: services.web.retry.num_retries: expected a finite number, got .inf`},
		// A key with control bytes is shown escaped, not sent to the
		// terminal.
		{"services:\n  \"w\\x1b[2Jb\": {retry: {num_retries: x}}\n", `line 2, column 25: services."w\x1b[2Jb".retry.num_retries: expected a whole number from 0 to 4294967295, got a string`},
		{"services:\n  \"w\\x07\": {retry: {\"n\\x1b\": 1}}\n", `line 2, column 21: unknown field "n\x1b" in services."w\a".retry (expected one of: num_retries)`},
	} {
		var d errDoc
		err := Strict([]byte(tc.in), &d)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%q:\n got %v\nwant %s", tc.in, err, tc.want)
		}
	}
}

// Every unknown key gets a hint: the field it most likely means, else the
// keys the mapping takes.
func TestStrictUnknownKeyHint(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"adress: x\n", `line 1, column 1: unknown field "adress" (did you mean "address"?)`},
		{"listn: x\n", `line 1, column 1: unknown field "listn" (did you mean "listen"?)`},
		{"services: {web: {retyr: {}}}\n", `line 1, column 18: unknown field "retyr" in services.web (did you mean "retry"?)`},
		{"services: {web: {retry: {numretries: 1}}}\n", `line 1, column 26: unknown field "numretries" in services.web.retry (did you mean "num_retries"?)`},
		{"services: {web: {zzz: 1}}\n", `line 1, column 18: unknown field "zzz" in services.web (expected one of: retry)`},
	} {
		var d errDoc
		err := Strict([]byte(tc.in), &d)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%q:\n got %v\nwant %s", tc.in, err, tc.want)
		}
	}
}

func TestSuggest(t *testing.T) {
	fields := []string{"address", "listen", "port", "services", "timeout"}
	for in, want := range map[string]string{
		"adress":   "address",
		"Address":  "address",
		"prot":     "port",
		"servces":  "services",
		"timeuot":  "timeout",
		"x":        "",
		"zzzzzzzz": "",
		"":         "",
	} {
		if got := Suggest(in, fields); got != want {
			t.Errorf("Suggest(%q) = %q; want %q", in, got, want)
		}
	}
}

func TestLocate(t *testing.T) {
	doc := []byte("sources:\n  - name: s\n    file: {path: s.yaml}\n    health_check: {type: tcp, interval: [1]}\nxds:\n  listen: x\n")
	inner := &Error{Path: []string{"interval"}, Msg: "invalid duration"}
	for _, tc := range []struct {
		name      string
		prefix    []string
		err       error
		line, col int
	}{
		{"an *Error under a prefix", []string{"sources", "[0]", "health_check"}, inner, 4, 31},
		{"an *Error wrapped under text naming its full path", nil, fmt.Errorf("sources[0].health_check.interval: %w", inner), 4, 31},
		{"a message leading with its path", nil, errors.New(`xds.listen: "x" is not host:port`), 6, 3},
		{"a path the document lacks in part", nil, errors.New("xds.tls.cert_file: missing"), 5, 1},
		{"a path the document lacks", nil, errors.New("admin.listen: bad"), 0, 0},
		{"a message with no path", nil, errors.New("at least one source is needed"), 0, 0},
		{"a quoted key", nil, errors.New(`sources[0]."health_check".type: bad`), 4, 20},
		{"a path starting with an index", []string{"sources"}, errors.New(`[0].file."path": bad`), 3, 12},
		{"an error that names its line", nil, &Error{Path: []string{"xds"}, Line: 5, Column: 1, Msg: "x"}, 0, 0},
	} {
		if l, c := Locate(doc, tc.prefix, tc.err); l != tc.line || c != tc.col {
			t.Errorf("%s: Locate = %d, %d; want %d, %d", tc.name, l, c, tc.line, tc.col)
		}
	}
}

func TestFieldPath(t *testing.T) {
	for _, tc := range []struct {
		path []string
		want string
	}{
		{[]string{"services", "web", "routes", "[0]", "match"}, "services.web.routes[0].match"},
		{[]string{"services", "web.internal", "timeout"}, `services."web.internal".timeout`},
		{[]string{"services", "[ab]", "timeout"}, `services."[ab]".timeout`},
		{[]string{"services", "w\x1b[2J", "timeout"}, `services."w\x1b[2J".timeout`},
		{[]string{"services", "w\u200bx"}, `services."w\u200bx"`},
		{[]string{"services", ""}, `services.""`},
		{[]string{"[3]"}, "[3]"},
	} {
		if got := FieldPath(tc.path); got != tc.want {
			t.Errorf("FieldPath(%q) = %s; want %s", tc.path, got, tc.want)
		}
	}
}
