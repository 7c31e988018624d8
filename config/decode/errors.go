package decode

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	yaml3 "go.yaml.in/yaml/v3"
)

// Error is a problem at one place of a document: the field's path (mapping
// keys and "[i]" sequence indexes, from the top), where it is written (line
// and column, 0 when the document is not at hand, as for JSONStrict), and
// what is wrong, in the document's own terms.
//
//	line 3, column 5: xds.listen: expected host:port, got 18000
type Error struct {
	Path         []string
	Line, Column int
	Msg          string
	// Err is the error the problem came from (a field's UnmarshalJSON),
	// or nil.
	Err error
	// unknown: the last key of Path is one its mapping does not take;
	// Msg is the hint that follows (`unknown field "x" in a (did you mean
	// "y"?)`).
	unknown bool
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.Line > 0 {
		fmt.Fprintf(&b, "line %d, column %d: ", e.Line, e.Column)
	}
	if e.unknown && len(e.Path) > 0 {
		fmt.Fprintf(&b, "unknown field %q", e.Path[len(e.Path)-1])
		if p := FieldPath(e.Path[:len(e.Path)-1]); p != "" {
			b.WriteString(" in " + p)
		}
		b.WriteString(" " + e.Msg)
		return b.String()
	}
	if p := FieldPath(e.Path); p != "" {
		b.WriteString(p)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// Under returns err as an *Error at path prefix + its own path: a block
// decoded on its own (a source's block, a health check) placed where it
// sits in its document. An error that is not an *Error becomes one at
// prefix.
func Under(err error, prefix ...string) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		c := *e
		c.Path = append(append([]string{}, prefix...), e.Path...)
		return &c
	}
	return &Error{Path: append([]string{}, prefix...), Msg: err.Error(), Err: err}
}

// FieldPath writes a path as error messages do: services."web.internal"
// .routes[0].match. A key that is empty, or holds a dot, a bracket, a
// quote, a space, a control or non-printable character or bytes that are
// not UTF-8, is quoted (strconv.Quote), so what a message shows is what
// the file holds and no terminal control byte is printed raw.
func FieldPath(path []string) string {
	var b strings.Builder
	for _, seg := range path {
		if isIndex(seg) {
			b.WriteString(seg)
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		if needsQuote(seg) {
			b.WriteString(strconv.Quote(seg))
		} else {
			b.WriteString(seg)
		}
	}
	return b.String()
}

// isIndex reports whether a path segment is a list index, "[N]" (a key
// such as the pattern "[ab]" is not).
func isIndex(seg string) bool {
	if len(seg) < 3 || seg[0] != '[' || seg[len(seg)-1] != ']' {
		return false
	}
	return strings.Trim(seg[1:len(seg)-1], "0123456789") == ""
}

func needsQuote(s string) bool {
	if s == "" || !utf8.ValidString(s) || strings.ContainsAny(s, ".[]\" ") {
		return true
	}
	for _, r := range s {
		if !strconv.IsPrint(r) {
			return true
		}
	}
	return false
}

// Suggest returns the candidate closest to name by edit distance, if it
// is close enough to be a likely typo ("adress" for "address"), else "".
func Suggest(name string, candidates []string) string {
	best, bestD := "", -1
	for _, c := range candidates {
		d := editDistance(strings.ToLower(name), strings.ToLower(c))
		if bestD < 0 || d < bestD || d == bestD && c < best {
			best, bestD = c, d
		}
	}
	if bestD < 0 || bestD > max(2, utf8.RuneCountInString(name)/3) || bestD >= utf8.RuneCountInString(best) {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance of a and b, in runes.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}

// unknownHint is what follows an unknown key: the field it most likely
// means, else the keys that mapping takes.
func unknownHint(key string, fields map[string]reflect.StructField) string {
	names := make([]string, 0, len(fields))
	for n := range fields {
		names = append(names, n)
	}
	sort.Strings(names)
	if s := Suggest(key, names); s != "" {
		return fmt.Sprintf("(did you mean %q?)", s)
	}
	if len(names) == 0 {
		return "(this mapping takes no keys)"
	}
	return "(expected one of: " + strings.Join(names, ", ") + ")"
}

// expected says, in YAML terms, what a value of type t is written as.
func expected(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Pointer:
		return expected(t.Elem())
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int64:
		return "a whole number"
	case reflect.Int8, reflect.Int16, reflect.Int32:
		bits := t.Bits()
		return fmt.Sprintf("a whole number from %d to %d", -(int64(1) << (bits - 1)), int64(1)<<(bits-1)-1)
	case reflect.Uint, reflect.Uint64, reflect.Uintptr:
		return fmt.Sprintf("a whole number from 0 to %d", uint64(math.MaxUint64))
	case reflect.Uint8, reflect.Uint16, reflect.Uint32:
		return fmt.Sprintf("a whole number from 0 to %d", uint64(1)<<t.Bits()-1)
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "a mapping"
	}
	return "a value"
}

// Describe says, in YAML terms, what a JSON value is: a number as
// written (cut at 40 bytes), "a string", "a list", "a mapping", true,
// false or null. A string's text is not shown: config errors end up in
// logs, and a secret put in the wrong field would be.
func Describe(raw []byte) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '"':
		return "a string"
	case '[':
		return "a list"
	case '{':
		return "a mapping"
	}
	if len(raw) > 40 {
		return string(raw[:40]) + "..."
	}
	return string(raw)
}

// Locate returns the line and column, in data, of what err is about: the
// path of the *Error err is (or wraps with no text added), else the field
// path its message starts with
// ("xds.listen: ...", "sources[0] (static): ..."), under prefix (where the
// block that err is about sits in data). 0, 0 when err names no place
// data has, or already names its line.
func Locate(data []byte, prefix []string, err error) (line, column int) {
	if err == nil || len(data) == 0 {
		return 0, 0
	}
	var path []string
	var e *Error
	switch {
	case errors.As(err, &e) && e.Line > 0:
		return 0, 0
	case e != nil && err.Error() == e.Error():
		path = e.Path
	default:
		// An *Error wrapped under text naming more of the path
		// ("sources[0].health_check.interval: ..."): the text has it all.
		path = leadingPath(err.Error())
	}
	full := append(append([]string{}, prefix...), path...)
	if len(full) == 0 {
		return 0, 0
	}
	var root yaml3.Node
	if yaml3.Unmarshal(data, &root) != nil || len(root.Content) == 0 {
		return 0, 0
	}
	if _, v := entry(root.Content[0], full[0]); v == nil {
		return 0, 0
	}
	return position(&root, full)
}

// leadingPath parses the field path a message starts with, as FieldPath
// writes it: keys of letters, digits, _ and -, or quoted; joined by dots;
// [i] indexes; up to a colon, comma, space or parenthesis. Nil if the
// message starts otherwise.
func leadingPath(msg string) []string {
	var path []string
	for i := 0; ; {
		switch {
		case i < len(msg) && msg[i] == '"':
			q, err := strconv.QuotedPrefix(msg[i:])
			if err != nil {
				return nil
			}
			k, _ := strconv.Unquote(q)
			path = append(path, k)
			i += len(q)
		case i < len(msg) && msg[i] == '[':
			j := strings.IndexByte(msg[i:], ']')
			if j < 0 {
				return nil
			}
			path = append(path, msg[i:i+j+1])
			i += j + 1
		default:
			j := i
			for j < len(msg) && (msg[j] >= 'a' && msg[j] <= 'z' || msg[j] >= 'A' && msg[j] <= 'Z' || msg[j] >= '0' && msg[j] <= '9' || msg[j] == '_' || msg[j] == '-') {
				j++
			}
			if j == i {
				return nil
			}
			path = append(path, msg[i:j])
			i = j
		}
		if i >= len(msg) {
			return nil
		}
		switch msg[i] {
		case '.':
			i++
		case '[':
		case ':', ',', ' ', '(':
			return path
		default:
			return nil
		}
	}
}
