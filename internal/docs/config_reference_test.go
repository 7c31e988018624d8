package docs

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xdsbridge/xdsbridge/config"
	"github.com/xdsbridge/xdsbridge/config/decode"
	"github.com/xdsbridge/xdsbridge/healthcheck"
	"github.com/xdsbridge/xdsbridge/internal/app"
	"github.com/xdsbridge/xdsbridge/internal/memlimit"
	"github.com/xdsbridge/xdsbridge/sources/consul"
	"github.com/xdsbridge/xdsbridge/sources/dns"
	"github.com/xdsbridge/xdsbridge/sources/file"
	"github.com/xdsbridge/xdsbridge/xds"
)

const referencePath = "../../docs/configuration.md"

// sourceBlocks are the type blocks of a source entry, by key: the type each
// source's factory decodes its block into.
var sourceBlocks = map[string]reflect.Type{
	"file":        reflect.TypeFor[file.Config](),
	"policy_file": reflect.TypeFor[file.Config](),
	"dns":         reflect.TypeFor[dns.Config](),
	"consul":      reflect.TypeFor[consul.Config](),
}

// sharedBlocks are blocks that appear at several paths and are documented
// once, under a prefix of their own.
var sharedBlocks = map[reflect.Type]string{
	reflect.TypeFor[healthcheck.Config](): "health_check",
	reflect.TypeFor[config.TLS]():         "tls",
}

var (
	durationType   = reflect.TypeFor[decode.Duration]()
	rawMessageType = reflect.TypeFor[json.RawMessage]()
	sourceType     = reflect.TypeFor[config.Source]()
)

// typeWord is how the reference names a field's type.
func typeWord(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == durationType {
		return "duration"
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Bool:
		return "boolean"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.String {
			return "list of strings"
		}
		return "list"
	case reflect.Map:
		return "mapping"
	}
	return "block"
}

// schema walks the configuration's types and returns every field path
// with its type word.
func schema(t *testing.T) map[string]string {
	t.Helper()
	paths := map[string]string{}
	var walk func(prefix string, typ reflect.Type)
	walked := map[reflect.Type]bool{}
	shared := func(typ reflect.Type) {
		if !walked[typ] {
			walked[typ] = true
			walk(sharedBlocks[typ], typ)
		}
	}
	add := func(path string, typ reflect.Type) {
		if _, dup := paths[path]; dup {
			t.Fatalf("schema path %s twice", path)
		}
		paths[path] = typeWord(typ)
	}
	// field adds the field at path and what is under it.
	var field func(path string, typ reflect.Type)
	field = func(path string, typ reflect.Type) {
		for typ.Kind() == reflect.Pointer {
			typ = typ.Elem()
		}
		if typ == rawMessageType {
			// A health check block (health_checks.services.<service>).
			add(path, reflect.TypeFor[healthcheck.Config]())
			shared(reflect.TypeFor[healthcheck.Config]())
			return
		}
		add(path, typ)
		if _, ok := sharedBlocks[typ]; ok {
			shared(typ)
			return
		}
		switch {
		case typ == sourceType:
			t.Fatalf("%s: a source entry outside sources[]", path)
		case typ.Kind() == reflect.Struct && typ != durationType:
			walk(path, typ)
		case typ.Kind() == reflect.Slice && typ.Elem() == sourceType:
			entry := path + "[]"
			field(entry+".name", reflect.TypeFor[string]())
			field(entry+".health_check", reflect.TypeFor[healthcheck.Config]())
			field(entry+".default_locality", reflect.TypeFor[config.Locality]())
			field(entry+".priority", reflect.TypeFor[int]())
			for key, block := range sourceBlocks {
				field(entry+"."+key, block)
			}
		case typ.Kind() == reflect.Slice && typ.Elem().Kind() == reflect.Struct:
			walk(path+"[]", typ.Elem())
		case typ.Kind() == reflect.Map:
			name := "<name>"
			if path == "health_checks.services" {
				name = "<service>"
			}
			field(path+"."+name, typ.Elem())
		}
	}
	walk = func(prefix string, typ reflect.Type) {
		for i := range typ.NumField() {
			f := typ.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if !f.IsExported() || name == "-" {
				continue
			}
			if name == "" {
				t.Fatalf("%s.%s has no json name", typ, f.Name)
			}
			path := name
			if prefix != "" {
				path = prefix + "." + name
			}
			field(path, f.Type)
		}
	}
	walk("", reflect.TypeFor[config.Config]())
	return paths
}

// row is one line of a reference table.
type row struct {
	line                 int
	path, typ, deflt, rg string
}

var rowPath = regexp.MustCompile("^\\| `([^`]+)` \\|")

func referenceRows(t *testing.T) []row {
	t.Helper()
	b, err := os.ReadFile(referencePath)
	if err != nil {
		t.Fatal(err)
	}
	var rows []row
	for i, l := range strings.Split(string(b), "\n") {
		if !rowPath.MatchString(l) {
			continue
		}
		cells := strings.Split(strings.TrimSpace(l), "|")
		cells = cells[1 : len(cells)-1]
		for j := range cells {
			cells[j] = strings.TrimSpace(cells[j])
		}
		if len(cells) != 5 {
			t.Fatalf("%s:%d: want Field | Type | Default | Range | Meaning: %q", referencePath, i+1, l)
		}
		rows = append(rows, row{line: i + 1, path: strings.Trim(cells[0], "`"), typ: cells[1], deflt: cells[2], rg: cells[3]})
	}
	return rows
}

// TestConfigReferenceMatchesSchema: docs/configuration.md documents every
// field of the configuration, with its type, and no field it does not have.
func TestConfigReferenceMatchesSchema(t *testing.T) {
	keys := make([]string, 0, len(sourceBlocks))
	for k := range sourceBlocks {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if got := app.SourceTypeNames(); !slices.Equal(got, keys) {
		t.Fatalf("source types %v; this test knows the blocks of %v: add the new type's config to sourceBlocks", got, keys)
	}
	want := schema(t)
	documented := map[string]bool{}
	for _, r := range referenceRows(t) {
		if documented[r.path] {
			t.Errorf("%s:%d: %s documented twice", referencePath, r.line, r.path)
		}
		documented[r.path] = true
		typ, ok := want[r.path]
		switch {
		case !ok:
			t.Errorf("%s:%d: %s is not a field of the configuration", referencePath, r.line, r.path)
		case r.typ != typ:
			t.Errorf("%s:%d: %s is documented as %q; its type is %q", referencePath, r.line, r.path, r.typ, typ)
		}
	}
	var missing []string
	for p, typ := range want {
		if !documented[p] && typ != "block" {
			missing = append(missing, p+" ("+typ+")")
		}
	}
	slices.Sort(missing)
	for _, p := range missing {
		t.Errorf("%s does not document %s", referencePath, p)
	}
}

// defaultsConfig has every optional block of the top level present, so
// that their defaults are applied.
const defaultsConfig = `
xds:
  tls: {cert_file: a.pem, key_file: a-key.pem}
  rest: {listen: "127.0.0.1:18002", eds_config: {cluster_name: bridge_rest}}
outputs:
  filesystem: {dir: files}
egress:
  listener: {port: 10001}
sources:
  - name: static
    file: {path: services.yaml}
`

// applied are the fields whose default is applied where they are used,
// not when the configuration is loaded: their value in effect.
var applied = map[string]func(c *config.Config) any{
	"xds.keepalive.time":        func(c *config.Config) any { return keepalive(c).Time },
	"xds.keepalive.timeout":     func(c *config.Config) any { return keepalive(c).Timeout },
	"xds.keepalive.min_time":    func(c *config.Config) any { return keepalive(c).MinTime },
	"admin.read_header_timeout": func(c *config.Config) any { return app.AdminTimeouts(c.Admin).ReadHeader },
	"admin.read_timeout":        func(c *config.Config) any { return app.AdminTimeouts(c.Admin).Read },
	"admin.write_timeout":       func(c *config.Config) any { return app.AdminTimeouts(c.Admin).Write },
	"admin.idle_timeout":        func(c *config.Config) any { return app.AdminTimeouts(c.Admin).Idle },
	"admin.shutdown_timeout":    func(c *config.Config) any { return app.AdminTimeouts(c.Admin).Shutdown },
	"health_checks.workers": func(c *config.Config) any {
		if c.HealthChecks.Workers == 0 {
			return healthcheck.DefaultWorkers
		}
		return c.HealthChecks.Workers
	},
	"memory_limit": func(c *config.Config) any {
		if s, err := memlimit.Parse(c.MemoryLimit); err == nil && s.Auto {
			return "auto"
		}
		return c.MemoryLimit
	},
}

func keepalive(c *config.Config) xds.Keepalive {
	k := c.XDS.Keepalive
	return xds.Keepalive{Time: k.Time.D(), Timeout: k.Timeout.D(), MinTime: k.MinTime.D()}.WithDefaults()
}

var (
	literalDefault = regexp.MustCompile("^`([^`]+)`$")
	numberDefault  = regexp.MustCompile(`^(\d+)(?: (KiB|MiB|GiB))?$`)
)

// TestConfigReferenceDefaults: a default the reference states as one
// value is the value the configuration gets when the field is left out.
func TestConfigReferenceDefaults(t *testing.T) {
	cfg, err := config.Parse([]byte(defaultsConfig), t.TempDir(), app.SourceTypeNames())
	if err != nil {
		t.Fatal(err)
	}
	if err := app.ResolveOptions(cfg); err != nil {
		t.Fatal(err)
	}
	root := reflect.ValueOf(*cfg)
	checked := 0
	for _, r := range referenceRows(t) {
		if strings.ContainsAny(r.path, "[<") || strings.HasPrefix(r.path, "health_check.") {
			continue // entries of lists and mappings, and blocks decoded by their own packages
		}
		path := r.path
		if p, ok := strings.CutPrefix(path, "tls."); ok {
			path = "xds.tls." + p
		}
		var want string
		if m := literalDefault.FindStringSubmatch(r.deflt); m != nil {
			want = m[1]
		} else if m := numberDefault.FindStringSubmatch(r.deflt); m != nil {
			n, _ := strconv.Atoi(m[1])
			n <<= map[string]int{"": 0, "KiB": 10, "MiB": 20, "GiB": 30}[m[2]]
			want = strconv.Itoa(n)
		} else {
			continue
		}
		if f, ok := applied[path]; ok {
			got := fmt.Sprint(f(cfg))
			if d, err := time.ParseDuration(want); err == nil {
				want = d.String()
			}
			if got != want {
				t.Errorf("%s:%d: %s: documented default %s; the value in effect is %s", referencePath, r.line, r.path, r.deflt, got)
			}
			checked++
			continue
		}
		v, ok := lookup(root, path)
		if !ok {
			t.Errorf("%s:%d: %s: not found in the parsed configuration", referencePath, r.line, r.path)
			continue
		}
		if v.Kind() == reflect.Struct || v.Kind() == reflect.Map || v.Kind() == reflect.Slice {
			continue // a block's default ({}) is its fields'
		}
		if got := format(v); got != canonical(want, v.Type()) {
			t.Errorf("%s:%d: %s: documented default %s; the configuration's is %s", referencePath, r.line, r.path, r.deflt, got)
		}
		checked++
	}
	if checked < 40 {
		t.Errorf("checked %d defaults; the reference states over 40 as values (did the table format change?)", checked)
	}
}

// lookup follows a path of json names from v.
func lookup(v reflect.Value, path string) (reflect.Value, bool) {
	for _, name := range strings.Split(path, ".") {
		for v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return v, false
			}
			v = v.Elem()
		}
		if v.Kind() != reflect.Struct {
			return v, false
		}
		found := false
		for i := range v.NumField() {
			tag, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ",")
			if tag == name {
				v, found = v.Field(i), true
				break
			}
		}
		if !found {
			return v, false
		}
	}
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return v, false
		}
		v = v.Elem()
	}
	return v, true
}

func format(v reflect.Value) string {
	if v.Type() == durationType {
		return time.Duration(v.Int()).String()
	}
	return fmt.Sprint(v.Interface())
}

// canonical writes a documented default as format writes the value.
func canonical(s string, typ reflect.Type) string {
	if typ == durationType {
		if d, err := time.ParseDuration(s); err == nil {
			return d.String()
		}
	}
	return s
}
