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
	"math"
	"reflect"
	"sort"
	"strings"
	"sync"
	"time"

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
			return fmt.Errorf("invalid duration %q (want e.g. \"50ms\", \"5s\")", s)
		}
		if v < 0 {
			return fmt.Errorf("negative duration %q", s)
		}
		*d = Duration(v)
		return nil
	}
	var f float64
	if err := json.Unmarshal(b, &f); err != nil {
		return fmt.Errorf("invalid duration %s (want a string such as \"5s\" or a number of seconds)", b)
	}
	if f < 0 {
		return fmt.Errorf("negative duration %v", f)
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

// Strict decodes YAML or JSON into v, rejecting unknown fields and
// keys given twice. Errors name the field (and both lines of a duplicate).
func Strict(data []byte, v any) error {
	j, err := yaml.YAMLToJSON(data)
	if err != nil {
		return err
	}
	if err := checkDuplicateKeys(data); err != nil {
		return err
	}
	return JSONStrict(j, v)
}

// JSONStrict decodes JSON into v, rejecting unknown fields and trailing
// data. An empty or null document leaves v as it is. Errors name the field
// with its full path: `unknown field "adress" in services.web.endpoints[0]`,
// `debounce.quiet: invalid duration "bogus"`.
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
			if l := locate(reflect.TypeOf(v), data, ""); l != nil {
				return l.error(err)
			}
		}
		return fieldError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("unexpected data after the document")
	}
	// encoding/json matches keys to fields case-insensitively (it took
	// `serviCes:` for `services:`); the files' keys are case-sensitive.
	if l := checkKeyCase(reflect.TypeOf(v), data, ""); l != nil {
		return l.error(nil)
	}
	return nil
}

// fieldError rewrites encoding/json's errors so they lead with the field.
func fieldError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return fmt.Errorf("%s: cannot use a JSON %s here (want %s)", te.Field, te.Value, te.Type)
	}
	msg := err.Error()
	if f, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		return fmt.Errorf("unknown field %s", f)
	}
	return err
}

// located is a problem found by locate: an unknown field (err nil, unknown
// its name, path the object holding it) or a value that fails to decode
// (err).
type located struct {
	path    string
	unknown string
	// want is the field's spelling when unknown matches a field only
	// case-insensitively.
	want string
	err  error
}

// error words the problem. decodeErr is encoding/json's own error, whose
// wording is kept where callers may match on it.
func (l *located) error(decodeErr error) error {
	// An unknown field is the one problem without an error of its own;
	// its name may be "" (`"": 1`).
	if l.err == nil && l.want != "" {
		hint := fmt.Sprintf("(keys are case-sensitive: did you mean %q?)", l.want)
		if l.path == "" {
			return fmt.Errorf("unknown field %q %s", l.unknown, hint)
		}
		return fmt.Errorf("unknown field %q in %s %s", l.unknown, l.path, hint)
	}
	if l.err == nil {
		if l.path == "" {
			return fmt.Errorf("unknown field %q", l.unknown)
		}
		return fmt.Errorf("unknown field %q in %s", l.unknown, l.path)
	}
	// Only a plain type error; one wrapped by an UnmarshalJSON method
	// keeps that method's wording.
	if te, ok := l.err.(*json.UnmarshalTypeError); ok {
		msg := fmt.Sprintf("cannot use a JSON %s here (want %s)", te.Value, te.Type)
		// encoding/json names the struct fields only (services.endpoints.port);
		// lead with that and add the full path if it says more.
		var outer *json.UnmarshalTypeError
		if errors.As(decodeErr, &outer) && outer.Field != "" {
			if outer.Field == l.path {
				return fmt.Errorf("%s: %s", outer.Field, msg)
			}
			return fmt.Errorf("%s: %s, at %s", outer.Field, msg, l.path)
		}
		if l.path == "" {
			return errors.New(msg)
		}
		return fmt.Errorf("%s: %s", l.path, msg)
	}
	if l.path == "" {
		return l.err
	}
	return fmt.Errorf("%s: %w", l.path, l.err)
}

var (
	unmarshalerType     = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// locate walks the JSON document alongside the Go type it failed to decode
// into and returns the first problem (in key order) with its path, or nil
// if it finds none.
func locate(t reflect.Type, data []byte, path string) *located {
	if t == nil || bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		return nil
	}
	leaf := func() *located {
		if err := json.Unmarshal(data, reflect.New(t).Interface()); err != nil {
			return &located{path: path, err: err}
		}
		return nil
	}
	if t.Kind() != reflect.Pointer && (reflect.PointerTo(t).Implements(unmarshalerType) || reflect.PointerTo(t).Implements(textUnmarshalerType)) {
		return leaf()
	}
	switch t.Kind() {
	case reflect.Pointer:
		return locate(t.Elem(), data, path)
	case reflect.Interface:
		return nil
	case reflect.Struct:
		var obj map[string]json.RawMessage
		if json.Unmarshal(data, &obj) != nil {
			return leaf()
		}
		fields := jsonFields(t)
		for _, k := range sortedKeys(obj) {
			f, ok := fields[k]
			if !ok {
				return &located{path: path, unknown: k, want: foldMatch(fields, k)}
			}
			if l := locate(f.Type, obj[k], join(path, k)); l != nil {
				return l
			}
		}
		return nil
	case reflect.Map:
		var obj map[string]json.RawMessage
		if t.Key().Kind() != reflect.String || json.Unmarshal(data, &obj) != nil {
			return leaf()
		}
		for _, k := range sortedKeys(obj) {
			if l := locate(t.Elem(), obj[k], join(path, k)); l != nil {
				return l
			}
		}
		return nil
	case reflect.Slice, reflect.Array:
		var arr []json.RawMessage
		if t.Elem().Kind() == reflect.Uint8 || json.Unmarshal(data, &arr) != nil {
			return leaf()
		}
		for i, el := range arr {
			if l := locate(t.Elem(), el, fmt.Sprintf("%s[%d]", path, i)); l != nil {
				return l
			}
		}
		return nil
	}
	return leaf()
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func sortedKeys(m map[string]json.RawMessage) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
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
func checkKeyCase(t reflect.Type, data []byte, path string) *located {
	if t == nil || !hasFields(t) {
		return nil
	}
	switch t.Kind() {
	case reflect.Pointer:
		return checkKeyCase(t.Elem(), data, path)
	case reflect.Struct:
		var obj map[string]json.RawMessage
		if json.Unmarshal(data, &obj) != nil {
			return nil
		}
		fields := fieldsOf(t)
		for _, k := range sortedKeys(obj) {
			f, ok := fields[k]
			if !ok {
				if want := foldMatch(fields, k); want != "" {
					return &located{path: path, unknown: k, want: want}
				}
				continue
			}
			if l := checkKeyCase(f.Type, obj[k], join(path, k)); l != nil {
				return l
			}
		}
	case reflect.Map:
		var obj map[string]json.RawMessage
		if json.Unmarshal(data, &obj) != nil {
			return nil
		}
		for _, k := range sortedKeys(obj) {
			if l := checkKeyCase(t.Elem(), obj[k], join(path, k)); l != nil {
				return l
			}
		}
	case reflect.Slice, reflect.Array:
		var arr []json.RawMessage
		if json.Unmarshal(data, &arr) != nil {
			return nil
		}
		for i, el := range arr {
			if l := checkKeyCase(t.Elem(), el, fmt.Sprintf("%s[%d]", path, i)); l != nil {
				return l
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
