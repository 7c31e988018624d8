package decode

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestDuration(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    time.Duration
		wantErr string
	}{
		{`"50ms"`, 50 * time.Millisecond, ""},
		{`"1m30s"`, 90 * time.Second, ""},
		{`2`, 2 * time.Second, ""},
		{`0.25`, 250 * time.Millisecond, ""},
		{`0`, 0, ""},
		{`"0s"`, 0, ""},
		{`"bogus"`, 0, `invalid duration "bogus"`},
		{`"5"`, 0, `invalid duration "5"`},
		{`"-1s"`, 0, `negative duration "-1s"`},
		{`-2`, 0, "negative duration -2"},
		{`true`, 0, "invalid duration: expected a duration like 5s (or a number of seconds), got true"},
		{`{}`, 0, "invalid duration: expected a duration like 5s (or a number of seconds), got a mapping"},
	} {
		var d Duration
		err := json.Unmarshal([]byte(tc.in), &d)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: error %v, want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || d.D() != tc.want {
			t.Errorf("%s: got %v, %v; want %v", tc.in, d.D(), err, tc.want)
		}
	}
	b, err := json.Marshal(Duration(1500 * time.Millisecond))
	if err != nil || string(b) != `"1.5s"` {
		t.Errorf("MarshalJSON = %s, %v", b, err)
	}
}

func TestJSONStrict(t *testing.T) {
	type inner struct {
		Port uint32   `json:"port"`
		Wait Duration `json:"wait"`
	}
	type doc struct {
		Items map[string][]inner `json:"items"`
		Name  string             `json:"name"`
		Skip  string             `json:"-"`
	}
	for _, tc := range []struct {
		in, want string
	}{
		{`{"bogus": 1}`, `unknown field "bogus"`},
		// An empty key is a field no struct has (it was accepted, the
		// error lost).
		{`{"": 1}`, `unknown field ""`},
		{`{"items": {"a": [{"": null}]}}`, `unknown field "" in items.a[0]`},
		{`{"items": {"a": [{"port": 1}, {"prot": 2}]}}`, `unknown field "prot" in items.a[1]`},
		{`{"items": {"a": [{"port": 1}, {"port": -2}]}}`, `items.a[1].port: expected a whole number from 0 to 4294967295, got -2`},
		{`{"items": {"a": [{"wait": "soon"}]}}`, `items.a[0].wait: invalid duration "soon"`},
		{`{"name": 1}`, `name: expected a string, got 1`},
		{`{"Skip": "x"}`, `unknown field "Skip"`},
		{`{"name": "a"} {"name": "b"}`, "unexpected data after the document"},
		{`{"name": "a"`, "unexpected EOF"},
		{`[1]`, "expected a mapping, got a list"},
	} {
		var d doc
		err := JSONStrict([]byte(tc.in), &d)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.in, err, tc.want)
		}
	}
	// Empty and null documents leave v alone.
	d := doc{Name: "kept"}
	for _, in := range []string{"", "  \n", "null"} {
		if err := JSONStrict([]byte(in), &d); err != nil || d.Name != "kept" {
			t.Errorf("%q: %v %+v", in, err, d)
		}
	}
}

func TestStrictYAML(t *testing.T) {
	var v struct {
		A struct {
			B []int `json:"b"`
		} `json:"a"`
	}
	if err := Strict([]byte("a:\n  b: [1, 2]\n"), &v); err != nil || len(v.A.B) != 2 {
		t.Fatalf("%v %+v", err, v)
	}
	err := Strict([]byte("a:\n  c: 1\n"), &v)
	if err == nil || err.Error() != `line 2, column 3: unknown field "c" in a (expected one of: b)` {
		t.Errorf("error %v", err)
	}
	err = Strict([]byte("a:\n  b: [1, x]\n"), &v)
	if err == nil || !strings.Contains(err.Error(), "a.b[1]") {
		t.Errorf("error %v, want the path a.b[1]", err)
	}
}

// Keys are case-sensitive: encoding/json would take one that matches a
// field only case-insensitively; the decoder names it and the spelling.
func TestStrictKeysCaseSensitive(t *testing.T) {
	type inner struct {
		Port uint32   `json:"port"`
		Wait Duration `json:"wait"`
	}
	type doc struct {
		Items    map[string][]inner `json:"items"`
		Name     string             `json:"name"`
		Services map[string]inner   `json:"services"`
		Ptr      *inner             `json:"ptr"`
	}
	for _, tc := range []struct{ in, want string }{
		{`{"serviCes": {}}`, `unknown field "serviCes" (keys are case-sensitive: did you mean "services"?)`},
		{`{"NAME": "a"}`, `unknown field "NAME" (keys are case-sensitive: did you mean "name"?)`},
		{`{"items": {"x": [{"port": 1}, {"Port": 1}]}}`, `unknown field "Port" in items.x[1] (keys are case-sensitive: did you mean "port"?)`},
		{`{"ptr": {"WAIT": "1s"}}`, `unknown field "WAIT" in ptr (keys are case-sensitive: did you mean "wait"?)`},
		// The first in key order, also when the document fails for
		// another reason too.
		{`{"Name": "a", "items": {"x": [{"port": "bad"}]}}`, `unknown field "Name" (keys are case-sensitive: did you mean "name"?)`},
		{`{"name": "a", "items": {"x": [{"Port": 1, "bad": 1}]}}`, `unknown field "Port" in items.x[0] (keys are case-sensitive: did you mean "port"?)`},
	} {
		var d doc
		err := JSONStrict([]byte(tc.in), &d)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s: error %v, want %q", tc.in, err, tc.want)
		}
	}
	// Map keys are data, not fields: any case goes.
	var d doc
	if err := JSONStrict([]byte(`{"items": {"X": [{"port": 1}]}, "services": {"Web": {"port": 2}}}`), &d); err != nil || d.Services["Web"].Port != 2 {
		t.Errorf("map keys: %v %+v", err, d)
	}
	// And in YAML.
	if err := Strict([]byte("services:\n  web: {port: 1}\nNaMe: x\n"), &d); err == nil || err.Error() != `line 3, column 1: unknown field "NaMe" (keys are case-sensitive: did you mean "name"?)` {
		t.Errorf("YAML: error %v", err)
	}
}
