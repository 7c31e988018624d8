package policygate

import (
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// knownCauses name the client rejections of defects known and being
// fixed, by a substring of the client's error detail: regexes RE2
// refuses (syntax, program size), failover targets that list a host of
// the assignment again, outlier detection whose max_ejection_time is
// under its base_ejection_time (given or Envoy's default, 30s). A
// rejection matching none is a new defect.
var knownCauses = []struct{ label, detail string }{
	{"regex", "invalid escape sequence"},
	{"regex", "RE2 program size"},
	{"regex", "nvalid regex"},
	{"failover-duplicate-address", "duplicate endpoint with the same address"},
	{"outlier-base-over-max", "max_ejection_time cannot be smaller than base_ejection_time"},
}

// cause is a rejection's cause: the known defect's label, or "new: "
// and the rejection with what differs between two rejections of the same
// kind (quoted values, numbers) blanked.
func cause(nack string) string {
	client, detail, _ := strings.Cut(nack, ": ")
	kind := "grpc-go"
	if strings.HasPrefix(client, "gate-envoy-") {
		kind = "envoy"
	}
	for _, k := range knownCauses {
		if strings.Contains(detail, k.detail) {
			return "known " + k.label
		}
	}
	if _, typ, ok := strings.Cut(client, " "); ok {
		kind += " " + typ
	}
	return "new: " + kind + ": " + normalize(detail)
}

var (
	quotedRE = regexp.MustCompile(`'[^']*'|"[^"]*"|\x60[^\x60]*\x60`)
	numberRE = regexp.MustCompile(`\b[0-9]+(\.[0-9]+)?\b`)
	indexRE  = regexp.MustCompile(`\[[^\]]*\]`)
)

func normalize(s string) string {
	s = quotedRE.ReplaceAllString(s, "…")
	s = numberRE.ReplaceAllString(s, "N")
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// causes are the distinct causes of an outcome's rejections, sorted.
func causes(o outcome) []string {
	set := map[string]bool{}
	for _, n := range o.NACKs {
		set[cause(n)] = true
	}
	if o.Stuck != "" {
		set["new: stuck: "+normalize(o.Stuck)] = true
	}
	return slices.Sorted(maps.Keys(set))
}

// fieldKind is the field of a "service: field: message" diagnostic or of
// a parser error ("line N: services.<key>.<field>: message"), without
// the service and indices: what kind of input was refused.
func fieldKind(s string) string {
	s = strings.TrimSpace(strings.SplitN(s, "\n", 2)[0])
	if rest, ok := strings.CutPrefix(s, "line "); ok {
		if _, after, ok := strings.Cut(rest, ": "); ok {
			s = after
		}
	}
	field, msg, _ := strings.Cut(s, ": ")
	if strings.HasPrefix(field, "services.") {
		parts := strings.SplitN(field, ".", 3)
		field = "services.*"
		if len(parts) == 3 {
			field += "." + parts[2]
		}
	} else if f, m, ok := strings.Cut(msg, ": "); ok && !strings.Contains(field, " ") {
		// A translator diagnostic: "service: field: message".
		field, msg = f, m
	}
	field = indexRE.ReplaceAllString(field, "[]")
	if field == "" || strings.Contains(field, " ") {
		words := strings.Fields(normalize(msg))
		if len(words) > 6 {
			words = words[:6]
		}
		return "(" + strings.Join(words, " ") + ")"
	}
	return field
}

// tally counts what became of the policies run.
type tally struct {
	ran, clean, refused, withDiags, consulDiags, failed int
	refusedBy, diagBy, failedBy                         map[string]int
	// example is the first case (name) of each failure cause.
	example map[string]string
}

func newTally() *tally {
	return &tally{refusedBy: map[string]int{}, diagBy: map[string]int{}, failedBy: map[string]int{}, example: map[string]string{}}
}

func (t *tally) add(name string, o outcome) {
	t.ran++
	switch {
	case o.Refused != "":
		t.refused++
		t.refusedBy[fieldKind(o.Refused)]++
		return
	case o.failed():
		t.failed++
		for _, c := range causes(o) {
			t.failedBy[c]++
			if t.example[c] == "" {
				t.example[c] = name
			}
		}
	default:
		t.clean++
	}
	if len(o.ConsulDiags) > 0 {
		t.consulDiags++
	}
	if len(o.Diags) > 0 {
		t.withDiags++
		seen := map[string]bool{}
		for _, d := range o.Diags {
			if k := fieldKind(d); !seen[k] {
				seen[k] = true
				t.diagBy[k]++
			}
		}
	}
}

func (t *tally) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d policies: %d published and accepted by every client, %d refused by the parser, %d rejected by a client (or never settled)\n",
		t.ran, t.clean, t.refused, t.failed)
	fmt.Fprintf(&b, "published with translator diagnostics: %d; Consul entries converted with diagnostics: %d\n", t.withDiags, t.consulDiags)
	section := func(title string, m map[string]int, ex map[string]string) {
		if len(m) == 0 {
			return
		}
		fmt.Fprintf(&b, "%s:\n", title)
		keys := slices.Sorted(maps.Keys(m))
		sort.SliceStable(keys, func(i, j int) bool { return m[keys[i]] > m[keys[j]] })
		for _, k := range keys {
			if ex != nil {
				fmt.Fprintf(&b, "  %5d  %s (first: %s)\n", m[k], k, ex[k])
			} else {
				fmt.Fprintf(&b, "  %5d  %s\n", m[k], k)
			}
		}
	}
	section("rejected by clients, by cause", t.failedBy, t.example)
	section("refused by the parser, by field", t.refusedBy, nil)
	section("translator diagnostics, by field (policies)", t.diagBy, nil)
	return b.String()
}

// minimize removes what it can of a failing case (services, entries,
// fields, list items, one at a time) while run still fails with the
// cause given; it returns the smallest case found.
func minimize(c policyCase, want string, run func(policyCase) outcome) policyCase {
	var tree any
	if c.Consul {
		if json.Unmarshal(c.Body, &tree) != nil {
			return c
		}
	} else if yaml.Unmarshal(c.Body, &tree) != nil {
		return c
	}
	encode := func(v any) []byte {
		var b []byte
		var err error
		if c.Consul {
			b, err = json.MarshalIndent(v, "", "  ")
		} else {
			b, err = yaml.Marshal(v)
		}
		if err != nil {
			return nil
		}
		return b
	}
	still := func(v any) bool {
		body := encode(v)
		if body == nil {
			return false
		}
		o := run(policyCase{Name: c.Name, Consul: c.Consul, Body: body})
		for _, got := range causes(o) {
			if got == want {
				return true
			}
		}
		return false
	}
	for progress := true; progress; {
		progress = false
		for _, cand := range removals(tree) {
			if still(cand) {
				tree, progress = cand, true
				break
			}
		}
	}
	return policyCase{Name: c.Name, Consul: c.Consul, Body: encode(tree)}
}

// removals are copies of v, each with one map entry or list item less,
// at any depth (but never the top-level "services" key).
func removals(v any) []any {
	var out []any
	switch x := v.(type) {
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(x)) {
			if k != "services" && k != "Kind" && k != "Name" {
				c := copyMap(x)
				delete(c, k)
				out = append(out, c)
			}
			for _, sub := range removals(x[k]) {
				c := copyMap(x)
				c[k] = sub
				out = append(out, c)
			}
		}
	case []any:
		for i := range x {
			c := append(append([]any{}, x[:i]...), x[i+1:]...)
			out = append(out, c)
			for _, sub := range removals(x[i]) {
				c := append([]any{}, x...)
				c[i] = sub
				out = append(out, c)
			}
		}
	}
	return out
}

func copyMap(m map[string]any) map[string]any {
	c := make(map[string]any, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}
