package decode

import "testing"

func TestLine(t *testing.T) {
	doc := []byte(`services:
  web.internal:
    routes:
      - match: {prefix: /a}
      - match:
          headers:
            - name: x-tenant
              exact: test
    timeout: 2s
`)
	for _, c := range []struct {
		path []string
		want int
	}{
		{nil, 1},
		{[]string{"services"}, 1},
		{[]string{"services", "web.internal"}, 2},
		{[]string{"services", "web.internal", "routes", "[1]", "match", "headers", "[0]", "exact"}, 8},
		{[]string{"services", "web.internal", "routes", "[1]", "match"}, 5},
		{[]string{"services", "web.internal", "timeout"}, 9},
		// Beyond the document: the deepest value found.
		{[]string{"services", "web.internal", "routes", "[7]", "match"}, 3},
		{[]string{"services", "api"}, 1},
	} {
		if got := Line(doc, c.path...); got != c.want {
			t.Errorf("Line(%q) = %d; want %d", c.path, got, c.want)
		}
	}
	if got := Line([]byte("a: [unclosed"), "a"); got != 0 {
		t.Errorf("a document that does not parse: line %d; want 0", got)
	}
	// JSON is YAML.
	if got := Line([]byte("{\n \"services\": {\n  \"web\": {\"timeout\": \"1s\"}}}"), "services", "web", "timeout"); got != 3 {
		t.Errorf("JSON: line %d; want 3", got)
	}
}

func TestKeys(t *testing.T) {
	doc := []byte("services:\n  web: {}\n  \"api\": {}\n  yes: {}\nother: 1\n")
	got := Keys(doc, "services")
	want := []Key{{"web", 2, 3}, {"api", 3, 3}, {"true", 4, 3}}
	if len(got) != len(want) {
		t.Fatalf("Keys = %v; want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("Keys[%d] = %v; want %v", i, got[i], want[i])
		}
	}
	if got := Keys(doc, "other"); got != nil {
		t.Errorf("Keys of a scalar = %v; want nil", got)
	}
	if got := Keys(doc, "missing"); got != nil {
		t.Errorf("Keys of a missing path = %v; want nil", got)
	}
}

func TestPositions(t *testing.T) {
	doc := []byte("services:\n  web:\n    routes:\n      - {match: {prefix: /}}\n")
	got := Positions(doc, []string{"services", "web", "routes", "[0]", "match"}, []string{"services", "api"}, nil)
	want := []Pos{{4, 10}, {1, 1}, {1, 1}}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("Positions[%d] = %v; want %v", i, got[i], want[i])
		}
	}
	if got := Positions([]byte("a: [unclosed"), []string{"a"}); got[0] != (Pos{}) {
		t.Errorf("a document that does not parse: %v; want 0, 0", got[0])
	}
}
