package decode

import (
	"strconv"
	"strings"

	yaml3 "go.yaml.in/yaml/v3"
)

// Line returns the line, in a YAML or JSON document, of the value at path:
// a list of mapping keys and "[i]" sequence indexes, from the top. When
// the path goes further than the document (a field left out), it is the
// line of the deepest value found; 0 if the document does not parse.
// Errors about a field that decoded well (a check of its value) use it to
// name the line.
func Line(data []byte, path ...string) int {
	var root yaml3.Node
	if err := yaml3.Unmarshal(data, &root); err != nil || len(root.Content) == 0 {
		return 0
	}
	n := root.Content[0]
	line := n.Line
	for _, seg := range path {
		n = child(n, seg)
		if n == nil {
			break
		}
		line = n.Line
	}
	return line
}

// child is the value of key seg in mapping n, or element [i] of sequence
// n; nil if there is none.
func child(n *yaml3.Node, seg string) *yaml3.Node {
	for n.Kind == yaml3.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	switch n.Kind {
	case yaml3.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == seg {
				// A key's line: the value of a block may start lines later.
				v := n.Content[i+1]
				if v.Kind == yaml3.MappingNode || v.Kind == yaml3.SequenceNode {
					c := *v
					c.Line = n.Content[i].Line
					return &c
				}
				return v
			}
		}
	case yaml3.SequenceNode:
		if s, ok := strings.CutPrefix(seg, "["); ok {
			if i, err := strconv.Atoi(strings.TrimSuffix(s, "]")); err == nil && i >= 0 && i < len(n.Content) {
				return n.Content[i]
			}
		}
	}
	return nil
}

// Position returns the line and column, in a YAML or JSON document, where
// the value at path is written: for a mapping entry, its key; for a list
// element, the element. When the path goes further than the document, it
// is where the deepest value found is written; 0, 0 if the document does
// not parse.
func Position(data []byte, path ...string) (line, column int) {
	var root yaml3.Node
	if err := yaml3.Unmarshal(data, &root); err != nil {
		return 0, 0
	}
	return position(&root, path)
}

func position(root *yaml3.Node, path []string) (line, column int) {
	if len(root.Content) == 0 {
		return 0, 0
	}
	n := root.Content[0]
	line, column = n.Line, n.Column
	for _, seg := range path {
		k, v := entry(n, seg)
		if v == nil {
			break
		}
		if k != nil {
			line, column = k.Line, k.Column
		} else {
			line, column = v.Line, v.Column
		}
		n = v
	}
	return line, column
}

// entry is the key and value of key seg in mapping n (the key as the
// YAML-to-JSON conversion reads it), or nil and element [i] of sequence
// n; nil, nil if there is none.
func entry(n *yaml3.Node, seg string) (key, value *yaml3.Node) {
	for n.Kind == yaml3.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	switch n.Kind {
	case yaml3.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			if k := n.Content[i]; k.Value == seg || k.Kind == yaml3.ScalarNode && jsonKey(k) == seg {
				v := n.Content[i+1]
				for v.Kind == yaml3.AliasNode && v.Alias != nil {
					v = v.Alias
				}
				return k, v
			}
		}
	case yaml3.SequenceNode:
		if s, ok := strings.CutPrefix(seg, "["); ok {
			if i, err := strconv.Atoi(strings.TrimSuffix(s, "]")); err == nil && i >= 0 && i < len(n.Content) {
				return nil, n.Content[i]
			}
		}
	}
	return nil, nil
}

// Key is a mapping key as written in a document: its name (as the
// YAML-to-JSON conversion reads it) and where it is.
type Key struct {
	Name         string
	Line, Column int
}

// Keys returns the keys of the mapping at path in data, in the document's
// order; nil if there is no mapping there or the document does not parse.
func Keys(data []byte, path ...string) []Key {
	var root yaml3.Node
	if err := yaml3.Unmarshal(data, &root); err != nil || len(root.Content) == 0 {
		return nil
	}
	n := root.Content[0]
	for _, seg := range path {
		if _, n = entry(n, seg); n == nil {
			return nil
		}
	}
	for n.Kind == yaml3.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind != yaml3.MappingNode {
		return nil
	}
	out := make([]Key, 0, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i]; k.Kind == yaml3.ScalarNode {
			out = append(out, Key{Name: jsonKey(k), Line: k.Line, Column: k.Column})
		}
	}
	return out
}

// Pos is where a value is written in a document (Position).
type Pos struct{ Line, Column int }

// Positions returns Position for each path, parsing data once.
func Positions(data []byte, paths ...[]string) []Pos {
	out := make([]Pos, len(paths))
	var root yaml3.Node
	if err := yaml3.Unmarshal(data, &root); err != nil {
		return out
	}
	for i, p := range paths {
		out[i].Line, out[i].Column = position(&root, p)
	}
	return out
}
