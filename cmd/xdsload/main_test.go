package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestCurvesFlags: "xdsload curves" refuses a missing or malformed
// -sweep and a missing -out before running anything.
func TestCurvesFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"curves", "-out", "x"}, "-sweep and -out are required"},
		{[]string{"curves", "-sweep", "clients=1,2"}, "-sweep and -out are required"},
		{[]string{"curves", "-sweep", "nodes=1,2", "-out", "x"}, "want clients=N"},
		{[]string{"curves", "-sweep", "clients=8,4", "-out", "x"}, "values must increase"},
	} {
		var out, errb bytes.Buffer
		if rc := runMain(tc.args, &out, &errb); rc != 2 || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, rc, errb.String(), tc.want)
		}
	}
}
