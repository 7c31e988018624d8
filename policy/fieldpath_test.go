package policy

import (
	"strings"
	"testing"
)

// A service key with control bytes is shown escaped in the field path of
// a check's error, not sent to the terminal raw.
func TestFieldPathEscapesControlBytes(t *testing.T) {
	_, err := ParseFile([]byte("services:\n  \"w\\x1bc\":\n    protocol: h3\n"))
	want := `line 3, column 5: services."w\x1bc".protocol: unknown protocol "h3"`
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error %q; want it to start with %q", err, want)
	}
}

// A weight that is not a finite number is refused with its line, column
// and path (it was "json: unsupported value: NaN"), and a number too large
// for its field names the whole path.
func TestNonFiniteAndOverflowNameTheField(t *testing.T) {
	for in, want := range map[string]string{
		"services:\n  web:\n    split:\n      - {weight: .nan, service: a}\n":        "line 4, column 10: services.web.split[0].weight: expected a finite number, got .nan",
		"services:\n  web:\n    retry: {retry_on: [5xx], num_retries: 4294967296}\n": "line 3, column 30: services.web.retry.num_retries: expected a whole number from 0 to 4294967295, got 4294967296",
	} {
		_, err := ParseFile([]byte(in))
		if err == nil || err.Error() != want {
			t.Errorf("%q:\n got %v\nwant %s", in, err, want)
		}
	}
}
