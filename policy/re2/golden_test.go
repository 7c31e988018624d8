package re2

import (
	"bufio"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// goldenEntry is one regex and Envoy 1.40.0's answer for it: the RE2
// program size it reported, or the error it refused the regex with.
type goldenEntry struct {
	Regex string `json:"regex"`
	Size  int    `json:"size,omitempty"`
	Error string `json:"error,omitempty"`
}

const goldenFile = "testdata/envoy.golden"

func readGolden(t *testing.T) []goldenEntry {
	t.Helper()
	f, err := os.Open(goldenFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []goldenEntry
	s := bufio.NewScanner(f)
	s.Buffer(nil, 1<<20)
	for s.Scan() {
		var e goldenEntry
		if err := json.Unmarshal(s.Bytes(), &e); err != nil {
			t.Fatalf("%s: %v", goldenFile, err)
		}
		out = append(out, e)
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// The program size computed here is the one Envoy reported for every
// regex of the golden file, and a regex is refused exactly when Envoy
// refused it.
func TestProgramSizeMatchesEnvoyGolden(t *testing.T) {
	entries := readGolden(t)
	if len(entries) < 300 {
		t.Fatalf("%d entries in %s", len(entries), goldenFile)
	}
	compareWithEnvoy(t, entries)
}

// compareWithEnvoy reports every regex whose computed answer differs
// from Envoy's and returns how many agree exactly.
func compareWithEnvoy(t *testing.T, answers []goldenEntry) int {
	t.Helper()
	agree := 0
	for _, e := range answers {
		n, err := ProgramSize(e.Regex)
		switch {
		case e.Error != "" && err == nil:
			t.Errorf("%q: size %d; Envoy refuses it: %s", e.Regex, n, e.Error)
		case e.Error == "" && err != nil:
			t.Errorf("%q: %v; Envoy accepts it (size %d)", e.Regex, err, e.Size)
		case e.Error == "" && n != e.Size:
			t.Errorf("%q: size %d, Envoy counts %d", e.Regex, n, e.Size)
		default:
			agree++
		}
	}
	return agree
}

// The refusals name what RE2 names.
func TestCheckWording(t *testing.T) {
	for re, want := range map[string]string{
		`/x\x{100}`:   `RE2 refuses it: invalid escape sequence: \x{100`,
		`\777`:        `RE2 refuses it: invalid escape sequence: \777`,
		`[\C]`:        `RE2 refuses it: invalid escape sequence: \C`,
		`(?:a+?){33}`: `its RE2 program has 102 instructions; Envoy refuses more than 100 (re2.max_program_size.error_level)`,
	} {
		err := Check(re, DefaultMaxProgramSize)
		if err == nil || err.Error() != want {
			t.Errorf("Check(%q) = %v, want %s", re, err, want)
		}
	}
	if err := Check(`(?:a+?){32}`, DefaultMaxProgramSize); err != nil {
		t.Errorf("(?:a+?){32}: %v", err)
	}
}

// A program far over the limit is refused without being built whole,
// with a lower bound of its size; one that compiles to very many
// instructions that match nothing is refused as too large to count.
func TestCheckLargePrograms(t *testing.T) {
	if n, err := ProgramSize(`\pL{1000}`); err != nil || n != 7004 {
		t.Fatalf(`\pL{1000}: %d, %v`, n, err)
	}
	err := Check(`\pL{1000}`, DefaultMaxProgramSize)
	if err == nil || !strings.HasPrefix(err.Error(), "its RE2 program has at least ") {
		t.Errorf(`\pL{1000}: %v`, err)
	}
	dead := strings.Repeat(`(?:[^\x00-\xff]*){1000}`, 20)
	if n, err := ProgramSize(dead); err != nil || n > DefaultMaxProgramSize {
		t.Fatalf("%d, %v", n, err)
	}
	if err := Check(dead, DefaultMaxProgramSize); err != errTooLargeToCount {
		t.Errorf("%v, want %v", err, errTooLargeToCount)
	}
}
