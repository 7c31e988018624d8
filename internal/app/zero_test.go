package app

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/xdsbridge/xdsbridge/config"
	"github.com/xdsbridge/xdsbridge/config/decode"
)

// Zero follows one rule across the configuration: every count, limit and
// duration the file can set, written as 0, loads as if left out (its
// default), once the app has resolved the options. The walk finds the
// fields by reflection, so a field added later is held to the rule too.
// (The sources' own blocks are decoded by their factories and not walked
// here.)
func TestConfigZeroIsTheDefault(t *testing.T) {
	// The blocks that are absent unless given are given.
	doc := func() map[string]any {
		return map[string]any{
			"sources": []any{map[string]any{"name": "static", "file": map[string]any{"path": "services.yaml"}}},
			"xds": map[string]any{"rest": map[string]any{
				"listen": "127.0.0.1:0", "eds_config": map[string]any{"cluster_name": "rest"},
			}},
			"outputs": map[string]any{"filesystem": map[string]any{"dir": t.TempDir()}},
		}
	}
	load := func(d map[string]any) (*config.Config, error) {
		b, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		return parseOptions(string(b))
	}
	base, err := load(doc())
	if err != nil {
		t.Fatal(err)
	}
	var leaves [][]string
	zeroLeaves(reflect.ValueOf(*base), nil, &leaves)
	if len(leaves) < 35 {
		t.Fatalf("only %d numeric fields found: %v", len(leaves), leaves)
	}
	durType := reflect.TypeOf(decode.Duration(0))
	for _, path := range leaves {
		name := strings.Join(path, ".")
		t.Run(name, func(t *testing.T) {
			var zero any = 0
			if f, ok := fieldAt(reflect.TypeOf(*base), path); ok && f == durType {
				zero = "0s"
			}
			d := doc()
			d["outputs"].(map[string]any)["filesystem"].(map[string]any)["dir"] = base.Outputs.Filesystem.Dir
			m := d
			for _, seg := range path[:len(path)-1] {
				if _, ok := m[seg]; !ok {
					m[seg] = map[string]any{}
				}
				m = m[seg].(map[string]any)
			}
			m[path[len(path)-1]] = zero
			c, err := load(d)
			if err != nil {
				t.Fatalf("0 is refused: %v", err)
			}
			if !reflect.DeepEqual(base, c) {
				t.Errorf("0 loads differently from leaving it out")
			}
		})
	}
}

// zeroLeaves lists the JSON paths of the numeric fields under v (structs
// followed, nil pointers, maps and slices not).
func zeroLeaves(v reflect.Value, path []string, out *[][]string) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := strings.Split(f.Tag.Get("json"), ",")[0]
		if !f.IsExported() || tag == "" || tag == "-" {
			continue
		}
		p := append(append([]string(nil), path...), tag)
		fv := v.Field(i)
		if fv.Kind() == reflect.Pointer {
			if fv.IsNil() {
				continue
			}
			fv = fv.Elem()
		}
		switch fv.Kind() {
		case reflect.Struct:
			zeroLeaves(fv, p, out)
		case reflect.Int, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint32, reflect.Uint64, reflect.Float64:
			*out = append(*out, p)
		}
	}
}

// fieldAt is the type of the field at a JSON path.
func fieldAt(t reflect.Type, path []string) (reflect.Type, bool) {
	for _, seg := range path {
		if t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		found := false
		for i := 0; i < t.NumField(); i++ {
			if strings.Split(t.Field(i).Tag.Get("json"), ",")[0] == seg {
				t, found = t.Field(i).Type, true
				break
			}
		}
		if !found {
			return nil, false
		}
	}
	return t, true
}
