package decode

import (
	"strings"
	"testing"
)

// Two keys of one mapping that the YAML-to-JSON conversion reads as one
// (YAML 1.1: booleans, numbers in any base or spelling, .inf) are a
// duplicate: the second silently replaced the first. Quoted keys, and
// plain ones that stay strings, are kept apart.
func TestStrictDuplicateKeysAsRead(t *testing.T) {
	type doc struct {
		M map[string]string `json:"m"`
	}
	for _, in := range []string{
		"m:\n  1: a\n  01: b\n",
		"m:\n  16: a\n  0x10: b\n",
		"m:\n  1000: a\n  1_000: b\n",
		"m:\n  1e3: a\n  1000: b\n",
		"m:\n  Yes: a\n  TRUE: b\n",
		"m:\n  y: a\n  on: b\n",
		"m:\n  off: a\n  \"false\": b\n",
		"m:\n  .inf: a\n  .Inf: b\n",
	} {
		var d doc
		if err := Strict([]byte(in), &d); err == nil || !strings.Contains(err.Error(), "duplicate key in m") {
			t.Errorf("%q: %v, %v; want a duplicate key error", in, d.M, err)
		}
	}
	for in, n := range map[string]int{
		"m:\n  \"on\": a\n  \"true\": b\n": 2,
		"m:\n  yES: a\n  true: b\n":        2,
		"m:\n  web: a\n  Web: b\n":         2,
		"m:\n  \"1\": a\n  \"01\": b\n":    2,
	} {
		var d doc
		if err := Strict([]byte(in), &d); err != nil || len(d.M) != n {
			t.Errorf("%q: %v, %v; want %d keys", in, d.M, err, n)
		}
	}
}
