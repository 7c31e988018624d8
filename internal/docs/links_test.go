package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

const repoRoot = "../.."

// link is a Markdown link or image target: [text](target), ![alt](target).
var link = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// codeSpan is inline code, where brackets are not links.
var codeSpan = regexp.MustCompile("`[^`]*`")

// markdownLinks returns the link targets of a Markdown document, with
// their line numbers, outside fenced code blocks and code spans.
func markdownLinks(doc string) (targets []string, lines []int) {
	fenced := false
	for i, l := range strings.Split(doc, "\n") {
		if t := strings.TrimSpace(l); strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		l = codeSpan.ReplaceAllString(l, "")
		for _, m := range link.FindAllStringSubmatch(l, -1) {
			targets = append(targets, m[1])
			lines = append(lines, i+1)
		}
	}
	return targets, lines
}

// anchors returns the heading anchors of a Markdown document as GitHub
// makes them: lower case, punctuation other than '-' and '_' dropped,
// spaces as '-', a repeated one suffixed -1, -2, ...
func anchors(doc string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	for _, l := range strings.Split(doc, "\n") {
		if t := strings.TrimSpace(l); strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~") {
			fenced = !fenced
			continue
		}
		if fenced || !strings.HasPrefix(l, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(l, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[a+"-"+strconv.Itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// TestDocsLinksResolve: every relative link of README.md and docs/*.md
// names a file or directory of the repository, and its #anchor, if any,
// a heading of that Markdown file.
func TestDocsLinksResolve(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join(repoRoot, "README.md"))
	if len(files) < 10 {
		t.Fatalf("found %v; want README.md and the docs/*.md pages", files)
	}
	total := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(repoRoot, f)
		targets, lines := markdownLinks(string(b))
		for i, target := range targets {
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			total++
			path, frag, _ := strings.Cut(target, "#")
			dest := f
			if path != "" {
				dest = filepath.Join(filepath.Dir(f), path)
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s:%d: link %s: %v", rel, lines[i], target, err)
					continue
				}
			}
			if frag == "" {
				continue
			}
			if !strings.HasSuffix(dest, ".md") {
				t.Errorf("%s:%d: link %s: an anchor into a file that is not Markdown", rel, lines[i], target)
				continue
			}
			d, err := os.ReadFile(dest)
			if err != nil {
				t.Errorf("%s:%d: link %s: %v", rel, lines[i], target, err)
				continue
			}
			if !anchors(string(d))[frag] {
				t.Errorf("%s:%d: link %s: no heading with the anchor #%s", rel, lines[i], target, frag)
			}
		}
	}
	if total == 0 {
		t.Fatal("no relative links found")
	}
}

// The anchors are GitHub's.
func TestAnchors(t *testing.T) {
	got := anchors("# A `file`: the source\n## REST-JSON polling\n## Limits\n### Limits\n```\n# not a heading\n```\n## What it serves, and how\n")
	for _, want := range []string{"a-file-the-source", "rest-json-polling", "limits", "limits-1", "what-it-serves-and-how"} {
		if !got[want] {
			t.Errorf("no anchor %q in %v", want, got)
		}
	}
	if got["not-a-heading"] {
		t.Errorf("a line of a code block is a heading: %v", got)
	}
}
