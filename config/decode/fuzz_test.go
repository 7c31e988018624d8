package decode

import (
	"encoding/json"
	"fmt"
	"testing"

	"sigs.k8s.io/yaml"
)

// fuzzDoc is what FuzzStrict decodes into: nested structs, a map of
// structs, a slice of structs, a pointer and an embedded struct, no
// omitempty (so every field is re-encoded).
type fuzzDoc struct {
	fuzzEmbedded
	Name     string                 `json:"name"`
	Port     uint32                 `json:"port"`
	Services map[string]fuzzInner   `json:"services"`
	Items    []fuzzInner            `json:"items"`
	Ptr      *fuzzInner             `json:"ptr"`
	Labels   map[string]string      `json:"labels"`
	Nested   map[string][]fuzzInner `json:"nested"`
}

type fuzzEmbedded struct {
	Zone string `json:"zone"`
}

type fuzzInner struct {
	Address string   `json:"address"`
	Weight  int      `json:"weight"`
	Tags    []string `json:"tags"`
}

// FuzzStrict feeds YAML and JSON documents to Strict. What it accepts
// holds no key it did not decode: every key of the document is one the
// decoded value re-encodes, spelled the same (encoding/json alone would
// take `serviCes:` for `services:`, and drop nothing it could not place
// only because DisallowUnknownFields is on).
func FuzzStrict(f *testing.F) {
	for _, s := range []string{
		"name: a\nport: 80\nservices:\n  web: {address: 10.0.0.1, weight: 2, tags: [x]}\n",
		`{"zone": "z", "items": [{"address": "a"}], "ptr": {"weight": 1}, "labels": {"K": "v"}}`,
		"nested: {a: [{address: b}]}\n",
		"serviCes: {}\n",
		"name: a\nname: b\n",
		"ptr: null\n",
		"",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var d fuzzDoc
		if err := Strict(data, &d); err != nil {
			return
		}
		var in any
		j, err := yaml.YAMLToJSON(data)
		if err != nil || json.Unmarshal(j, &in) != nil {
			t.Fatalf("accepted a document that is not JSON/YAML: %q", data)
		}
		b, err := json.Marshal(&d)
		if err != nil {
			t.Fatal(err)
		}
		var out any
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatal(err)
		}
		if err := keysKept(in, out, ""); err != nil {
			t.Fatalf("%v\ninput %q\nre-encoded %s", err, data, b)
		}
	})
}

// keysKept reports a key of in (a decoded document) that out (the
// re-encoded value) does not have at the same path.
func keysKept(in, out any, path string) error {
	switch v := in.(type) {
	case map[string]any:
		o, ok := out.(map[string]any)
		if !ok {
			if out == nil && len(v) == 0 {
				return nil // an empty mapping into a nil map
			}
			return fmt.Errorf("%s: a mapping became %T", path, out)
		}
		for k, iv := range v {
			ov, ok := o[k]
			if !ok {
				return fmt.Errorf("key %q in %q was accepted but not kept", k, path)
			}
			if err := keysKept(iv, ov, path+"."+k); err != nil {
				return err
			}
		}
	case []any:
		o, ok := out.([]any)
		if !ok || len(o) != len(v) {
			if out == nil && len(v) == 0 {
				return nil
			}
			return fmt.Errorf("%s: a list of %d became %v", path, len(v), out)
		}
		for i := range v {
			if err := keysKept(v[i], o[i], fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	}
	return nil
}
