package policygate

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// knownDefects are the corpus policies the clients still reject because
// of defects known and being fixed, each with the cause it
// must be rejected for (knownCauses' label). Once a fix is merged, its
// policies run clean and must leave this list: a policy listed here that
// runs clean fails the test, so does one rejected for another cause.
var knownDefects = map[string]string{}

// loadCorpus reads dir: policy files (*.yaml) and Consul config entries
// (*.consul.json), sorted by name.
func loadCorpus(t *testing.T, dir string) []policyCase {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(paths)
	var out []policyCase
	for _, p := range paths {
		name := filepath.Base(p)
		consul := strings.HasSuffix(name, ".consul.json")
		if !consul && !strings.HasSuffix(name, ".yaml") {
			t.Fatalf("%s: want *.yaml (a policy file) or *.consul.json (config entries)", p)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, policyCase{Name: name, Consul: consul, Body: b})
	}
	if len(out) == 0 {
		t.Fatalf("%s is empty", dir)
	}
	return out
}

// The committed corpus through the bridge to a delta Envoy, a SotW Envoy
// and grpc-go: every policy published is accepted by every client, or
// refused by the parser, or listed in knownDefects with its cause.
// XDSBRIDGE_GATE_CORPUS=<dir> runs the policies of dir instead (a saved
// run's, say).
func TestPolicyGateCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "corpus")
	if d := os.Getenv("XDSBRIDGE_GATE_CORPUS"); d != "" {
		dir = d
	}
	cases := loadCorpus(t, dir)
	g := startGate(t)
	tl := newTally()
	for i, c := range cases {
		out := g.run(c)
		problems := corpusProblems(c, out)
		if len(problems) > 0 {
			// A client slower than the settle window (a loaded machine)
			// answers the previous policy during this one's: both run
			// again, alone, with a long window, and that decides.
			t.Logf("%s: %s; running it and the policy before again, slowly", c.Name, out.summary())
			g.window = slowSettleWindow
			if i > 0 {
				g.reset(c.Name)
				for _, p := range corpusProblems(cases[i-1], g.run(cases[i-1])) {
					t.Error(p)
				}
			}
			g.reset(c.Name)
			out = g.run(c)
			problems = corpusProblems(c, out)
			g.window = settleWindow
		}
		for _, p := range problems {
			t.Error(p)
		}
		tl.add(c.Name, out)
		t.Logf("%s: %s", c.Name, out.summary())
	}
	t.Logf("%s:\n%s%s", dir, tl, g.envoyMemory())
}

// corpusProblems is what is wrong with a corpus policy's outcome: a
// rejection not listed in knownDefects, or for another cause than listed,
// or a policy listed that ran clean.
func corpusProblems(c policyCase, out outcome) []string {
	want, marked := knownDefects[c.Name]
	switch {
	case out.failed() && !marked:
		return []string{fmt.Sprintf("%s: the clients rejected what the bridge published:\n  %s\npolicy:\n%s", c.Name, strings.Join(append(out.NACKs, out.Stuck), "\n  "), c.Body)}
	case out.failed():
		var ps []string
		for _, got := range causes(out) {
			if got != "known "+want {
				ps = append(ps, fmt.Sprintf("%s: listed in knownDefects as %q, rejected for %q:\n  %s", c.Name, want, got, strings.Join(out.NACKs, "\n  ")))
			}
		}
		return ps
	case marked:
		return []string{fmt.Sprintf("%s runs clean now: remove it from knownDefects (%q)", c.Name, want)}
	}
	return nil
}

// XDSBRIDGE_GATE_N generated policies (seed XDSBRIDGE_GATE_SEED, default
// 1) through the same clients. Each cause of rejection is reported once,
// with its first policy minimised; a rejection of a defect not in
// knownCauses fails the test. XDSBRIDGE_GATE_SAVE=<dir> saves each policy
// rejected (its first, minimised, per cause), XDSBRIDGE_GATE_SAVE_ALL=1
// every policy, as corpus files.
func TestPolicyGateGenerated(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("XDSBRIDGE_GATE_N"))
	if n <= 0 {
		t.Skip("set XDSBRIDGE_GATE_N=<policies> to run generated policies")
	}
	seed := uint64(1)
	if s := os.Getenv("XDSBRIDGE_GATE_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("XDSBRIDGE_GATE_SEED: %v", err)
		}
		seed = v
	}
	save := os.Getenv("XDSBRIDGE_GATE_SAVE")
	saveAll := os.Getenv("XDSBRIDGE_GATE_SAVE_ALL") == "1"
	if save != "" {
		if err := os.MkdirAll(save, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	g := startGate(t)
	gn := newGen(seed)
	tl := newTally()
	var prev policyCase
	for i := range n {
		c := gn.next(i)
		c.Name = strings.Replace(c.Name, "gen-", "s"+strconv.FormatUint(seed, 10)+"-", 1)
		out := g.run(c)
		if cs := causes(out); len(cs) > 0 && tl.failedBy[cs[0]] == 0 && prev.Name != "" && !reproduces(g, c, cs[0]) && reproduces(g, prev, cs[0]) {
			// A client slower than the settle window answered the
			// policy before during this one's.
			t.Logf("%s: %s was %s's", c.Name, cs[0], prev.Name)
			c, out = prev, g.run(prev)
		}
		prev = c
		known := len(tl.failedBy)
		tl.add(c.Name, out)
		if save != "" && saveAll {
			writeCase(t, save, c)
		}
		if !out.failed() || len(tl.failedBy) == known {
			continue
		}
		for _, cs := range causes(out) {
			if tl.example[cs] != c.Name || tl.failedBy[cs] != 1 {
				continue
			}
			m := minimize(c, cs, g.run)
			if strings.HasPrefix(cs, "new: ") {
				t.Errorf("%s: %s\n  %s\nminimised:\n%s", c.Name, cs, strings.Join(out.NACKs, "\n  "), m.Body)
			} else {
				t.Logf("%s: %s\nminimised:\n%s", c.Name, cs, m.Body)
			}
			if save != "" {
				base, ext, _ := strings.Cut(c.Name, ".")
				m.Name = base + "-min." + ext
				writeCase(t, save, m)
			}
		}
	}
	t.Logf("seed %d:\n%s", seed, tl)
}

// reproduces reports whether c, run alone (after the empty policy) with
// a long settle window, is rejected for cause.
func reproduces(g *gate, c policyCase, cause string) bool {
	g.window = slowSettleWindow
	defer func() { g.window = settleWindow }()
	g.reset(c.Name)
	return slices.Contains(causes(g.run(c)), cause)
}

func writeCase(t *testing.T, dir string, c policyCase) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, c.Name), c.Body, 0o644); err != nil {
		t.Fatal(err)
	}
}
