package re2

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/xdsbridge/xdsbridge/internal/testbin"
)

var (
	envoySize  = regexp.MustCompile(`RE2 program size of (\d+) > max program size of 0 set for the warn`)
	envoyError = regexp.MustCompile(`error initializing configuration '[^']*': (.*)`)
)

// askEnvoy returns Envoy's answer for each regex, from `envoy --mode
// validate` on a bootstrap with one route per regex. The runtime sets the
// warning level to 0, so that Envoy logs every regex's program size, and
// the error level out of reach; a regex RE2 refuses stops the run, and
// the run starts again after it.
func askEnvoy(t *testing.T, envoy string, regexes []string) []goldenEntry {
	t.Helper()
	dir := t.TempDir()
	out := make([]goldenEntry, 0, len(regexes))
	for todo := regexes; len(todo) > 0; {
		routes := make([]any, len(todo))
		for i, re := range todo {
			routes[i] = map[string]any{
				"match":           map[string]any{"safe_regex": map[string]any{"regex": re}},
				"direct_response": map[string]any{"status": 200},
			}
		}
		cfg := map[string]any{
			"layered_runtime": map[string]any{"layers": []any{map[string]any{
				"name": "re2",
				"static_layer": map[string]any{
					"re2.max_program_size.warn_level":  0,
					"re2.max_program_size.error_level": 4294967294,
				},
			}}},
			"static_resources": map[string]any{"listeners": []any{map[string]any{
				"name":    "re2",
				"address": map[string]any{"socket_address": map[string]any{"address": "127.0.0.1", "port_value": 20000}},
				"filter_chains": []any{map[string]any{"filters": []any{map[string]any{
					"name": "envoy.filters.network.http_connection_manager",
					"typed_config": map[string]any{
						"@type":        "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
						"stat_prefix":  "re2",
						"route_config": map[string]any{"virtual_hosts": []any{map[string]any{"name": "re2", "domains": []string{"*"}, "routes": routes}}},
						"http_filters": []any{map[string]any{
							"name":         "envoy.filters.http.router",
							"typed_config": map[string]any{"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"},
						}},
					},
				}}}},
			}}},
		}
		b, err := json.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "bootstrap.json")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		log, _ := exec.Command(envoy, "--mode", "validate", "-c", path, "-l", "warning").CombinedOutput()
		sizes := envoySize.FindAllSubmatch(log, -1)
		if len(sizes) > len(todo) {
			t.Fatalf("envoy reported %d sizes for %d regexes", len(sizes), len(todo))
		}
		for i, m := range sizes {
			n, _ := strconv.Atoi(string(m[1]))
			out = append(out, goldenEntry{Regex: todo[i], Size: n})
		}
		todo = todo[len(sizes):]
		if len(todo) == 0 {
			break
		}
		m := envoyError.FindSubmatch(log)
		if m == nil {
			t.Fatalf("envoy stopped at %q without an error:\n%s", todo[0], log)
		}
		out = append(out, goldenEntry{Regex: todo[0], Error: string(m[1])})
		todo = todo[1:]
	}
	return out
}

// The golden file is Envoy's answer today: re-derived from the real
// Envoy. Each regex Envoy refuses costs a run of its own, so by default
// two of each kind of refusal are asked (about 10 s in all);
// XDSBRIDGE_RE2_GOLDEN_ALL=1 asks them all, and
// XDSBRIDGE_RE2_GOLDEN_UPDATE=1 rewrites the file from Envoy's answers.
func TestGoldenAgainstEnvoy(t *testing.T) {
	envoy := testbin.Envoy(t)
	update := os.Getenv("XDSBRIDGE_RE2_GOLDEN_UPDATE") == "1"
	all := update || os.Getenv("XDSBRIDGE_RE2_GOLDEN_ALL") == "1"
	var golden []goldenEntry
	kinds := map[string]int{}
	for _, e := range readGolden(t) {
		if e.Error != "" && !all {
			kind, _, _ := strings.Cut(e.Error, ":")
			if kinds[kind]++; kinds[kind] > 2 {
				continue
			}
		}
		golden = append(golden, e)
	}
	regexes := make([]string, len(golden))
	for i, e := range golden {
		regexes[i] = e.Regex
	}
	answers := askEnvoy(t, envoy, regexes)
	if update {
		var b strings.Builder
		for _, e := range answers {
			line, err := json.Marshal(e)
			if err != nil {
				t.Fatal(err)
			}
			b.Write(line)
			b.WriteByte('\n')
		}
		if err := os.WriteFile(goldenFile, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i, e := range answers {
		g := golden[i]
		if e.Size != g.Size || (e.Error == "") != (g.Error == "") {
			t.Errorf("%q: Envoy answers %+v, the golden file %+v", e.Regex, e, g)
		}
	}
	t.Logf("%d regexes, %d agree with Envoy", len(answers), compareWithEnvoy(t, answers))
}

// A longer comparison on random regexes near the limit:
// XDSBRIDGE_RE2_RANDOM=N runs N of them (seed XDSBRIDGE_RE2_SEED).
func TestRandomRegexesAgainstEnvoy(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("XDSBRIDGE_RE2_RANDOM"))
	if n <= 0 {
		t.Skip("set XDSBRIDGE_RE2_RANDOM=N to compare N random regexes with Envoy")
	}
	envoy := testbin.Envoy(t)
	seed, _ := strconv.ParseUint(os.Getenv("XDSBRIDGE_RE2_SEED"), 10, 64)
	rng := rand.New(rand.NewPCG(seed, 25))
	atoms := []string{"a", "[a-z]", ".", `\d`, `\w`, `\s`, "[^/]", "(?i:k)", "[0-9a-f]", "(?:ab|cd)", "(a)", `\b`, "^", "$",
		"[[:alpha:]]", `\pN`, "(?s:.)", `\C`, "[\u00e9]", "(?:a|b|c)", "(?i:[a-z\u00e0])", `\xff`, `[^\x00-\x1f]`, "(?:a*)", `\Qa.\E`}
	quants := []string{"", "*", "+", "?", "*?", "+?", "??", "{2}", "{3,}", "{1,4}", "{0,3}", "{2,5}?", "{5}", "{1,9}"}
	seen := map[string]bool{}
	var regexes []string
	for len(regexes) < n {
		var b strings.Builder
		for k := 1 + rng.IntN(9); k > 0; k-- {
			b.WriteString(atoms[rng.IntN(len(atoms))])
			b.WriteString(quants[rng.IntN(len(quants))])
		}
		if re := b.String(); !seen[re] {
			seen[re] = true
			regexes = append(regexes, re)
		}
	}
	answers := askEnvoy(t, envoy, regexes)
	agree := compareWithEnvoy(t, answers)
	fmt.Printf("%d random regexes, %d agree with Envoy\n", len(answers), agree)
}
