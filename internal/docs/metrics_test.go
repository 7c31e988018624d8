package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	docMetric   = regexp.MustCompile(`xdsbridge_[a-z0-9_]+\*?`)
	codeMetric  = regexp.MustCompile(`"(xdsbridge_[a-z0-9_]+)"`)
	htmlComment = regexp.MustCompile(`(?s)<!--.*?-->`)
)

// exportedMetrics returns the metric names written as string literals in
// the repository's Go code, outside tests.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != repoRoot {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range codeMetric.FindAllStringSubmatch(string(b), -1) {
			names[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// TestDocsMetricsExist: every metric the README and docs/*.md name is one
// the code registers (a name ending in _ or * stands for every metric
// with that prefix, and at least one must exist).
func TestDocsMetricsExist(t *testing.T) {
	exported := exportedMetrics(t)
	if len(exported) < 20 {
		t.Fatalf("found %d metric names in the code; the scan is broken", len(exported))
	}
	files, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join(repoRoot, "README.md"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(repoRoot, f)
		doc := htmlComment.ReplaceAllString(string(b), "")
		for _, m := range docMetric.FindAllString(doc, -1) {
			prefix := strings.TrimSuffix(m, "*")
			if prefix != m || strings.HasSuffix(prefix, "_") {
				found := false
				for name := range exported {
					found = found || strings.HasPrefix(name, prefix)
				}
				if !found {
					t.Errorf("%s names %s; no metric has that prefix", rel, m)
				}
				continue
			}
			if !exported[m] {
				t.Errorf("%s names the metric %s, which the code does not register", rel, m)
			}
		}
	}
}
