package policy

import (
	"encoding/json"
	"os"
	"testing"
)

// FuzzParseFile: no input panics ParseFile, and a file it accepts means
// the same after a JSON round trip (what it accepted is what it holds):
// its JSON form parses, to the same JSON.
func FuzzParseFile(f *testing.F) {
	full, err := os.ReadFile("testdata/full.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(full)
	f.Add([]byte("services: {}\n"))
	f.Add([]byte("services:\n  'a*':\n    routes: [{match: {regex: 'x+'}, split: [{weight: 1.5, subset: a}]}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := ParseFile(data)
		if err != nil {
			return
		}
		j, err := json.Marshal(file)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		again, err := ParseFile(j)
		if err != nil {
			t.Fatalf("accepted, but not its JSON form: %v\n%s", err, j)
		}
		// Compared as JSON: an empty list (routes: []) and an absent
		// one mean the same, and the JSON form leaves both out.
		j2, err := json.Marshal(again)
		if err != nil {
			t.Fatalf("marshal again: %v", err)
		}
		if string(j) != string(j2) {
			t.Fatalf("round trip changed the policy:\n%s\n%s", j, j2)
		}
	})
}
