// Package decode decodes configuration documents (YAML or JSON) strictly:
// unknown fields and keys given twice are errors, and every error names
// the field with its path, and its line where it can. The bridge's config
// file, the services file and the policy file all use it; it imports
// nothing of the bridge's.
package decode

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	yaml3 "go.yaml.in/yaml/v3"
	"sigs.k8s.io/yaml"
)

// Duration is a time.Duration written as a Go duration string ("50ms", "5s")
// or a number of seconds.
type Duration time.Duration

// D returns the duration as time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("invalid duration %q (expected a duration like 5s, 1m30s or 250ms)", s)
		}
		if v < 0 {
			return fmt.Errorf("negative duration %q (expected a duration like 5s, not below 0)", s)
		}
		*d = Duration(v)
		return nil
	}
	var f float64
	if err := json.Unmarshal(b, &f); err != nil {
		return fmt.Errorf("invalid duration: expected a duration like 5s (or a number of seconds), got %s", Describe(b))
	}
	if f < 0 {
		return fmt.Errorf("negative duration %v (expected a duration like 5s, not below 0)", f)
	}
	// float64(math.MaxInt64) rounds up to 2^63, itself out of range.
	if ns := f * float64(time.Second); ns >= float64(math.MaxInt64) {
		return fmt.Errorf("duration %v seconds is out of range (at most %s)", f, time.Duration(math.MaxInt64))
	}
	*d = Duration(f * float64(time.Second))
	return nil
}

// CheckRange checks a duration against its documented range, min..max
// (inclusive). The error names the field and the range:
// "debounce.quiet: 1h0m0s is not in 1ms..5s".
func CheckRange(field string, d, min, max time.Duration) error {
	if d < min || d > max {
		return fmt.Errorf("%s: %s is not in %s..%s", field, fmtRange(d), fmtRange(min), fmtRange(max))
	}
	return nil
}

// CheckCount checks a count against its documented range, min..max.
func CheckCount(field string, n, min, max int) error {
	if n < min || n > max {
		return fmt.Errorf("%s: %d is not in %d..%d", field, n, min, max)
	}
	return nil
}

// fmtRange writes a range bound the short way: 5s, 1h, 100ms, not 1h0m0s.
func fmtRange(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// Strict decodes YAML or JSON into v, rejecting unknown fields, keys
// given twice and numbers that are not finite (.nan, .inf). Errors are
// *Error naming the field's path, line and column, and what was expected
// there in YAML terms.
func Strict(data []byte, v any) error {
	var root yaml3.Node
	parsed := yaml3.Unmarshal(data, &root) == nil
	if parsed {
		// Before the conversion to JSON, which fails on .nan with no line
		// and keeps the last of two equal keys silently.
		if err := checkNodes(&root, nil); err != nil {
			return err
		}
	}
	j, err := yaml.YAMLToJSON(data)
	if err != nil {
		return yamlError(err)
	}
	err = JSONStrict(j, v)
	var e *Error
	if parsed && errors.As(err, &e) && e.Line == 0 {
		e.Line, e.Column = position(&root, e.Path)
	}
	return err
}

// yamlError words an error of the YAML parser as "line N: what".
func yamlError(err error) error {
	msg := strings.TrimPrefix(err.Error(), "error converting YAML to JSON: ")
	msg = strings.TrimPrefix(msg, "yaml: ")
	return errors.New(msg)
}

// JSONStrict decodes JSON into v, rejecting unknown fields and trailing
// data. An empty or null document leaves v as it is. Errors about a field
// are *Error with its full path and no line (the JSON of a block holds
// none; Strict and Under place it): `unknown field "adress" in
// services.web.endpoints[0] (did you mean "address"?)`,
// `debounce.quiet: invalid duration "bogus" (expected a duration like 5s)`.
func JSONStrict(data []byte, v any) error {
	if len(bytes.TrimSpace(data)) == 0 || bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var se *json.SyntaxError
		if !errors.As(err, &se) && !errors.Is(err, io.ErrUnexpectedEOF) {
			// encoding/json's errors carry no path (unknown fields, errors
			// from UnmarshalJSON methods) or only its struct part (type
			// errors); find the first offending value again, with its path.
			if e := locate(reflect.TypeOf(v), data, nil, ""); e != nil {
				return e
			}
		}
		return fieldError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("unexpected data after the document")
	}
	// encoding/json matches keys to fields case-insensitively (it took
	// `serviCes:` for `services:`); the files' keys are case-sensitive.
	if e := checkKeyCase(reflect.TypeOf(v), data, nil); e != nil {
		return e
	}
	return nil
}

// fieldError rewrites encoding/json's errors that locate could not place
// so they lead with the field and speak of YAML values.
func fieldError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		var path []string
		if te.Field != "" {
			path = strings.Split(te.Field, ".")
		}
		return &Error{Path: path, Msg: "expected " + expected(te.Type) + ", got " + describeJSONKind(te.Value)}
	}
	msg := err.Error()
	if f, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		return fmt.Errorf("unknown field %s", f)
	}
	return err
}

// describeJSONKind words encoding/json's name of a value's kind
// ("number 2.5", "array") as Describe does.
func describeJSONKind(v string) string {
	switch v {
	case "string":
		return "a string"
	case "number":
		return "a number"
	case "array":
		return "a list"
	case "object":
		return "a mapping"
	case "bool":
		return "true or false"
	}
	if n, ok := strings.CutPrefix(v, "number "); ok {
		return n
	}
	return v
}

// unknownField is the error of a key no field of the mapping at path has.
func unknownField(path []string, key string, fields map[string]reflect.StructField) *Error {
	full := append(append([]string{}, path...), key)
	if want := foldMatch(fields, key); want != "" {
		return &Error{Path: full, unknown: true, Msg: fmt.Sprintf("(keys are case-sensitive: did you mean %q?)", want)}
	}
	return &Error{Path: full, unknown: true, Msg: unknownHint(key, fields)}
}

// leafError is the error of a value at path that did not decode: a type
// mismatch worded in YAML terms (want, a field's `want` tag, overrides
// what the Go type says), or the error of the type's own UnmarshalJSON
// placed at path.
func leafError(raw []byte, path []string, want string, err error) *Error {
	if te, ok := err.(*json.UnmarshalTypeError); ok {
		if want == "" {
			want = expected(te.Type)
		}
		return &Error{Path: path, Msg: "expected " + want + ", got " + Describe(raw)}
	}
	var inner *Error
	if errors.As(err, &inner) {
		return Under(inner, path...).(*Error)
	}
	return &Error{Path: path, Msg: err.Error(), Err: err}
}

var (
	unmarshalerType     = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// locate walks the JSON document alongside the Go type it failed to decode
// into and returns the first problem (in key order) with its path, or nil
// if it finds none. want is the `want` tag of the field holding the value.
func locate(t reflect.Type, data []byte, path []string, want string) *Error {
	if t == nil || bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		return nil
	}
	leaf := func() *Error {
		if err := json.Unmarshal(data, reflect.New(t).Interface()); err != nil {
			return leafError(data, path, want, err)
		}
		return nil
	}
	if t.Kind() != reflect.Pointer && (reflect.PointerTo(t).Implements(unmarshalerType) || reflect.PointerTo(t).Implements(textUnmarshalerType)) {
		return leaf()
	}
	switch t.Kind() {
	case reflect.Pointer:
		return locate(t.Elem(), data, path, want)
	case reflect.Interface:
		return nil
	case reflect.Struct:
		var obj map[string]json.RawMessage
		if json.Unmarshal(data, &obj) != nil {
			return leaf()
		}
		fields := fieldsOf(t)
		for _, k := range slices.Sorted(maps.Keys(obj)) {
			f, ok := fields[k]
			if !ok {
				return unknownField(path, k, fields)
			}
			if e := locate(f.Type, obj[k], append(path[:len(path):len(path)], k), f.Tag.Get("want")); e != nil {
				return e
			}
		}
		return nil
	case reflect.Map:
		var obj map[string]json.RawMessage
		if t.Key().Kind() != reflect.String || json.Unmarshal(data, &obj) != nil {
			return leaf()
		}
		for _, k := range slices.Sorted(maps.Keys(obj)) {
			if e := locate(t.Elem(), obj[k], append(path[:len(path):len(path)], k), ""); e != nil {
				return e
			}
		}
		return nil
	case reflect.Slice, reflect.Array:
		var arr []json.RawMessage
		if t.Elem().Kind() == reflect.Uint8 || json.Unmarshal(data, &arr) != nil {
			return leaf()
		}
		for i, el := range arr {
			if e := locate(t.Elem(), el, append(path[:len(path):len(path)], fmt.Sprintf("[%d]", i)), ""); e != nil {
				return e
			}
		}
		return nil
	}
	return leaf()
}

// jsonFields maps a struct's JSON field names to its fields, embedded
// structs' fields included, as encoding/json sees them.
func jsonFields(t reflect.Type) map[string]reflect.StructField {
	out := map[string]reflect.StructField{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			et := f.Type
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct {
				for n, g := range jsonFields(et) {
					if _, ok := out[n]; !ok {
						out[n] = g
					}
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f
	}
	return out
}

// foldMatch returns the name of the field that key matches only
// case-insensitively (the one encoding/json would fill), or "".
func foldMatch(fields map[string]reflect.StructField, key string) string {
	names := make([]string, 0, len(fields))
	for name := range fields {
		if strings.EqualFold(name, key) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	if len(names) == 0 {
		return ""
	}
	return names[0]
}

// checkKeyCase walks a document that decoded into t and returns the first
// key (in key order) that matched a struct field only case-insensitively,
// or nil. Values of types that decode themselves (UnmarshalJSON) are left
// to them: the bridge's own ones decode with JSONStrict.
func checkKeyCase(t reflect.Type, data []byte, path []string) *Error {
	if t == nil || !hasFields(t) {
		return nil
	}
	sub := func(k string) []string { return append(path[:len(path):len(path)], k) }
	switch t.Kind() {
	case reflect.Pointer:
		return checkKeyCase(t.Elem(), data, path)
	case reflect.Struct:
		var obj map[string]json.RawMessage
		if json.Unmarshal(data, &obj) != nil {
			return nil
		}
		fields := fieldsOf(t)
		for _, k := range slices.Sorted(maps.Keys(obj)) {
			f, ok := fields[k]
			if !ok {
				if foldMatch(fields, k) != "" {
					return unknownField(path, k, fields)
				}
				continue
			}
			if e := checkKeyCase(f.Type, obj[k], sub(k)); e != nil {
				return e
			}
		}
	case reflect.Map:
		var obj map[string]json.RawMessage
		if json.Unmarshal(data, &obj) != nil {
			return nil
		}
		for _, k := range slices.Sorted(maps.Keys(obj)) {
			if e := checkKeyCase(t.Elem(), obj[k], sub(k)); e != nil {
				return e
			}
		}
	case reflect.Slice, reflect.Array:
		var arr []json.RawMessage
		if json.Unmarshal(data, &arr) != nil {
			return nil
		}
		for i, el := range arr {
			if e := checkKeyCase(t.Elem(), el, sub(fmt.Sprintf("[%d]", i))); e != nil {
				return e
			}
		}
	}
	return nil
}

// fieldCache holds jsonFields per struct type and hasFields per type.
var fieldCache, walkCache sync.Map

func fieldsOf(t reflect.Type) map[string]reflect.StructField {
	if f, ok := fieldCache.Load(t); ok {
		return f.(map[string]reflect.StructField)
	}
	f := jsonFields(t)
	fieldCache.Store(t, f)
	return f
}

// hasFields reports whether a value of type t can hold a struct that
// encoding/json fills field by field, so checkKeyCase must look inside.
func hasFields(t reflect.Type) bool {
	if v, ok := walkCache.Load(t); ok {
		return v.(bool)
	}
	walkCache.Store(t, true) // a recursive type: assume so while looking
	v := hasFieldsUncached(t)
	walkCache.Store(t, v)
	return v
}

func hasFieldsUncached(t reflect.Type) bool {
	if t.Kind() != reflect.Pointer && (reflect.PointerTo(t).Implements(unmarshalerType) || reflect.PointerTo(t).Implements(textUnmarshalerType)) {
		return false
	}
	switch t.Kind() {
	case reflect.Struct:
		return true
	case reflect.Pointer, reflect.Slice, reflect.Array:
		return hasFields(t.Elem())
	case reflect.Map:
		return t.Key().Kind() == reflect.String && hasFields(t.Elem())
	}
	return false
}
