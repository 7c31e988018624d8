package decode

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	yaml3 "go.yaml.in/yaml/v3"
	"sigs.k8s.io/yaml"
)

// checkNodes reports the first mapping key given twice in a YAML or JSON
// document (JSON is YAML), naming both lines and the key's path, or the
// first value that is not a finite number (.nan, .inf). encoding/json and
// the YAML-to-JSON conversion keep the last of two keys silently (two
// `services:` blocks would serve only the second), and the conversion
// fails on .nan with no line.
func checkNodes(n *yaml3.Node, path []string) error {
	sub := func(seg string) []string { return append(path[:len(path):len(path)], seg) }
	switch n.Kind {
	case yaml3.DocumentNode:
		for _, c := range n.Content {
			if err := checkNodes(c, path); err != nil {
				return err
			}
		}
	case yaml3.SequenceNode:
		for i, c := range n.Content {
			if err := checkNodes(c, sub(fmt.Sprintf("[%d]", i))); err != nil {
				return err
			}
		}
	case yaml3.ScalarNode:
		if nonFinite(n) {
			return &Error{Path: path, Line: n.Line, Column: n.Column, Msg: fmt.Sprintf("expected a finite number, got %s", n.Value)}
		}
	case yaml3.MappingNode:
		seen := map[string]*yaml3.Node{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml3.ScalarNode || k.Tag == "!!merge" {
				continue
			}
			// Keys are compared as the YAML-to-JSON conversion reads
			// them (YAML 1.1): `y:` and `yes:` are both "true", `1.10:`
			// is "1.1"; the second would silently replace the first.
			name := jsonKey(k)
			if first, ok := seen[name]; ok {
				where := "key"
				if len(path) > 0 {
					where = "key in " + FieldPath(path)
				}
				e := &Error{Line: k.Line, Column: k.Column}
				if first.Value != k.Value || name != k.Value {
					e.Msg = fmt.Sprintf("duplicate %s %s: lines %d and %d (%s and %s both read as %s; quote them to keep them apart)", where, strconv.Quote(name), first.Line, k.Line, strconv.Quote(first.Value), strconv.Quote(k.Value), strconv.Quote(name))
				} else {
					e.Msg = fmt.Sprintf("duplicate %s %s: lines %d and %d (a key may be given once)", where, strconv.Quote(k.Value), first.Line, k.Line)
				}
				return e
			}
			seen[name] = k
			if nonFinite(v) {
				// Where the entry is written, as for every other error.
				return &Error{Path: sub(name), Line: k.Line, Column: k.Column, Msg: fmt.Sprintf("expected a finite number, got %s", v.Value)}
			}
			if err := checkNodes(v, sub(name)); err != nil {
				return err
			}
		}
	}
	return nil
}

// nonFinite reports whether n is a float scalar that is not a finite
// number (.nan, .inf, -.Inf), which JSON cannot hold.
func nonFinite(n *yaml3.Node) bool {
	// The spelling first: resolving every scalar's tag costs more.
	if n.Kind != yaml3.ScalarNode || len(n.Value) < 4 || len(n.Value) > 5 {
		return false
	}
	switch strings.ToLower(strings.TrimLeft(n.Value, "+-")) {
	case ".nan", ".inf":
		return n.ShortTag() == "!!float"
	}
	return false
}

// jsonKey returns a mapping key as the YAML-to-JSON conversion
// (sigs.k8s.io/yaml, YAML 1.1) turns it into a JSON key: a plain scalar
// may be a bool, a number or null there (`on` is "true"); a quoted or
// tagged one is its text.
func jsonKey(k *yaml3.Node) string {
	if k.Style&(yaml3.DoubleQuotedStyle|yaml3.SingleQuotedStyle|yaml3.LiteralStyle|yaml3.FoldedStyle|yaml3.TaggedStyle) != 0 {
		return k.Value
	}
	// The common case, cheaply: a plain key that starts with a letter is
	// a string unless it is one of YAML 1.1's bool or null words.
	if v := k.Value; v != "" && (v[0] >= 'a' && v[0] <= 'z' || v[0] >= 'A' && v[0] <= 'Z' || v[0] == '_') {
		if len(v) > 5 {
			return v
		}
		switch strings.ToLower(v) {
		case "y", "yes", "n", "no", "on", "off", "true", "false", "null":
		default:
			return v
		}
	}
	// The key alone in a mapping, converted as the document was.
	j, err := yaml.YAMLToJSON([]byte(k.Value + ": 0"))
	if err != nil {
		return k.Value
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(j, &m) != nil || len(m) != 1 {
		return k.Value
	}
	for name := range m {
		return name
	}
	return k.Value
}
